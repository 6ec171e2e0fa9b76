/*
 * nextshim.c - libnextshim.so: a library that uses dlsym(RTLD_NEXT), the
 * way interposers do. It interposes getpid() itself and forwards to the
 * next definition: if RTLD_NEXT were resolved relative to libgpumutex.so
 * (which is loaded before this library), "next" would be this very
 * function and getpid() would recurse until the stack overflows.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/types.h>
#include <unistd.h>

int shim_getpid_calls;

pid_t getpid(void)
{
	pid_t (*next)(void);
	*(void **)&next = dlsym(RTLD_NEXT, "getpid");
	shim_getpid_calls++;
	return next ? next() : -1;
}

/* Defined here and in libnexttwo.so: RTLD_NEXT from here must find the
 * other one. */
int shared_fn(void)
{
	return 1;
}

/* Not tail calls: the return address dlsym sees must be in this library
 * (the volatile keeps the compiler from jumping to dlsym). */
void *shim_next(const char *name)
{
	void *volatile p = dlsym(RTLD_NEXT, name);
	return p;
}

void *shim_vnext(const char *name, const char *version)
{
	void *volatile p = dlvsym(RTLD_NEXT, name, version);
	return p;
}
