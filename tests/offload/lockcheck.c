/*
 * lockcheck PHASE THREADS N - the calls that stay on the CPU take no lock
 * threads share (test_offload_locks.py). Run under liblockcount.so
 * (preloaded first, then libgpuoffload.so); its CPU library is
 * libpauselib.so. Each of THREADS threads makes N calls of PHASE to warm
 * up (caches, the configuration, the policy's first sight), then N more,
 * and counts the lock calls its own thread made during those (lockcount's
 * per-thread count). PHASE:
 *   small    dgemm_ 4x4x4 (128 flops: below the threshold)
 *   decided  dgemm_ 16x16x16 (8192 flops: above a threshold of 1000),
 *            which the profile the test gives keeps on the CPU (the
 *            model, or the ski-rental rule)
 *   paused   the same dgemm_, the offloader paused (gpu_offload_pause)
 *   nested   dgetrs_ 4x4 (pauselib's: two dgemm_ inside, nested calls)
 * Every result is checked. Prints "locks K" (the most any thread made
 * in its second N calls) and "ok" (or "bad").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dgemm_(const char *, const char *, const int *, const int *, const int *,
	    const double *, const double *, const int *, const double *,
	    const int *, const double *, double *, const int *, size_t, size_t);
void dgetrs_(const char *, const int *, const int *, const double *,
	     const int *, const int *, double *, const int *, int *, size_t);

#define MAXT 64
static const char *phase;
static long n_calls;
static unsigned long (*self_count)(void);
static unsigned long locks[MAXT];
static int bad;

/* One call of the phase, its result checked (small integers: exact). */
static void one(void)
{
	double a[256], b[256], c[256], one = 1, zero = 0;
	int n = strcmp(phase, "small") == 0 || strcmp(phase, "nested") == 0 ?
		4 : 16, info = 0, ipiv[4] = { 1, 2, 3, 4 };

	for (int i = 0; i < n * n; i++) {
		a[i] = i % 3;
		b[i] = (i % 5) - 2;
	}
	if (strcmp(phase, "nested") == 0) {
		/* pauselib's dgetrs_: B := A A B */
		double ab[16], want[16];
		memcpy(c, b, sizeof(double) * 16);
		for (int j = 0; j < 4; j++)
			for (int i = 0; i < 4; i++) {
				double s = 0;
				for (int l = 0; l < 4; l++)
					s += a[i + l * 4] * b[l + j * 4];
				ab[i + j * 4] = s;
			}
		for (int j = 0; j < 4; j++)
			for (int i = 0; i < 4; i++) {
				double s = 0;
				for (int l = 0; l < 4; l++)
					s += a[i + l * 4] * ab[l + j * 4];
				want[i + j * 4] = s;
			}
		dgetrs_("N", &n, &n, a, &n, ipiv, c, &n, &info, 1);
		if (info || memcmp(c, want, sizeof want))
			__atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
		return;
	}
	dgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
	for (int j = 0; j < n; j++)
		for (int i = 0; i < n; i++) {
			double s = 0;
			for (int l = 0; l < n; l++)
				s += a[i + l * n] * b[l + j * n];
			if (s != c[i + j * n])
				__atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
		}
}

static void *work(void *arg)
{
	long t = (long)arg;
	unsigned long c0;

	for (long i = 0; i < n_calls; i++)
		one();
	c0 = self_count();
	for (long i = 0; i < n_calls; i++)
		one();
	locks[t] = self_count() - c0;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[MAXT];
	int nt;
	unsigned long most = 0;

	if (argc != 4)
		return 2;
	phase = argv[1];
	nt = atoi(argv[2]);
	n_calls = atol(argv[3]);
	*(void **)&self_count = dlsym(RTLD_DEFAULT, "lockcount_self");
	if (!self_count || nt < 1 || nt > MAXT || n_calls < 1) {
		fprintf(stderr, "lockcheck: no lockcount_self, or bad arguments\n");
		return 2;
	}
	if (strcmp(phase, "paused") == 0) {
		int (*sw)(int);
		*(void **)&sw = dlsym(RTLD_DEFAULT, "gpu_offload_pause");
		if (!sw) {
			fprintf(stderr, "lockcheck: no gpu_offload_pause\n");
			return 2;
		}
		sw(1);
	}
	for (long t = 0; t < nt; t++)
		if (pthread_create(&th[t], NULL, work, (void *)t))
			return 2;
	for (int t = 0; t < nt; t++) {
		pthread_join(th[t], NULL);
		if (locks[t] > most)
			most = locks[t];
	}
	printf("locks %lu\n%s\n", most, bad ? "bad" : "ok");
	return 0;
}
