/*
 * nsedge.c - dlmopen edge cases, run with and without libgpumutex.so by
 * test_preload_namespace.py, which compares the two outputs (glibc's own
 * behaviour is the oracle).
 *   nsedge notfound        dlmopen(LM_ID_NEWLM, "libnsnope.so")
 *   nsedge origin-notfound dlmopen(LM_ID_NEWLM, "$ORIGIN/libnsnope.so")
 *   nsedge found           dlmopen(LM_ID_NEWLM, "libnexttwo.so")
 *   nsedge bad-lmid        dlmopen(4096, "libnexttwo.so")
 *   nsedge existing        dlmopen(LM_ID_NEWLM, "libnsa.so"), which loads
 *                          nsa/libnsdup.so by its RUNPATH; then
 *                          dlmopen(<that namespace>, "libnsdup.so"): glibc
 *                          returns the copy already there, not the one on
 *                          this program's RUNPATH (nsb/libnsdup.so)
 *   nsedge existing-noload the same with RTLD_NOLOAD
 * Each call starts with errno = 77 and prints "handle=ok|null",
 * "dlerror=<dlerror()>", "errno=<errno>", and for "existing*" the
 * "which=<nsdup_which()>" of the handle. Exit 0, or 3 on a probe failure.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

typedef int (*int_fn)(void);

static void *call(Lmid_t lmid, const char *file, int mode)
{
	void *h;
	const char *e;
	int err;

	dlerror();
	errno = 77;
	h = dlmopen(lmid, file, mode);
	err = errno;
	e = dlerror();
	printf("handle=%s\ndlerror=%s\nerrno=%d\n", h ? "ok" : "null",
	       e ? e : "(null)", err);
	return h;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "notfound")) {
		call(LM_ID_NEWLM, "libnsnope.so", RTLD_NOW);
	} else if (!strcmp(mode, "origin-notfound")) {
		call(LM_ID_NEWLM, "$ORIGIN/libnsnope.so", RTLD_NOW);
	} else if (!strcmp(mode, "found")) {
		call(LM_ID_NEWLM, "libnexttwo.so", RTLD_NOW);
	} else if (!strcmp(mode, "bad-lmid")) {
		call(4096, "libnexttwo.so", RTLD_NOW);
	} else if (!strcmp(mode, "existing") ||
		   !strcmp(mode, "existing-noload")) {
		void *a = dlmopen(LM_ID_NEWLM, "libnsa.so", RTLD_NOW), *h;
		Lmid_t lmid;
		int_fn f;

		if (!a || dlinfo(a, RTLD_DI_LMID, &lmid) != 0) {
			fprintf(stderr, "nsedge: libnsa.so: %s\n", dlerror());
			return 3;
		}
		h = call(lmid, "libnsdup.so", RTLD_NOW |
			 (!strcmp(mode, "existing") ? 0 : RTLD_NOLOAD));
		if (h) {
			*(void **)&f = dlsym(h, "nsdup_which");
			printf("which=%d\n", f ? f() : -1);
		}
	} else {
		fprintf(stderr, "nsedge: unknown mode '%s'\n", mode);
		return 3;
	}
	return 0;
}
