/*
 * gtload.c - finding CUPTI for the GPU-time collector (gputime.c), at run
 * time: the library never names it in DT_NEEDED, since CUPTI ships with
 * the CUDA toolkit (or pip's nvidia-cuda-cupti), not with the driver,
 * and is absent from most machines that run CUDA programs.
 *
 * Where it looks, first hit wins: GPUMUTEX_CUPTI (a path, tried alone);
 * a libcupti already loaded in the process (a profiler's, or the one the
 * program's libraries need: using that copy keeps one CUPTI per
 * process); the loader's search (LD_LIBRARY_PATH, the cache); pip's copy
 * next to any site-packages directory the process has loaded a library
 * from; the toolkit's (CUDA_HOME, /usr/local/cuda).
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuptiapi.h"
#include "gtload.h"
#include "resolve.h"

/* The sonames tried, newest first. */
static const char *const sonames[] = { "libcupti.so.13", "libcupti.so.12",
				       "libcupti.so" };
#define NSONAMES (sizeof sonames / sizeof sonames[0])

struct loaded {
	char path[1024];
	char site[1024]; /* a ".../site-packages/" seen, "" none */
};

static int each_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct loaded *o = arg;
	const char *n = info->dlpi_name, *s;

	(void)size;
	if (!n || !n[0])
		return 0;
	s = strrchr(n, '/');
	/* "libcupti": also the renamed copies that repaired wheels carry
	 * (libcupti-<hash>.so.12). */
	if (!o->path[0] && strncmp(s ? s + 1 : n, "libcupti", 8) == 0 &&
	    strstr(s ? s + 1 : n, ".so"))
		snprintf(o->path, sizeof o->path, "%s", n);
	if (!o->site[0]) {
		const char *p = strstr(n, "/site-packages/");
		size_t k = 15;

		if (!p) {
			p = strstr(n, "/dist-packages/");
		}
		if (p && (size_t)(p - n) + k < sizeof o->site)
			snprintf(o->site, sizeof o->site, "%.*s",
				 (int)(p - n + (ptrdiff_t)k), n);
	}
	return 0;
}

void *gmp_gt_loaded_handle(void)
{
	struct loaded o; /* 2 KiB: called from hooks on the program's stack */
	void *h;

	memset(&o, 0, sizeof o);
	dl_iterate_phdr(each_object, &o);
	if (!o.path[0])
		return NULL;
	h = dlopen(o.path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	dlerror();
	return h;
}

static void *try_open(const char *path, char *tried, size_t len)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	size_t n = strlen(tried);

	if (!h) {
		/* dlerror clears on read: read it once. */
		const char *e = dlerror();

		(void)e;
		if (n < len)
			snprintf(tried + n, len - n, "%s%s", n ? ", " : "", path);
	}
	return h;
}

static void *find(char *tried, size_t len)
{
	const char *env = getenv("GPUMUTEX_CUPTI"), *home;
	/* Static: one caller at a time (gputime.c's lock), and the caller
	 * may be on a small stack. */
	static char p[1200];
	static struct loaded o;
	void *h;
	size_t i;

	tried[0] = '\0';
	if (env && env[0])
		return try_open(env, tried, len);
	h = gmp_gt_loaded_handle();
	if (h)
		return h;
	for (i = 0; i < NSONAMES; i++)
		if ((h = try_open(sonames[i], tried, len)) != NULL)
			return h;
	memset(&o, 0, sizeof o);
	dl_iterate_phdr(each_object, &o);
	if (o.site[0]) {
		static const char *const sub[] = { "nvidia/cu13/lib",
						   "nvidia/cuda_cupti/lib" };

		for (size_t s = 0; s < 2; s++)
			for (i = 0; i + 1 < NSONAMES; i++) {
				snprintf(p, sizeof p, "%s%s/%s", o.site, sub[s],
					 sonames[i]);
				if ((h = try_open(p, tried, len)) != NULL)
					return h;
			}
	}
	home = getenv("CUDA_HOME");
	{
		const char *const roots[] = { home && home[0] ? home : NULL,
					      "/usr/local/cuda" };

		for (size_t r = 0; r < 2; r++) {
			if (!roots[r])
				continue;
			snprintf(p, sizeof p, "%s/extras/CUPTI/lib64/libcupti.so",
				 roots[r]);
			if ((h = try_open(p, tried, len)) != NULL)
				return h;
			snprintf(p, sizeof p, "%s/lib64/libcupti.so", roots[r]);
			if ((h = try_open(p, tried, len)) != NULL)
				return h;
		}
	}
	return NULL;
}

