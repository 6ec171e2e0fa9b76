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
#include <pthread.h>
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

/* Where a CUPTI symbol is looked up when neither scope below has it: the
 * loaded objects' names, collected first (CUPTI-named ones first) and
 * opened only after dl_iterate_phdr has returned. dlopen inside its
 * callback would take the loader's lock while the iteration holds the
 * link-map lock: the reverse of a concurrent dlopen's order (a deadlock
 * of the host). */
#define GT_MAXOBJ 64
static struct {
	char name[GT_MAXOBJ][512];
	int n;
} objs;

static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
	const int *pass = arg;
	const char *n = info->dlpi_name, *s;

	(void)size;
	if (!n || !n[0] || objs.n == GT_MAXOBJ || strlen(n) >= sizeof objs.name[0])
		return 0;
	s = strrchr(n, '/');
	if ((strstr(s ? s + 1 : n, "cupti") != NULL) == (*pass == 0))
		memcpy(objs.name[objs.n++], n, strlen(n) + 1);
	return 0;
}

/* `name` in the lookup scope of the loaded object `path` (its own and its
 * dependencies' definitions), never ours; NULL if none. */
static void *in_object(const char *path, const char *name)
{
	void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD), *p;

	if (!h) {
		dlerror();
		return NULL;
	}
	p = gmp_lookup(h, name, NULL);
	dlclose(h); /* NOLOAD: it stays as loaded as it was */
	dlerror();
	return p && !gmp_in_range(gmp_self(), p) ? p : NULL;
}

void *gmp_gt_find_real(const char *name, const void *caller, int *global)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct link_map *lm = NULL;
	Dl_info info;
	void *p;

	*global = 0;
	/* As the caller's reference binds without us: the global scope
	 * after this library, then the caller's own scope (an object loaded
	 * with RTLD_LOCAL, as a Python extension's dependencies are: its PLT
	 * reached us first because we are in the global scope). */
	p = gmp_lookup(RTLD_NEXT, name, NULL);
	dlerror();
	if (p && !gmp_in_range(gmp_self(), p)) {
		*global = 1;
		return p;
	}
	if (caller && dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) &&
	    lm && lm->l_name && lm->l_name[0] &&
	    (p = in_object(lm->l_name, name)) != NULL)
		return p;
	/* Last: any loaded object that has it, CUPTI-named ones first. */
	p = NULL;
	pthread_mutex_lock(&mu);
	for (int pass = 0; pass < 2 && !p; pass++) {
		objs.n = 0;
		dl_iterate_phdr(collect, &pass);
		for (int i = 0; i < objs.n && !p; i++)
			p = in_object(objs.name[i], name);
	}
	pthread_mutex_unlock(&mu);
	return p;
}
