/*
 * resolve.c - find the function the caller would have called without us.
 *
 * dlsym(RTLD_NEXT) is not enough: NumPy and SciPy load their BLAS with
 * RTLD_LOCAL (Python imports extension modules that way), so the library
 * is in no global scope; only the module that calls it, and its
 * dependencies, can see it. The order, for a call from site S:
 *   1. the module containing S and its dependencies (dlsym on a handle
 *      of it; for the main program that is the global scope);
 *   2. the global scope after this library (dlsym(RTLD_NEXT));
 *   3. every loaded object in load order (dl_iterate_phdr).
 * An answer inside this library is never taken (the global scope starts
 * with the preload, so step 1 finds our own wrapper for the main program).
 *
 * Caches: per wrapper, a few call sites (struct gpo_fn.cache), filled once
 * and never replaced, so that a reader never sees a site with another
 * site's function; behind it, per wrapper, a few modules (mcache): the
 * answer depends only on the module holding the site (step 1; steps 2 and
 * 3 do not depend on the site at all), and a LAPACK calls its BLAS from
 * dozens of sites in one module. An mcache entry holds its module's
 * address range (from the loaded objects' program headers, not dladdr(),
 * which also searches the symbol table), so a site the first cache has no
 * room for is answered by a lock-free range check; before, every such
 * call paid a full lookup (the H200 machine's mixed workload ran 24x
 * slower for it). A site whose caches are full is looked up each time
 * (slow, still right). Not found is not cached: a library may be loaded
 * later. A module unloaded and another loaded at the same addresses would
 * be mistaken for it, as a call site would be.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#include "frontend.h"

#define CLAIMED ((const void *)1)

static struct link_map *gpo__self;

static struct link_map *gpo__map_of(const void *p)
{
	Dl_info info;
	void *lm = NULL;

	if (!dladdr1(p, &info, &lm, RTLD_DL_LINKMAP))
		return NULL;
	return lm;
}

static int gpo__is_self(const void *p)
{
	struct link_map *self = __atomic_load_n(&gpo__self, __ATOMIC_ACQUIRE);

	if (!self) {
		self = gpo__map_of((const void *)gpo__map_of);
		__atomic_store_n(&gpo__self, self, __ATOMIC_RELEASE);
	}
	return self && gpo__map_of(p) == self;
}

/* dlsym that leaves no error behind for the program's next dlerror(). */
static void *gpo__sym(void *handle, const char *name)
{
	void *p = dlsym(handle, name);

	if (!p)
		(void)dlerror();
	return p && !gpo__is_self(p) ? p : NULL;
}

#define GPO__MAXOBJ 512

/* The loaded objects' address ranges (their PT_LOAD segments), rebuilt
 * when a site lies in none of them (a library loaded since). */
struct gpo__range {
	uintptr_t lo, hi;
};
static struct gpo__range gpo__ranges[GPO__MAXOBJ];
static int gpo__nranges;
static pthread_mutex_t gpo__rlock = PTHREAD_MUTEX_INITIALIZER;

static int gpo__range_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t lo = UINTPTR_MAX, hi = 0;

	(void)size;
	(void)arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t a = (uintptr_t)info->dlpi_addr + (uintptr_t)ph->p_vaddr;
		if (ph->p_type != PT_LOAD)
			continue;
		if (a < lo)
			lo = a;
		if (a + ph->p_memsz > hi)
			hi = a + ph->p_memsz;
	}
	if (lo < hi && gpo__nranges < GPO__MAXOBJ) {
		gpo__ranges[gpo__nranges].lo = lo;
		gpo__ranges[gpo__nranges].hi = hi;
		gpo__nranges++;
	}
	return 0;
}

static const struct gpo__range *gpo__range_find(uintptr_t p)
{
	for (int i = 0; i < gpo__nranges; i++)
		if (p >= gpo__ranges[i].lo && p < gpo__ranges[i].hi)
			return &gpo__ranges[i];
	return NULL;
}

/* The address range of the loaded object holding p; 0 when none does.
 * Only on the slow path (a site neither cache knows). */
static int gpo__module_of(const void *p, struct gpo__range *out)
{
	const struct gpo__range *r;

	pthread_mutex_lock(&gpo__rlock);
	r = gpo__range_find((uintptr_t)p);
	if (!r) {
		gpo__nranges = 0;
		dl_iterate_phdr(gpo__range_cb, NULL);
		r = gpo__range_find((uintptr_t)p);
	}
	if (r)
		*out = *r;
	pthread_mutex_unlock(&gpo__rlock);
	return r != NULL;
}

/* The function cached for the module holding `site`, or NULL: a lock-free
 * scan of at most GPO_MODS ranges (entries are filled in order and never
 * replaced; lo is published last). */
