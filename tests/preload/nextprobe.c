/*
 * nextprobe.c - linked with libnextshim.so, then libnexttwo.so; checks
 * that dlsym(RTLD_NEXT, ...) answers relative to its caller under the
 * preload. Prints one "name=value" line per check.
 *   nextprobe plain    the non-CUDA checks
 *   nextprobe cuinit   also: dlopen(libcuda.so.1, RTLD_GLOBAL), then
 *                      cuInit through the shim's dlsym(RTLD_NEXT, "cuInit")
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

extern int shim_getpid_calls;
int shared_fn(void);
void *shim_next(const char *name);
void *shim_vnext(const char *name, const char *version);

int main(int argc, char **argv)
{
	int (*f)(void);
	void *two = dlopen("libnexttwo.so", RTLD_NOW | RTLD_NOLOAD);

	printf("getpid-ok=%d\n", getpid() == (pid_t)syscall(SYS_getpid));
	printf("shim-calls=%d\n", shim_getpid_calls);
	*(void **)&f = shim_next("shared_fn");
	printf("shim-next-shared=%d\n", f ? f() : -1);
	printf("shim-next-is-two=%d\n",
	       two && (void *)f == dlsym(two, "shared_fn"));
	*(void **)&f = dlsym(RTLD_NEXT, "shared_fn");
	printf("main-next-shared=%d\n", f ? f() : -1);
	*(void **)&f = dlsym(RTLD_DEFAULT, "shared_fn");
	printf("default-shared=%d\n", f ? f() : -1);
	printf("shim-next-missing=%s\n",
	       shim_next("no_such_symbol_anywhere") ? "found" : "null");
	printf("dlerror-set=%d\n", dlerror() != NULL);
	if (argc > 1 && strcmp(argv[1], "cuinit") == 0) {
		int (*init)(unsigned int);
		const char *cvd;
		if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
			fprintf(stderr, "nextprobe: %s\n", dlerror());
			return 3;
		}
		*(void **)&init = shim_next("cuInit");
		if (!init)
			return 3;
		printf("rc=%d\n", init(0));
		cvd = getenv("CUDA_VISIBLE_DEVICES");
		printf("cvd=%s\n", cvd ? cvd : "-unset-");
	}
	return 0;
}
