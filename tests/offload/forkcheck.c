/*
 * forkcheck - a 100x100 dgemm_ (through dlsym(RTLD_DEFAULT): the wrapper
 * under LD_PRELOAD), then fork(); the child does the same dgemm_ and
 * checks its result against the parent's. Prints "parent ok" and "child
 * ok"; exits nonzero if the child's result is wrong or it failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 100
static double a[N * N], b[N * N], c[N * N], c2[N * N];

typedef void gemm_t(const char *, const char *, const int *, const int *,
		    const int *, const double *, const double *, const int *,
		    const double *, const int *, const double *, double *,
		    const int *, size_t, size_t);

int main(void)
{
	gemm_t *gemm = (gemm_t *)dlsym(RTLD_DEFAULT, "dgemm_");
	int n = N, st;
	double one = 1, zero = 0;
	pid_t pid;

	if (!gemm)
		return 2;
	for (int i = 0; i < N * N; i++) {
		a[i] = sin(i * 0.3);
		b[i] = cos(i * 0.7);
	}
	gemm("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
	printf("parent ok\n");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0) {
		double d = 0;
		gemm("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c2, &n, 1, 1);
		for (int i = 0; i < N * N; i++)
			d = fmax(d, fabs(c2[i] - c[i]));
		printf("child %s\n", d < 1e-9 ? "ok" : "WRONG");
		fflush(stdout);
		_exit(d < 1e-9 ? 0 : 1);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return 3;
	return WEXITSTATUS(st);
}
