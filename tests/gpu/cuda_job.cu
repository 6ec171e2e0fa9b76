// cuda_job.cu - an nvcc-built job of the GPU scenario set (tests/gpu/run.sh),
// built twice: default static cudart and --cudart shared. A saxpy kernel
// launched ITERS times on 16M floats, checked exactly (y = 2 + ITERS).
//   cuda_job [ITERS]
//   cuda_job query   cudaGetDeviceCount + cudaGetDeviceProperties only (no
//                    context), journaled as info; result ok=1 if one device
#include <cuda_runtime.h>
#include <string.h>
#include "gjournal.h"

__global__ void saxpy(int n, float a, const float *x, float *y)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}

__global__ void fill(int n, float v, float *p)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = v;
}

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "cuda_job: %s: %s\n", #call, cudaGetErrorString(e_)); \
	gj_write(0, "result", "ok=0 err=%d", (int)e_); return 1; } } while (0)

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 4000, n = 1 << 24, bad = 0;
	int rtv = 0, drv = 0, blocks = (n + 255) / 256;
	long long pre = gj_now(), init;
	float *x, *y, *h;

	if (argc > 1 && !strcmp(argv[1], "query")) {
		cudaDeviceProp prop;
		int count = 0;

		CK(cudaGetDeviceCount(&count));
		CK(cudaGetDeviceProperties(&prop, 0));
		gj_write(0, "info", "count=%d cc=%d.%d call_ns=%lld", count,
			 prop.major, prop.minor, gj_now() - pre);
		gj_write(0, "result", "ok=%d count=%d", count == 1, count);
		return count != 1;
	}
	CK(cudaGetDeviceCount(&bad)); /* cuInit happens in here */
	init = gj_now();
	CK(cudaFree(0));
	CK(cudaDeviceSynchronize());
	gj_begin(0, pre, init);
	CK(cudaMalloc(&x, n * sizeof(float)));
	CK(cudaMalloc(&y, n * sizeof(float)));
	fill<<<blocks, 256>>>(n, 1.0f, x);
	fill<<<blocks, 256>>>(n, 2.0f, y);
	for (int k = 0; k < iters; k++) {
		saxpy<<<blocks, 256>>>(n, 1.0f, x, y);
		if (k % 500 == 499) {
			CK(cudaDeviceSynchronize());
			gj_tick();
		}
	}
	CK(cudaGetLastError());
	h = (float *)malloc(n * sizeof(float));
	CK(cudaMemcpy(h, y, n * sizeof(float), cudaMemcpyDeviceToHost));
	CK(cudaDeviceSynchronize());
	gj_end();
	bad = 0;
	for (int i = 0; i < n; i++)
		bad += h[i] != 2.0f + (float)iters;
	cudaRuntimeGetVersion(&rtv);
	cudaDriverGetVersion(&drv);
	gj_write(0, "result", "ok=%d wrong=%d iters=%d runtime=%d driver=%d",
		 !bad, bad, iters, rtv, drv);
	printf("cuda_job: %d wrong of %d, runtime %d driver %d\n", bad, n, rtv,
	       drv);
	return bad != 0;
}
