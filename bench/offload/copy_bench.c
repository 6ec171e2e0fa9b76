/*
 * copy_bench - numpy's linearization copies through libgpuoffload.so's
 * ?copy wrapper: a C-order n x n float64 matrix gathered into Fortran
 * order with n calls dcopy(n, a + j, incx = n, b + j*n, 1), and scattered
 * back with n calls dcopy(n, b + j*n, 1, a + j, incy = n), exactly as
 * numpy's umath_linalg does per matrix. Side by side in one run, each
 * configuration in its own child process (the engine reads its settings
 * once per process), rounds interleaved so that a noisy machine hurts
 * them alike:
 *
 *   plain    no libgpuoffload.so: the CPU library alone
 *   off      under the library, GPU_OFFLOAD_COPY_THREADS=0 (the CPU
 *            library behind the wrapper)
 *   tN       GPU_OFFLOAD_COPY_THREADS=N (the engine, N threads)
 *   default  the engine with its default thread count
 *
 * copy_bench --lib LIBGPUOFFLOAD [--blas LIB] [--sizes 4096,...]
 *            [--threads 1,2,4,8] [--rounds 2]
 *
 * The CPU library: --blas, else libblas.so.3, else numpy's bundled
 * OpenBLAS (python3 finds it); its ILP64 names (scipy_dcopy_64_) when it
 * has them, as numpy's wheels call. Matrices are madvise(MADV_HUGEPAGE)
 * as numpy's large arrays are. Prints one line per size and
 * configuration: the best of the rounds, gather and scatter, in ms.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchclock.h"

typedef void copy32_t(const int *, const double *, const int *, double *, const int *);
typedef void copy64_t(const int64_t *, const double *, const int64_t *, double *,
		      const int64_t *);

static double *big(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	madvise(p, bytes, MADV_HUGEPAGE);
	memset(p, 0, bytes);
	return p;
}

/* The child: one configuration, `rounds` gathers and scatters of n. */
static int child(const char *blas, int n, int rounds)
{
	void *h = dlopen(blas, RTLD_NOW | RTLD_GLOBAL);
	copy64_t *c64;
	copy32_t *c32 = NULL;
	size_t bytes = (size_t)n * (size_t)n * sizeof(double);
	double *a, *b, best_g = 1e9, best_s = 1e9;
	int bad = 0;

	if (!h) {
		fprintf(stderr, "copy_bench: %s\n", dlerror());
		return 2;
	}
	/* through the wrapper when preloaded: RTLD_DEFAULT finds it first */
	c64 = (copy64_t *)dlsym(RTLD_DEFAULT, "scipy_dcopy_64_");
	if (!c64 || !dlsym(h, "scipy_dcopy_64_")) {
		c64 = NULL;
		c32 = (copy32_t *)dlsym(RTLD_DEFAULT, "dcopy_");
	}
	if (!c64 && !c32) {
		fprintf(stderr, "copy_bench: no dcopy in %s\n", blas);
		return 2;
	}
	a = big(bytes);
	b = big(bytes);
	for (size_t i = 0; i < (size_t)n * (size_t)n; i++)
		a[i] = (double)i;
	for (int r = 0; r <= rounds; r++) {    /* round 0: warm-up */
		double t0 = now(), t1, t2;
		for (int j = 0; j < n; j++) {
			if (c64) {
				int64_t nn = n, inc = n, one = 1;
				c64(&nn, a + j, &inc, b + (size_t)j * (size_t)n, &one);
			} else {
				int nn = n, inc = n, one = 1;
				c32(&nn, a + j, &inc, b + (size_t)j * (size_t)n, &one);
			}
		}
		t1 = now();
		for (int j = 0; j < n; j++) {
			if (c64) {
				int64_t nn = n, inc = n, one = 1;
				c64(&nn, b + (size_t)j * (size_t)n, &one, a + j, &inc);
			} else {
				int nn = n, inc = n, one = 1;
				c32(&nn, b + (size_t)j * (size_t)n, &one, a + j, &inc);
			}
		}
		t2 = now();
		if (r == 0) {
			for (int k = 0; k < 1000; k++) {
				size_t i = (size_t)rand() % (size_t)n, j = (size_t)rand() % (size_t)n;
				bad += b[j * (size_t)n + i] != (double)(i * (size_t)n + j) ||
				       a[i * (size_t)n + j] != (double)(i * (size_t)n + j);
			}
			continue;
		}
		if (t1 - t0 < best_g)
			best_g = t1 - t0;
		if (t2 - t1 < best_s)
			best_s = t2 - t1;
	}
	printf("%.3f %.3f %d %s\n", best_g * 1e3, best_s * 1e3, bad,
	       c64 ? "scipy_dcopy_64_" : "dcopy_");
	return 0;
}

