/*
 * libdlcount.so - preloaded before libgpuoffload.so in a test: counts the
 * dlopen() calls (the frontend's lookup of a call site's module opens it,
 * src/offload/resolve.c) and prints "dlopen-calls N" on stderr at exit.
 * Test code only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

static unsigned long dlcount_calls;

void *dlopen(const char *file, int mode)
{
	static void *(*real)(const char *, int);

	if (!real)
		real = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
	__atomic_fetch_add(&dlcount_calls, 1, __ATOMIC_RELAXED);
	return real(file, mode);
}

__attribute__((destructor)) static void dlcount_report(void)
{
	fprintf(stderr, "dlopen-calls %lu\n", dlcount_calls);
}
