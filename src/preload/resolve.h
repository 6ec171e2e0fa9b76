/*
 * resolve.h - finding the real dlsym/dlvsym and the real driver's functions.
 *
 * Everything here is lock-free and safe to call from inside a dlsym hook,
 * from any thread, at any time after the library is mapped (it never runs
 * at load time). Nothing here calls the interposed dlsym/dlvsym: the real
 * ones are found by reading libc's (or, before glibc 2.34, libdl's) dynamic
 * symbol table directly, so no GLIBC_PRIVATE symbol is needed.
 * Prefix gmp_: internal to the preload library.
 */
#ifndef GPUMUTEX_PRELOAD_RESOLVE_H
#define GPUMUTEX_PRELOAD_RESOLVE_H

#include <stdint.h>

typedef void *(*gmp_dlsym_fn)(void *handle, const char *name);
typedef void *(*gmp_dlvsym_fn)(void *handle, const char *name,
			       const char *version);

typedef void *(*gmp_dlmopen_fn)(long lmid, const char *file, int mode);

/* The real dlsym / dlvsym / dlmopen of the C library, or NULL if they
 * cannot be found (not glibc). Resolved on first use, then one atomic
 * load. */
gmp_dlsym_fn gmp_real_dlsym(void);
gmp_dlvsym_fn gmp_real_dlvsym(void);
gmp_dlmopen_fn gmp_real_dlmopen(void);

/* The DT_SONAME of a loaded object, from its dynamic section (a link
 * map's l_ld) and load address (l_addr); NULL if it has none. */
const char *gmp_soname(const void *dynamic, uintptr_t base);

/* The real lookup, called from this library's frame. `version` NULL means
 * dlsym, otherwise dlvsym. Returns NULL (with dlerror set by libc) when the
 * symbol is missing or the real function cannot be found. Note that for
 * RTLD_NEXT and RTLD_DEFAULT the answer is relative to libgpumutex.so, not
 * to whoever called the hook. */
void *gmp_lookup(void *handle, const char *name, const char *version);

/* An address range [lo, hi) covering the PT_LOAD segments of one object. */
struct gmp_range {
	uintptr_t lo, hi;
};

static inline int gmp_in_range(const struct gmp_range *r, const void *p)
{
	return r && (uintptr_t)p >= r->lo && (uintptr_t)p < r->hi;
}

/* The mapping of libgpumutex.so itself (never fails once mapped). */
const struct gmp_range *gmp_self(void);

/* What the real driver exports that the hooks care about. */
struct gmp_cuda {
	struct gmp_range range;   /* libcuda.so.1's mapping */
	void *init;               /* cuInit */
	void *gpa1;               /* cuGetProcAddress (4 arguments) */
	void *gpa2;               /* cuGetProcAddress_v2 (5 arguments) */
};

/*
 * The real driver, if libcuda.so.1 is loaded in this process (found with
 * dlopen(RTLD_NOLOAD): this library never loads the driver itself), else
 * NULL. Cached once found: the driver is never unloaded in practice, and a
 * driver that is dlclosed and loaded again elsewhere is not supported.
 */
const struct gmp_cuda *gmp_cuda(void);

/*
 * What dlsym(RTLD_NEXT, name) (or dlvsym with `version`) returns when
 * called from the object that contains `caller`: the first definition in
 * an object loaded after the caller's. With `skip_self`, libgpumutex.so is
 * passed over ("what would the caller get without the preload"). Walks the
 * link map and asks the real dlsym of each following object, so it costs
 * microseconds: used for the few names the hooks handle, and on
 * architectures without the tail-call entry (see hooks.c).
 * Approximation: it searches every object loaded after the caller's, where
 * glibc searches only the caller's lookup scope (so a library dlopened with
 * RTLD_LOCAL elsewhere can be found here and not by glibc).
 */
void *gmp_lookup_next(const void *caller, const char *name,
		      const char *version, int skip_self);

#endif