/* The CPU library: libblas.so.3, else numpy's bundled OpenBLAS. */
static int find_blas(char *out, size_t len)
{
	static const char *const py[] = {
		"/opt/torch/.venv/bin/python3", "python3", "/usr/bin/python3" };
	void *h = dlopen("libblas.so.3", RTLD_NOW | RTLD_LOCAL);

	if (h) {
		dlclose(h);
		snprintf(out, len, "libblas.so.3");
		return 0;
	}
	for (unsigned i = 0; i < sizeof py / sizeof py[0]; i++) {
		char cmd[512];
		FILE *f;
		snprintf(cmd, sizeof cmd, "%s -c 'import numpy, glob, os; "
			 "d = os.path.join(os.path.dirname(numpy.__file__), os.pardir, \"numpy.libs\"); "
			 "print(sorted(glob.glob(os.path.join(d, \"libscipy_openblas*.so\")))[0])' 2>/dev/null",
			 py[i]);
		if ((f = popen(cmd, "r"))) {
			int ok = fgets(out, (int)len, f) != NULL;
			pclose(f);
			if (ok && out[0] == '/') {
				out[strcspn(out, "\n")] = 0;
				return 0;
			}
		}
	}
	return -1;
}

struct conf {
	char name[16];
	int preload;
	int threads;            /* -1: default */
	double g, s;            /* best over the rounds */
	char fn[32];
};

static int run_child(const char *self, const char *lib, const char *blas,
		     struct conf *c, int n)
{
	int fd[2], st;
	pid_t pid;
	char buf[256] = "", narg[16];
	double g, s;
	int bad;
	FILE *f;

	if (pipe(fd))
		return -1;
	snprintf(narg, sizeof narg, "%d", n);
	pid = fork();
	if (pid == 0) {
		char th[16];
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		unsetenv("LD_PRELOAD");
		unsetenv("GPU_OFFLOAD_COPY_THREADS");
		if (c->preload)
			setenv("LD_PRELOAD", lib, 1);
		if (c->threads >= 0) {
			snprintf(th, sizeof th, "%d", c->threads);
			setenv("GPU_OFFLOAD_COPY_THREADS", th, 1);
		}
		execl(self, self, "--child", blas, narg, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	f = fdopen(fd[0], "r");
	if (!f || !fgets(buf, sizeof buf, f))
		buf[0] = 0;
	if (f)
		fclose(f);
	waitpid(pid, &st, 0);
	if (sscanf(buf, "%lf %lf %d %31s", &g, &s, &bad, c->fn) != 4 || bad) {
		fprintf(stderr, "copy_bench: %s failed (%s)\n", c->name,
			bad ? "wrong results" : "no result");
		return -1;
	}
	if (g < c->g)
		c->g = g;
	if (s < c->s)
		c->s = s;
	return 0;
}

int main(int argc, char **argv)
{
	const char *lib = NULL, *sizes = "4096", *threads = "1,2,4,8";
	char blas[512] = "", self[4096];
	int rounds = 2;
	struct conf cf[24] = { { "", 0, 0, 0, 0, "" } };
	int nc = 0;
	ssize_t sl;

	if (argc == 4 && !strcmp(argv[1], "--child"))
		return child(argv[2], atoi(argv[3]), 2);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--lib"))
			lib = argv[i + 1];
		else if (!strcmp(argv[i], "--blas"))
			snprintf(blas, sizeof blas, "%s", argv[i + 1]);
		else if (!strcmp(argv[i], "--sizes"))
			sizes = argv[i + 1];
		else if (!strcmp(argv[i], "--threads"))
			threads = argv[i + 1];
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
	}
	if (!lib) {
		fprintf(stderr, "usage: copy_bench --lib LIBGPUOFFLOAD [--blas LIB] [--sizes 4096] [--threads 1,2,4,8] [--rounds 3]\n");
		return 2;
	}
	if (!blas[0] && find_blas(blas, sizeof blas)) {
		printf("copy_bench: skipped: no CPU BLAS (libblas.so.3 or numpy's OpenBLAS)\n");
		return 0;
	}
	sl = readlink("/proc/self/exe", self, sizeof self - 1);
	if (sl <= 0)
		return 2;
	self[sl] = 0;
	snprintf(cf[nc].name, 16, "plain"); cf[nc].preload = 0; cf[nc++].threads = -1;
	snprintf(cf[nc].name, 16, "off"); cf[nc].preload = 1; cf[nc++].threads = 0;
	for (const char *p = threads; *p && nc < 22;) {
		int t = atoi(p);
		snprintf(cf[nc].name, 16, "t%d", t);
		cf[nc].preload = 1;
		cf[nc++].threads = t;
		p += strcspn(p, ",");
		p += *p == ',';
	}
	snprintf(cf[nc].name, 16, "default"); cf[nc].preload = 1; cf[nc++].threads = -1;
	printf("copy_bench: CPU library %s, %ld CPUs online; best of %d rounds\n",
	       blas, sysconf(_SC_NPROCESSORS_ONLN), rounds);
	printf("%6s %-8s %11s %11s %8s %8s\n", "n", "config", "gather ms",
	       "scatter ms", "x gather", "x scatt");
	for (const char *p = sizes; *p;) {
		int n = atoi(p);
		for (int i = 0; i < nc; i++)
			cf[i].g = cf[i].s = 1e30;
		for (int r = 0; r < rounds; r++)
			for (int i = 0; i < nc; i++)
				run_child(self, lib, blas, &cf[i], n);
		for (int i = 0; i < nc; i++)
			printf("%6d %-8s %11.1f %11.1f %8.2f %8.2f\n", n, cf[i].name,
			       cf[i].g, cf[i].s, cf[1].g / cf[i].g, cf[1].s / cf[i].s);
		fflush(stdout);
		p += strcspn(p, ",");
		p += *p == ',';
	}
	return 0;
}