static void *gpo__mod_get(struct gpo_mod *c, const void *site)
{
	uintptr_t p = (uintptr_t)site;

	for (unsigned i = 0; i < GPO_MODS; i++) {
		uintptr_t lo = __atomic_load_n(&c[i].lo, __ATOMIC_ACQUIRE);
		if (!lo)
			break;
		if (lo != (uintptr_t)CLAIMED && p >= lo && p < c[i].hi)
			return c[i].real;
	}
	return NULL;
}

static void gpo__mod_put(struct gpo_mod *c, const struct gpo__range *m,
			 void *real)
{
	for (unsigned i = 0; i < GPO_MODS; i++) {
		uintptr_t expect = 0;
		if (__atomic_compare_exchange_n(&c[i].lo, &expect,
						(uintptr_t)CLAIMED, 0,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			c[i].hi = m->hi;
			c[i].real = real;
			__atomic_store_n(&c[i].lo, m->lo, __ATOMIC_RELEASE);
			return;
		}
		if (expect == m->lo)
			return;
	}
}

/* The function cached for `site`, or NULL. */
static void *gpo__site_get(struct gpo_site *c, unsigned h, const void *site)
{
	for (unsigned i = 0; i < GPO_SITES; i++) {
		struct gpo_site *e = &c[(h + i) % GPO_SITES];
		const void *s = __atomic_load_n(&e->site, __ATOMIC_ACQUIRE);
		if (s == site)
			return __atomic_load_n(&e->real, __ATOMIC_RELAXED);
		if (!s)
			break;
	}
	return NULL;
}

/* Fill a free entry with site -> real (once; never replaced: an entry is
 * claimed, then its function stored, then its site). */
static void gpo__site_put(struct gpo_site *c, unsigned h, const void *site,
			  void *real)
{
	for (unsigned i = 0; i < GPO_SITES; i++) {
		struct gpo_site *e = &c[(h + i) % GPO_SITES];
		const void *expect = NULL;
		if (__atomic_compare_exchange_n(&e->site, &expect, CLAIMED, 0,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			__atomic_store_n(&e->real, real, __ATOMIC_RELAXED);
			__atomic_store_n(&e->site, site, __ATOMIC_RELEASE);
			return;
		}
		if (expect == site)
			return;
	}
}
struct gpo__objs {
	int n;
	const char *name[GPO__MAXOBJ];
};

static int gpo__collect(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct gpo__objs *o = arg;

	(void)size;
	if (info->dlpi_name && info->dlpi_name[0] && o->n < GPO__MAXOBJ)
		o->name[o->n++] = info->dlpi_name;
	return 0;
}

static void *gpo__lookup(const char *name, const void *site)
{
	struct link_map *lm = gpo__map_of(site);
	/* Big for a stack that may be a 16 KiB thread's: static, and the
	 * slow path is serialised. */
	static struct gpo__objs objs;
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	void *p = NULL;

	if (lm) {
		/* Not dlsym(lm): a dependency that was never dlopen()ed itself
		 * has no search list of its own. dlopen(RTLD_NOLOAD) makes one
		 * (and for the main program's "" name gives the global scope). */
		void *h = lm->l_name && lm->l_name[0] ?
			  dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD) :
			  dlopen(NULL, RTLD_LAZY);
		if (h) {
			p = gpo__sym(h, name);
			dlclose(h);
			if (p)
				return p;
		} else {
			(void)dlerror();
		}
	}
	if ((p = gpo__sym(RTLD_NEXT, name)))
		return p;
	/* dlopen is not called from inside dl_iterate_phdr's callback (it
	 * holds the loader's lock): the names are collected first. */
	pthread_mutex_lock(&lock);
	objs.n = 0;
	dl_iterate_phdr(gpo__collect, &objs);
	for (int i = 0; i < objs.n && !p; i++) {
		void *h = dlopen(objs.name[i], RTLD_LAZY | RTLD_NOLOAD);
		if (!h) {
			(void)dlerror();
			continue;
		}
		p = gpo__sym(h, name);
		dlclose(h);
	}
	pthread_mutex_unlock(&lock);
	return p;
}

void *gpo_resolve(struct gpo_fn *fn, const void *site)
{
	unsigned h = (unsigned)(((uintptr_t)site >> 2) % GPO_SITES);
	struct gpo__range mod;
	int have_mod;
	void *real = gpo__site_get(fn->cache, h, site);

	if (real)
		return real;
	if ((real = gpo__mod_get(fn->mcache, site))) {
		gpo__site_put(fn->cache, h, site, real);
		return real;
	}
	have_mod = gpo__module_of(site, &mod);
	real = gpo__lookup(fn->name, site);
	if (!real) {
		gpo_msg_once(GPO_MSG_NOFN, "no loaded library other than this "
			     "one defines %s; the call did nothing", fn->name);
		return NULL;
	}
	if (have_mod)
		gpo__mod_put(fn->mcache, &mod, real);
	gpo__site_put(fn->cache, h, site, real);
	return real;
}
