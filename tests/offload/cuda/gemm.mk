# tests/offload/cuda/gemm.mk - what the tests of the CUDA backend's gemm
# pipeline (tests/offload/cuda/test_gemm_pipeline.py) need beyond
# small.mk's stand-ins: gemmpipe, calls of ?gemm_ checked exactly, linked
# with the system's BLAS. `make gemm-tests` builds it.
#
# Included by the top-level Makefile (CC, WARN, CFLAGS, B).

GEMMP_SAVED_GOAL := $(.DEFAULT_GOAL)

$(B)/tests/offload/gemmpipe: tests/offload/cuda/gemmpipe.c tests/offload/cuda/pipeval.h
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< -Wl,--no-as-needed -l:libblas.so.3 -lm

.PHONY: gemm-tests
gemm-tests: $(B)/tests/offload/gemmpipe

.DEFAULT_GOAL := $(GEMMP_SAVED_GOAL)
