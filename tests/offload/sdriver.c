/*
 * sdriver CLIENT.so... - loads each client (libsclient.so, linked with
 * libsblas.so; libsclientb.so, linked with a second copy libsblasb.so) with
 * dlopen(RTLD_LOCAL), as Python imports an extension module, and runs it:
 * each client's calls must reach its own copy;
 * the scipy_* names are then in no global scope, and dlsym(RTLD_NEXT)
 * cannot find them.
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		int (*run)(void);
		if (!h) {
			fprintf(stderr, "sdriver: %s\n", dlerror());
			return 2;
		}
		run = (int (*)(void))dlsym(h, "sclient_run");
		if (!run || run() != 0)
			return 2;
		fflush(stdout);
	}
	return 0;
}
