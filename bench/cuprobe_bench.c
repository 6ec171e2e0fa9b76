/*
 * cuprobe_bench - small timing probes for bench/preload_bench.py.
 *
 *   cuprobe_bench dlsym NAME LIB N   mean ns of dlsym(dlopen(LIB), NAME), N calls
 *   cuprobe_bench cuinit             ns taken by the first cuInit, printed
 *   cuprobe_bench hold               cuInit + context, then read stdin to EOF,
 *                                    print CLOCK_MONOTONIC ns and _exit at once
 *
 * Linked with -ldl only: libcuda.so.1 is dlopened (from LD_LIBRARY_PATH), and
 * cuInit is looked up with dlsym like the CUDA runtime's fallback path does,
 * so the probe goes through gpumutex's dlsym hook when it is preloaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef int (*init_fn)(unsigned);
typedef int (*get_fn)(int *, int);
typedef int (*ctx_fn)(void **, unsigned, int);

int main(int argc, char **argv)
{
	if (argc >= 5 && !strcmp(argv[1], "dlsym")) {
		void *h = dlopen(argv[3], RTLD_NOW);
		long n = atol(argv[4]);
		volatile void *sink = NULL;
		long long t;
		if (!h)
			return 1;
		t = now_ns();
		for (long i = 0; i < n; i++)
			sink = dlsym(h, argv[2]);
		t = now_ns() - t;
		printf("%.2f\n", (double)t / (double)n);
		return sink ? 0 : 1;
	}
	if (argc >= 2 && (!strcmp(argv[1], "cuinit") || !strcmp(argv[1], "hold"))) {
		void *h = dlopen("libcuda.so.1", RTLD_NOW);
		init_fn init = h ? (init_fn)dlsym(h, "cuInit") : NULL;
		long long t;
		int rc;
		if (!init)
			return 1;
		t = now_ns();
		rc = init(0);
		t = now_ns() - t;
		if (rc)
			return 2;
		if (!strcmp(argv[1], "cuinit")) {
			printf("%lld\n", t);
			return 0;
		}
		{
			get_fn get = (get_fn)dlsym(h, "cuDeviceGet");
			ctx_fn ctx = (ctx_fn)dlsym(h, "cuCtxCreate_v2");
			int dev;
			void *c;
			char buf[64];
			if (!get || !ctx || get(&dev, 0) || ctx(&c, 0, dev))
				return 3;
			puts("held");
			fflush(stdout);
			while (read(0, buf, sizeof buf) > 0)
				;
			printf("%lld\n", now_ns());
			fflush(stdout);
			_exit(0);
		}
	}
	fprintf(stderr, "usage: see the comment at the top\n");
	return 2;
}
