/*
 * smallstack.c - cuInit from a thread with a small stack, as Go, some JVMs
 * and thread pools make them, for test_preload_adversarial.py.
 *   smallstack dlsym   the thread calls the cuInit that dlsym returned
 *   smallstack linked  the thread calls cuInit as bound by the dynamic
 *                      linker (linked with -lcuda)
 * The stack is 16 KiB, or the system's minimum where that is larger. The
 * main thread looks every function up first (on its own, large stack);
 * the thread calls cuInit, then uses device 0 (primary context, one
 * cuCtxSynchronize, so the fake driver journals the use) and lets it go.
 * Prints "stack=<bytes>" before the thread starts, then "rc=<cuInit
 * result>" and "cvd=<CUDA_VISIBLE_DEVICES>". Exit status 0, or 3 when the
 * probe itself could not run; a stack overflow kills it with SIGSEGV.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cuInit(unsigned int flags);

typedef int (*init_fn)(unsigned int);
typedef int (*retain_fn)(void **, int);
typedef int (*setcur_fn)(void *);
typedef int (*sync_fn)(void);
typedef int (*release_fn)(int);

static init_fn init;
static retain_fn retain;
static setcur_fn setcur;
static sync_fn sync_ctx;
static release_fn release;
static int init_rc = -1;

static void *must(void *p, const char *what)
{
	if (!p) {
		fprintf(stderr, "smallstack: %s: %s\n", what, dlerror());
		exit(3);
	}
	return p;
}

static void *thread_main(void *arg)
{
	void *ctx = NULL;

	(void)arg;
	init_rc = init(0);
	if (init_rc == 0 && retain(&ctx, 0) == 0) {
		if (setcur(ctx) == 0)
			sync_ctx();
		release(0);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	size_t size = 16384;
	long min = sysconf(_SC_THREAD_STACK_MIN);
	void *h = must(dlopen("libcuda.so.1", RTLD_NOW), "dlopen");
	pthread_attr_t attr;
	pthread_t t;
	const char *cvd;

	if (argc != 2 || (strcmp(argv[1], "dlsym") && strcmp(argv[1], "linked"))) {
		fprintf(stderr, "usage: smallstack dlsym|linked\n");
		return 3;
	}
	if (strcmp(argv[1], "linked") == 0)
		init = cuInit;
	else
		*(void **)&init = must(dlsym(h, "cuInit"), "cuInit");
	*(void **)&retain = must(dlsym(h, "cuDevicePrimaryCtxRetain"), "retain");
	*(void **)&setcur = must(dlsym(h, "cuCtxSetCurrent"), "setcurrent");
	*(void **)&sync_ctx = must(dlsym(h, "cuCtxSynchronize"), "synchronize");
	*(void **)&release = must(dlsym(h, "cuDevicePrimaryCtxRelease"),
				  "release");
	if (min > 0 && (size_t)min > size)
		size = (size_t)min;
	printf("stack=%zu\n", size);
	fflush(stdout);
	if (pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, size) ||
	    pthread_create(&t, &attr, thread_main, NULL) ||
	    pthread_join(t, NULL)) {
		fprintf(stderr, "smallstack: cannot run a thread with a %zu-byte stack\n",
			size);
		return 3;
	}
	cvd = getenv("CUDA_VISIBLE_DEVICES");
	printf("rc=%d\ncvd=%s\n", init_rc, cvd ? cvd : "-unset-");
	return 0;
}
