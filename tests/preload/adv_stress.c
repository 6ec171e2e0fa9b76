/*
 * adv_stress.c - N threads start together and each, K times, looks cuInit
 * up by every path (dlsym of a handle, RTLD_DEFAULT, RTLD_NEXT,
 * cuGetProcAddress_v2 and _v1 incl. the self-lookup), looks unrelated
 * names up, and calls cuInit through every pointer it got. (errno is not
 * checked: the fake driver's own first cuInit changes it.) Every cuInit pointer must be the same function, every call
 * must return 0. Prints "calls=N bad=M"; exit status 0.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*init_fn)(unsigned int);
typedef int (*gpa1_fn)(const char *, void **, int, unsigned long long);
typedef int (*gpa2_fn)(const char *, void **, int, unsigned long long, int *);

static void *h;
static int k_iter, calls, bad;
static void *first_init;
static pthread_barrier_t start;

static void check(void *p, const char *what)
{
	void *expect = NULL;
	int rc;

	if (!p) {
		fprintf(stderr, "adv_stress: %s: NULL\n", what);
		__atomic_add_fetch(&bad, 1, __ATOMIC_SEQ_CST);
		return;
	}
	__atomic_compare_exchange_n(&first_init, &expect, p, 0,
				    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&first_init, __ATOMIC_SEQ_CST) != p) {
		fprintf(stderr, "adv_stress: %s: another cuInit\n", what);
		__atomic_add_fetch(&bad, 1, __ATOMIC_SEQ_CST);
	}
	rc = ((init_fn)p)(0);
	if (rc != 0) {
		fprintf(stderr, "adv_stress: %s: rc=%d\n", what, rc);
		__atomic_add_fetch(&bad, 1, __ATOMIC_SEQ_CST);
	}
	__atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
}

static void *worker(void *arg)
{
	long id = (long)arg;

	pthread_barrier_wait(&start);
	for (int i = 0; i < k_iter; i++) {
		void *p = NULL, *g;
		int st = 0;

		switch ((i + id) % 5 == 3 ? 5 : (i + id) % 5) {
		case 0: check(dlsym(h, "cuInit"), "dlsym(h)"); break;
		case 1: check(dlsym(RTLD_DEFAULT, "cuInit"), "RTLD_DEFAULT"); break;
		case 2: check(dlsym(RTLD_NEXT, "cuInit"), "RTLD_NEXT"); break;
		case 4:
			g = dlsym(h, "cuGetProcAddress_v2");
			if (g && ((gpa2_fn)g)("cuGetProcAddress", &p, 12000, 0, &st) == 0 && p)
				g = p; /* the self-lookup must give the v2 ABI back */
			p = NULL;
			if (g)
				((gpa2_fn)g)("cuInit", &p, 2000, i & 1 ? 2 : 0, &st);
			check(p, "gpa2");
			break;
		case 5:
			g = dlsym(h, "cuGetProcAddress");
			if (g && ((gpa1_fn)g)("cuGetProcAddress", &p, 11030, 0) == 0 && p)
				g = p;
			p = NULL;
			if (g)
				((gpa1_fn)g)("cuInit", &p, 2000, 0);
			check(p, "gpa1");
			break;
		}
		/* unrelated names take the fast path, concurrently */
		if (!dlsym(RTLD_NEXT, "getpid") || !dlsym(h, "cuDeviceGet") ||
		    dlsym(h, "cudnnCreate") || !dlsym(RTLD_DEFAULT, "malloc")) {
			fprintf(stderr, "adv_stress: unrelated lookup wrong\n");
			__atomic_add_fetch(&bad, 1, __ATOMIC_SEQ_CST);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 8;
	pthread_t t[64];

	k_iter = argc > 2 ? atoi(argv[2]) : 50;
	if (n > 64)
		n = 64;
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h)
		return 3;
	pthread_barrier_init(&start, NULL, (unsigned)n);
	for (long i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("calls=%d bad=%d\n", calls, bad);
	return 0;
}
