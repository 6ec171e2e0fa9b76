/*
 * cunames.c - linked with libcunames.so; looks its cu-prefixed names up
 * every way and prints one "check=value" line each (values must not
 * depend on the preload), then where each pointer lives as
 * "<object>+<offset>" (comparable between runs despite ASLR).
 *   cunames            as is
 *   cunames withcuda   with the (fake) driver loaded too, RTLD_LOCAL
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int cudnnCreate(void **handle);
void *curl_easy_init(void);
int cuInit(unsigned int flags);

static void where(const char *what, void *p)
{
	Dl_info info;
	const char *name;

	if (!p || !dladdr(p, &info) || !info.dli_fname) {
		printf("where-%s=null\n", what);
		return;
	}
	name = strrchr(info.dli_fname, '/');
	printf("where-%s=%s+%#lx\n", what, name ? name + 1 : info.dli_fname,
	       (unsigned long)((char *)p - (char *)info.dli_fbase));
}

int main(int argc, char **argv)
{
	void *h = dlopen("libcunames.so", RTLD_NOW | RTLD_NOLOAD);
	int (*init)(unsigned int);
	void *p;

	if (argc > 1 && strcmp(argv[1], "withcuda") == 0 &&
	    !dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
		fprintf(stderr, "cunames: %s\n", dlerror());
		return 3;
	}
	p = dlsym(RTLD_DEFAULT, "cudnnCreate");
	printf("default-cudnn-same=%d\n", p == (void *)cudnnCreate);
	where("default-cudnn", p);
	p = dlsym(h, "curl_easy_init");
	printf("handle-curl-same=%d\n", p == (void *)curl_easy_init);
	where("handle-curl", p);
	p = dlsym(RTLD_NEXT, "cudnnCreate");
	printf("next-cudnn-same=%d\n", p == (void *)cudnnCreate);
	p = dlsym(RTLD_DEFAULT, "cudaMalloc_not_here");
	printf("missing=%s\n", p ? "found" : "null");
	*(void **)&init = dlsym(h, "cuInit");
	printf("handle-cuInit=%d\n", init ? init(0) : -1);
	where("handle-cuInit", (void *)init);
	*(void **)&init = dlsym(RTLD_DEFAULT, "cuInit");
	printf("default-cuInit=%d\n", init ? init(0) : -1);
	where("default-cuInit", (void *)init);
	printf("plt-cuInit=%d\n", cuInit(0));
	return 0;
}
