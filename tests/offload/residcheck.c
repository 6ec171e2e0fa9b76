/*
 * residcheck - residency under the CPU test backend (tests/offload/
 * test_offload_resident.py): dgemm_ (through dlsym: the wrapper under
 * LD_PRELOAD) on the same A again and again, A changed between calls in
 * one way per case, every result compared with a plain loop's.
 *
 *   residcheck CASE     one case; prints "CASE ok" or "CASE WRONG <diff>"
 *                       and exits 1 when a result differs
 *   residcheck list     the cases' names
 *   residcheck fresh    a new A every call (never reused): checks that
 *                       the kernel never saw A's memory registered for
 *                       write-protection (PAGEMAP_SCAN's PAGE_IS_WPALLOWED)
 *   residcheck small    A reused, run with the default minimum size (above
 *                       A's): no userfaultfd is ever opened
 *
 * Each case makes A resident first (three calls: seen, kept, reused),
 * then changes it and calls again. A stale device copy gives a wrong
 * result, so each case fails if the tracking missed the change.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 512                           /* A: 2 MiB, one huge page */
#define AB ((size_t)N * N * sizeof(double))
#define K 8                             /* B: N x K, C: N x K */

typedef void gemm_t(const char *, const char *, const int *, const int *,
		    const int *, const double *, const double *, const int *,
		    const double *, const int *, const double *, double *,
		    const int *, size_t, size_t);
static gemm_t *gemm;
static double b[N * K], c[N * K], ref[N * K];
static int wrong;