/* CUPTI API versions whose records have the layout cuptiapi.h reads:
 * CUDA 12 (19 to 99) and CUDA 13 (130000 to 139999). */
static int version_ok(uint32_t v)
{
	return (v >= 19 && v <= 99) || (v >= 130000 && v <= 139999);
}

int gmp_gt_load(struct gmp_cupti *api, char *why, size_t len)
{
	static char tried[768];
	void *h = find(tried, sizeof tried);
	uint32_t v = 0;
	int rc;

	memset(api, 0, sizeof *api);
	if (!h) {
		snprintf(why, len, "no CUPTI library could be loaded (tried %s; CUPTI comes with the CUDA toolkit or pip's nvidia-cuda-cupti, not with the driver; GPUMUTEX_CUPTI names one)",
			 tried[0] ? tried : "nothing");
		return -1;
	}
#define GT_SYM(field, name) \
	api->field = (__typeof__(api->field))gmp_lookup(h, name, NULL)
	GT_SYM(get_version, "cuptiGetVersion");
	GT_SYM(subscribe, "cuptiSubscribe");
	GT_SYM(unsubscribe, "cuptiUnsubscribe");
	GT_SYM(enable, "cuptiActivityEnable");
	GT_SYM(disable, "cuptiActivityDisable");
	GT_SYM(register_cbs, "cuptiActivityRegisterCallbacks");
	GT_SYM(flush_all, "cuptiActivityFlushAll");
	GT_SYM(next_record, "cuptiActivityGetNextRecord");
	GT_SYM(timestamp, "cuptiGetTimestamp");
#undef GT_SYM
	dlerror();
	if (!api->get_version || !api->subscribe || !api->unsubscribe ||
	    !api->enable || !api->disable || !api->register_cbs ||
	    !api->flush_all || !api->next_record || !api->timestamp) {
		snprintf(why, len, "the CUPTI library found lacks functions it should have");
		return -1;
	}
	rc = api->get_version(&v);
	if (rc != GMP_CUPTI_SUCCESS) {
		snprintf(why, len, "CUPTI failed to initialise (cuptiGetVersion: CUPTI error %d)",
			 rc);
		return -1;
	}
	if (!version_ok(v)) {
		snprintf(why, len, "the CUPTI found is API version %u, not CUDA 12's or 13's, whose records gpumutex reads",
			 (unsigned)v);
		return -1;
	}
	/* The handle stays open: the collector uses it until exit. */
	return 0;
}

/* For gmp_gt_find_real: the loaded objects, other than this library and
 * the main program, CUPTI-named ones first. */
struct objs {
	const char *name;
	void *found;
	int pass;
};

static int find_in(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct objs *o = arg;
	const char *n = info->dlpi_name, *s;
	void *h, *p;

	(void)size;
	if (o->found || !n || !n[0])
		return o->found != NULL;
	s = strrchr(n, '/');
	if ((strstr(s ? s + 1 : n, "cupti") != NULL) != (o->pass == 0))
		return 0;
	h = dlopen(n, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
	if (!h) {
		dlerror();
		return 0;
	}
	p = gmp_lookup(h, o->name, NULL);
	dlclose(h); /* NOLOAD: it stays as loaded as it was */
	if (p && !gmp_in_range(gmp_self(), p))
		o->found = p;
	return o->found != NULL;
}

void *gmp_gt_find_real(const char *name)
{
	struct objs o = { name, NULL, 0 };
	void *p;

	/* Every loaded object is asked, not only the global scope: a CUPTI
	 * loaded with RTLD_LOCAL (as a Python extension's dependencies are)
	 * is bound by the PLT of its users, after us, but invisible to
	 * RTLD_NEXT. */
	dl_iterate_phdr(find_in, &o);
	if (!o.found) {
		o.pass = 1;
		dl_iterate_phdr(find_in, &o);
	}
	if (o.found)
		return o.found;
	p = gmp_lookup(RTLD_NEXT, name, NULL);
	dlerror();
	return p && !gmp_in_range(gmp_self(), p) ? p : NULL;
}
