/*
 * nsprobe.c - dlmopen and the driver, for test_preload_adversarial.py.
 *   nsprobe newlm-driver     dlmopen(LM_ID_NEWLM, "libcuda.so.1")
 *   nsprobe newlm-origin     the same by "$ORIGIN/../fakecuda/libcuda.so.1"
 *   nsprobe newlm-dependent  dlmopen(LM_ID_NEWLM, "libnsdep.so"), a library
 *                            linked with -lcuda (found by this program's
 *                            RUNPATH, $ORIGIN)
 *   nsprobe newlm-other      dlmopen(LM_ID_NEWLM, "libnexttwo.so"), which
 *                            has nothing to do with CUDA
 *   nsprobe existing-driver  dlmopen(LM_ID_NEWLM, "libnexttwo.so"), then
 *                            dlmopen(<its namespace>, "libcuda.so.1")
 *   nsprobe base-first       dlopen("libcuda.so.1") in the main namespace,
 *                            then dlmopen(LM_ID_NEWLM, "libcuda.so.1")
 *   nsprobe base             dlmopen(LM_ID_BASE, "libcuda.so.1")
 * With a handle, the probe calls cuInit through it (for libnsdep.so, its
 * nsdep_use(), which calls cuInit by its own PLT) and uses device 0 once;
 * for libnexttwo.so it calls shared_fn(). Prints "handle=ok" or
 * "handle=null" and "dlerror=<dlerror()>", then "rc=<cuInit result>" or
 * "shared_fn=<value>". Exit status 0, or 3 if the probe itself failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*init_fn)(unsigned int);
typedef int (*retain_fn)(void **, int);
typedef int (*setcur_fn)(void *);
typedef int (*sync_fn)(void);
typedef int (*release_fn)(int);
typedef int (*int_fn)(void);

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (!p) {
		fprintf(stderr, "nsprobe: %s: %s\n", name, dlerror());
		exit(3);
	}
	return p;
}

/* cuInit through handle h, then device 0 once. */
static int use_driver(void *h)
{
	init_fn init;
	retain_fn retain;
	setcur_fn setcur;
	sync_fn sync;
	release_fn release;
	void *ctx = NULL;
	int rc;

	*(void **)&init = sym(h, "cuInit");
	*(void **)&retain = sym(h, "cuDevicePrimaryCtxRetain");
	*(void **)&setcur = sym(h, "cuCtxSetCurrent");
	*(void **)&sync = sym(h, "cuCtxSynchronize");
	*(void **)&release = sym(h, "cuDevicePrimaryCtxRelease");
	rc = init(0);
	if (rc == 0 && retain(&ctx, 0) == 0) {
		if (setcur(ctx) == 0)
			sync();
		release(0);
	}
	return rc;
}

static void *report_open(void *h)
{
	const char *e = dlerror();

	printf("handle=%s\ndlerror=%s\n", h ? "ok" : "null", e ? e : "(null)");
	fflush(stdout);
	return h;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	void *h;
	int_fn f;

	dlerror();
	if (!strcmp(mode, "newlm-driver") || !strcmp(mode, "base-first") ||
	    !strcmp(mode, "newlm-origin") || !strcmp(mode, "base")) {
		const char *file = !strcmp(mode, "newlm-origin") ?
			"$ORIGIN/../fakecuda/libcuda.so.1" : "libcuda.so.1";
		Lmid_t lmid = !strcmp(mode, "base") ? LM_ID_BASE : LM_ID_NEWLM;

		if (!strcmp(mode, "base-first") &&
		    !dlopen("libcuda.so.1", RTLD_NOW)) {
			fprintf(stderr, "nsprobe: dlopen: %s\n", dlerror());
			return 3;
		}
		h = report_open(dlmopen(lmid, file, RTLD_NOW));
		if (h)
			printf("rc=%d\n", use_driver(h));
	} else if (!strcmp(mode, "newlm-dependent")) {
		h = report_open(dlmopen(LM_ID_NEWLM, "libnsdep.so", RTLD_NOW));
		if (h) {
			*(void **)&f = sym(h, "nsdep_use");
			printf("rc=%d\n", f());
		}
	} else if (!strcmp(mode, "newlm-other") ||
		   !strcmp(mode, "existing-driver")) {
		Lmid_t lmid = LM_ID_BASE;

		h = dlmopen(LM_ID_NEWLM, "libnexttwo.so", RTLD_NOW);
		if (!strcmp(mode, "newlm-other"))
			report_open(h);
		if (!h || dlinfo(h, RTLD_DI_LMID, &lmid) != 0 ||
		    lmid == LM_ID_BASE) {
			fprintf(stderr, "nsprobe: no new namespace: %s\n",
				dlerror());
			return 3;
		}
		*(void **)&f = sym(h, "shared_fn");
		printf("shared_fn=%d\n", f());
		if (!strcmp(mode, "existing-driver")) {
			void *d = report_open(dlmopen(lmid, "libcuda.so.1",
						      RTLD_NOW));
			if (d)
				printf("rc=%d\n", use_driver(d));
		}
	} else {
		fprintf(stderr, "nsprobe: unknown mode '%s'\n", mode);
		return 3;
	}
	return 0;
}