static double *anon_at(void *at, int flags)
{
	void *p = mmap(at, AB, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

static void fill(double *a, double s)
{
	for (size_t i = 0; i < (size_t)N * N; i++)
		a[i] = sin((double)i * 0.001 + s);
}

/* C = A B (beta 0) or C += A B, then compared with the loop. */
static void call(const char *name, const double *a, double beta)
{
	int n = N, k = K;
	double one = 1, d = 0;

	for (int j = 0; j < K; j++)
		for (int i = 0; i < N; i++) {
			double s = beta ? c[i + j * N] : 0;
			for (int l = 0; l < N; l++)
				s += a[i + (size_t)l * N] * b[l + j * N];
			ref[i + j * N] = s;
		}
	gemm("N", "N", &n, &k, &n, &one, a, &n, b, &n, &beta, c, &n, 1, 1);
	for (int i = 0; i < N * K; i++)
		d = fmax(d, fabs(c[i] - ref[i]));
	if (!(d < 1e-9)) {
		printf("%s WRONG %g\n", name, d);
		wrong = 1;
	}
}

/* PAGEMAP_SCAN (Linux 6.7), for headers older than it. */
struct pm_region { uint64_t start, end, categories; };
struct pm_arg {
	uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
	uint64_t inverted, mask, anyof, ret;
};
#define PM_SCAN _IOWR('f', 16, struct pm_arg)
#define PM_WPALLOWED 1u

/* Whether any page of A is in a mapping registered for write-protection. */
static int registered(const double *a)
{
	struct pm_region v[8];
	struct pm_arg s = { .size = sizeof s, .start = (uintptr_t)a,
			    .end = (uintptr_t)a + AB, .vec = (uintptr_t)v,
			    .vec_len = 8, .anyof = PM_WPALLOWED,
			    .ret = PM_WPALLOWED };
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	long n = fd >= 0 ? ioctl(fd, PM_SCAN, &s) : -1;

	if (fd >= 0)
		close(fd);
	return n != 0;          /* error: say registered (the test fails) */
}

/* Whether the process holds a userfaultfd (the tracker's descriptor). */
static int uffd_open(void)
{
	char l[64], t[128];

	for (int f = 0; f < 1024; f++) {
		ssize_t n;
		snprintf(l, sizeof l, "/proc/self/fd/%d", f);
		n = readlink(l, t, sizeof t - 1);
		if (n > 0 && (t[n] = 0, strstr(t, "userfaultfd")))
			return 1;
	}
	return 0;
}

/* C2 = A A^T: the same matrix as both operands (two keys over the same
 * pages in one call), compared with the loop. */
static double *c2, *ref2;
static void call_twice(const char *name, const double *a)
{
	int n = N;
	double one = 1, zero = 0, d = 0;

	if (!c2 && (!(c2 = malloc(AB)) || !(ref2 = malloc(AB))))
		exit(2);
	for (int j = 0; j < N; j++)
		for (int i = 0; i < N; i++) {
			double s = 0;
			for (int l = 0; l < N; l++)
				s += a[i + (size_t)l * N] * a[j + (size_t)l * N];
			ref2[i + (size_t)j * N] = s;
		}
	gemm("N", "T", &n, &n, &n, &one, a, &n, a, &n, &zero, c2, &n, 1, 1);
	for (size_t i = 0; i < (size_t)N * N; i++)
		d = fmax(d, fabs(c2[i] - ref2[i]));
	if (!(d < 1e-9)) {
		printf("%s WRONG %g\n", name, d);
		wrong = 1;
	}
}

static void resident(const char *name, const double *a)
{
	for (int i = 0; i < 3; i++)
		call(name, a, 0);
}

static void *thread_write(void *a)
{
	((double *)a)[N * 7 + 3] += 1;
	return NULL;
}

static void kernel_write(const char *how, double *a)
{
	double v[4] = { 5, 6, 7, 8 };
	int fd[2];
	ssize_t n = -1;

	if (!strcmp(how, "read") && pipe(fd) == 0) {
		n = write(fd[1], v, sizeof v) == sizeof v ?
		    read(fd[0], a + N * 3, sizeof v) : -1;
	} else if (!strcmp(how, "recv") &&
		   socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0) {
		n = send(fd[1], v, sizeof v, 0) == sizeof v ?
		    recv(fd[0], a + N * 3, sizeof v, MSG_WAITALL) : -1;
	} else if (!strcmp(how, "pread")) {
		char path[] = "/tmp/residcheckXXXXXX";
		fd[0] = mkstemp(path);
		fd[1] = dup(fd[0]);
		if (fd[0] >= 0 && write(fd[0], v, sizeof v) == sizeof v)
			n = pread(fd[0], a + N * 3, sizeof v, 0);
		unlink(path);
	}
	if (n != (ssize_t)sizeof v) {
		printf("%s setup failed\n", how);
		exit(2);
	}
	close(fd[0]);
	close(fd[1]);
}

static int run(const char *cs)
{
	double *a = anon_at(NULL, 0), *q;

	for (int i = 0; i < N * K; i++)
		b[i] = cos(i * 0.7);
	fill(a, 0);
	if (!strcmp(cs, "reuse")) {
		resident(cs, a);
		call(cs, a, 0);
	} else if (!strcmp(cs, "write")) {
		resident(cs, a);
		a[N * 5 + 1] = 42;
		call(cs, a, 0);
		a[(size_t)N * N - 1] = -1;      /* the last page */
		call(cs, a, 0);
	} else if (!strcmp(cs, "thread")) {
		pthread_t t;
		resident(cs, a);
		pthread_create(&t, NULL, thread_write, a);
		pthread_join(t, NULL);
		call(cs, a, 0);
	} else if (!strcmp(cs, "read") || !strcmp(cs, "recv") ||
		   !strcmp(cs, "pread")) {
		resident(cs, a);
		kernel_write(cs, a);
		call(cs, a, 0);
	} else if (!strcmp(cs, "fork")) {
		pid_t p;
		int st;
		resident(cs, a);
		p = fork();
		if (p == 0) {
			fill(a, 9);             /* the child's own copy */
			_exit(0);
		}
		waitpid(p, &st, 0);
		call(cs, a, 0);                 /* unchanged: reused */
		a[N * 9] = 3;                   /* the parent's, after fork */
		call(cs, a, 0);
	} else if (!strcmp(cs, "dontneed")) {
		resident(cs, a);
		madvise(a + N * 64, 4096, MADV_DONTNEED);
		call(cs, a, 0);
	} else if (!strcmp(cs, "remap")) {
		resident(cs, a);
		munmap(a, AB);
		q = anon_at(a, MAP_FIXED_NOREPLACE);
		fill(q, 2);
		call(cs, q, 0);
	} else if (!strcmp(cs, "mremap")) {
		resident(cs, a);
		q = mremap(a, AB, 2 * AB, MREMAP_MAYMOVE);
		if (q == MAP_FAILED)
			return 2;
		call(cs, q, 0);
		if (q != a) {                   /* something new where A was */
			double *r = anon_at(a, MAP_FIXED_NOREPLACE);
			fill(r, 4);
			call(cs, r, 0);
		}
	} else if (!strcmp(cs, "shared")) {
		pid_t p;
		int st;
		a = mmap(NULL, AB, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		fill(a, 0);
		resident(cs, a);
		p = fork();
		if (p == 0) {
			a[N * 11] = 77;         /* another process writes */
			_exit(0);
		}
		waitpid(p, &st, 0);
		call(cs, a, 0);
	} else if (!strcmp(cs, "thp")) {
		char *r = mmap(NULL, 2 * AB, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		a = (double *)(((uintptr_t)r + AB - 1) & ~(uintptr_t)(AB - 1));
		madvise(a, AB, MADV_HUGEPAGE);
		fill(a, 0);
		resident(cs, a);
		a[N * 100 + 5] = 1;
		call(cs, a, 0);
	} else if (!strcmp(cs, "output")) {
		/* C kept as an output, read by the next call (beta 1), then
		 * changed by the program and read again. */
		resident(cs, a);
		call(cs, a, 1);
		call(cs, a, 1);
		c[17] += 1;
		call(cs, a, 1);
		c[N * K - 1] = 0;
		call(cs, a, 1);
	} else if (!strcmp(cs, "twice")) {
		for (int i = 0; i < 3; i++)
			call_twice(cs, a);
		a[N * 30 + 2] = 6;
		call_twice(cs, a);
		call_twice(cs, a);
		a[N * 200] = -6;
		call_twice(cs, a);
	} else if (!strcmp(cs, "mprotect")) {
		resident(cs, a);
		mprotect(a, AB, PROT_READ);
		mprotect(a, AB, PROT_READ | PROT_WRITE);
		a[N * 2] = 8;
		call(cs, a, 0);
	} else if (!strcmp(cs, "small")) {
		/* Reused, but below the minimum size (run with the default):
		 * the tracker never opens its userfaultfd. */
		resident(cs, a);
		call(cs, a, 0);
		if (uffd_open()) {
			printf("small WRONG: a userfaultfd is open\n");
			wrong = 1;
		}
	} else if (!strcmp(cs, "fresh")) {
		for (int i = 0; i < 6; i++) {
			double *f = anon_at(NULL, 0);
			fill(f, i);
			call(cs, f, 0);
			if (registered(f)) {
				printf("fresh WRONG: A %d registered\n", i);
				wrong = 1;
			}
		}

	} else {
		printf("unknown case %s\n", cs);
		return 2;
	}
	if (!wrong)
		printf("%s ok\n", cs);
	return wrong;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	if (!strcmp(argv[1], "list")) {
		printf("reuse write thread read recv pread fork dontneed remap "
		       "mremap shared thp output mprotect twice\n");
		return 0;
	}
	gemm = (gemm_t *)dlsym(RTLD_DEFAULT, "dgemm_");
	if (!gemm)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	return run(argv[1]);
}
