/*
 * fakelibs.c - stand-ins for libcublas.so.13 and libcusolver.so.12 with
 * just the functions the CUDA backend's start() resolves, so that the
 * tests can put them where the backend's search should find them (a
 * GPU_OFFLOAD_CUDA_PATH directory, pip's nvidia/<x>/lib layout) on a
 * machine without CUDA. Used with the fake driver, whose cuStreamCreate
 * fails first, so none of these is ever called; they fail if they are.
 */
#define F(name) int name(void); int name(void) { return 1; }
F(cublasCreate_v2)
F(cublasDestroy_v2)
F(cublasSetStream_v2)
F(cublasSetPointerMode_v2)
F(cusolverDnCreate)
F(cusolverDnDestroy)
F(cusolverDnSetStream)
F(cusolverDnCreateParams)
F(cusolverDnDestroyParams)
