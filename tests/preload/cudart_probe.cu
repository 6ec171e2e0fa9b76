// cudart_probe.cu - NVIDIA's own runtime (static or shared cudart) reaching
// cuInit through the driver; built by `make preload-nvcc`.
#include <cstdio>
#include <cuda_runtime.h>

int main()
{
    int n = -1;
    cudaError_t e = cudaGetDeviceCount(&n);
    std::printf("count-err=%d n=%d\n", (int)e, n);
    e = cudaFree(0);
    std::printf("free-err=%d\n", (int)e);
    return 0;
}
