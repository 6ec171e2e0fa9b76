/*
 * securecheck LIB - dlopen()s libgpuoffload.so and calls its dgemm_
 * (100x100). Installed set-user-ID root and run by another user, it is a
 * secure-execution process (AT_SECURE), as a setuid program that has the
 * library through /etc/ld.so.preload: the library must then ignore the
 * caller's GPU_OFFLOAD_* environment. Prints "ok" when the result is right.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>

#define N 100
static double a[N * N], b[N * N], c[N * N];

typedef void gemm_t(const char *, const char *, const int *, const int *,
		    const int *, const double *, const double *, const int *,
		    const double *, const int *, const double *, double *,
		    const int *, size_t, size_t);

int main(int argc, char **argv)
{
	void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
	gemm_t *gemm = h ? (gemm_t *)dlsym(h, "dgemm_") : NULL;
	int n = N;
	double one = 1, zero = 0, d = 0;

	if (!gemm)
		return 2;
	for (int i = 0; i < N * N; i++) {
		a[i] = sin(i * 0.3);
		b[i] = i % (N + 1) == 0;        /* the identity */
	}
	gemm("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
	for (int i = 0; i < N * N; i++)
		d = fmax(d, fabs(c[i] - a[i]));
	printf("%s\n", d == 0 ? "ok" : "WRONG");
	return d != 0;
}
