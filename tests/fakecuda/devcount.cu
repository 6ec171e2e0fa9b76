// devcount.cu - trivial CUDA runtime client for the fake driver tests:
// prints what NVIDIA's own runtime (cudart) reports through the fake.
#include <cstdio>
#include <cuda_runtime.h>

int main()
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    printf("err=%d name=%s count=%d\n", (int)e, cudaGetErrorName(e), n);
    return 0;
}
