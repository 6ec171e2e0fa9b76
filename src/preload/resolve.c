/*
 * resolve.c - find the real dlsym/dlvsym and the real driver's functions.
 *
 * Why not simply dlsym(RTLD_NEXT, "dlsym")? This library exports dlsym and
 * dlvsym itself, so every reference to them from here binds to our own
 * hooks. Other interposers used _dl_sym or __libc_dlsym, which are
 * GLIBC_PRIVATE and disappeared in glibc 2.34. Instead we walk the loaded
 * objects with dl_iterate_phdr, find libc.so.6 (glibc >= 2.34) or
 * libdl.so.2 (older), and look "dlsym"/"dlvsym" up in its dynamic symbol
 * table ourselves, taking the default version (dlsym@@GLIBC_2.34, not the
 * compat dlsym@GLIBC_2.2.5, though both are the same code today).
 *
 * No pthread_once anywhere: the driver, NVML or another preload may call
 * dlsym while we are initialising, and pthread_once around code that can
 * reach dlsym deadlocks (a known failure of other interposers). Every
 * cache here is filled by whoever gets there first, with atomics; two
 * threads that race compute the same answer.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "resolve.h"

#define LOAD(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)
#define TLS_IE __attribute__((tls_model("initial-exec")))

/* The ELF types of this process's word size (what <link.h> calls ElfW). */
#if UINTPTR_MAX > 0xffffffffu
typedef Elf64_Addr elf_addr;
typedef Elf64_Half elf_half;
typedef Elf64_Sym elf_sym;
typedef Elf64_Dyn elf_dyn;
typedef Elf64_Phdr elf_phdr;
#define ELF_ST_TYPE ELF64_ST_TYPE
#else
typedef Elf32_Addr elf_addr;
typedef Elf32_Half elf_half;
typedef Elf32_Sym elf_sym;
typedef Elf32_Dyn elf_dyn;
typedef Elf32_Phdr elf_phdr;
#define ELF_ST_TYPE ELF32_ST_TYPE
#endif
#define STORE(p, v) __atomic_store_n(&(p), (v), __ATOMIC_RELEASE)

/* ---- Reading one object's dynamic symbol table -------------------------- */

struct dynsyms {
	uintptr_t base;
	const elf_sym *sym;
	const char *str;
	const uint32_t *gnu_hash;
	const uint32_t *sysv_hash;
	const elf_half *versym;
};

/*
 * glibc relocates the address entries of a loaded object's dynamic section
 * in place on most architectures, but not on all (MIPS, RISC-V keep them
 * read-only). An unrelocated entry is a small offset below the load
 * address; a relocated one is not.
 */
static uintptr_t dyn_ptr(uintptr_t base, elf_addr v)
{
	return (uintptr_t)v < base ? base + (uintptr_t)v : (uintptr_t)v;
}

static int dynsyms_init(struct dynsyms *d, uintptr_t base,
			const elf_dyn *dyn)
{
	memset(d, 0, sizeof *d);
	d->base = base;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_SYMTAB:
			d->sym = (const elf_sym *)dyn_ptr(base, dyn->d_un.d_ptr);
			break;
		case DT_STRTAB:
			d->str = (const char *)dyn_ptr(base, dyn->d_un.d_ptr);
			break;
		case DT_GNU_HASH:
			d->gnu_hash = (const uint32_t *)dyn_ptr(base, dyn->d_un.d_ptr);
			break;
		case DT_HASH:
			d->sysv_hash = (const uint32_t *)dyn_ptr(base, dyn->d_un.d_ptr);
			break;
		case DT_VERSYM:
			d->versym = (const elf_half *)dyn_ptr(base, dyn->d_un.d_ptr);
			break;
		default:
			break;
		}
	}
	return d->sym && d->str && (d->gnu_hash || d->sysv_hash) ? 0 : -1;
}

/* A defined function whose version (if any) is the default one. */
static void *sym_match(const struct dynsyms *d, uint32_t i, const char *name)
{
	const elf_sym *s = &d->sym[i];
	int type = ELF_ST_TYPE(s->st_info);

	if (s->st_shndx == SHN_UNDEF || s->st_value == 0 ||
	    type != STT_FUNC || strcmp(d->str + s->st_name, name) != 0)
		return NULL;
	/* Bit 15 of the version index marks a hidden (non-default) version
	 * such as dlsym@GLIBC_2.2.5; index 0 is a local symbol. */
	if (d->versym && ((d->versym[i] & 0x8000) || d->versym[i] == 0))
		return NULL;
	return (void *)(d->base + s->st_value);
}

static void *lookup_gnu(const struct dynsyms *d, const char *name)
{
	const uint32_t *h = d->gnu_hash;
	uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
	const elf_addr *bloom = (const elf_addr *)(h + 4);
	const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size);
	const uint32_t *chain = buckets + nbuckets;
	uint32_t hash = 5381, i;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		hash = hash * 33 + *p;
	if (nbuckets == 0)
		return NULL;
	i = buckets[hash % nbuckets];
	if (i < symoffset)
		return NULL;
	for (;; i++) {
		uint32_t ch = chain[i - symoffset];
		if ((ch | 1) == (hash | 1)) {
			void *p = sym_match(d, i, name);
			if (p)
				return p;
		}
		if (ch & 1)
			return NULL;
	}
}

static void *lookup_sysv(const struct dynsyms *d, const char *name)
{
	const uint32_t *h = d->sysv_hash;
	uint32_t nbucket = h[0], hash = 0;
	const uint32_t *bucket = h + 2, *chain = bucket + nbucket;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		uint32_t g;
		hash = (hash << 4) + *p;
		g = hash & 0xf0000000u;
		if (g)
			hash ^= g >> 24;
		hash &= ~g;
	}
	if (nbucket == 0)
		return NULL;
	for (uint32_t i = bucket[hash % nbucket]; i != STN_UNDEF; i = chain[i]) {
		void *p = sym_match(d, i, name);
		if (p)
			return p;
	}
	return NULL;
}

static void *dynsyms_lookup(const struct dynsyms *d, const char *name)
{
	return d->gnu_hash ? lookup_gnu(d, name) : lookup_sysv(d, name);
}

/* ---- The real dlsym and dlvsym ------------------------------------------ */

struct libc_search {
	void *dlsym_libc, *dlvsym_libc, *dlmopen_libc;    /* from libc.so.6 */
	void *dlsym_libdl, *dlvsym_libdl, *dlmopen_libdl; /* from libdl.so.2 */
};

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static int find_libc_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct libc_search *s = arg;
	const char *name;
	int libc;
	struct dynsyms d;

	(void)size;
	if (!info->dlpi_name || !*info->dlpi_name)
		return 0;
	name = base_name(info->dlpi_name);
	libc = strcmp(name, "libc.so.6") == 0;
	if (!libc && strcmp(name, "libdl.so.2") != 0)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
			continue;
		if (dynsyms_init(&d, (uintptr_t)info->dlpi_addr,
				 (const elf_dyn *)(info->dlpi_addr +
						     info->dlpi_phdr[i].p_vaddr)))
			return 0;
		if (libc) {
			s->dlsym_libc = dynsyms_lookup(&d, "dlsym");
			s->dlvsym_libc = dynsyms_lookup(&d, "dlvsym");
			s->dlmopen_libc = dynsyms_lookup(&d, "dlmopen");
		} else {
			s->dlsym_libdl = dynsyms_lookup(&d, "dlsym");
			s->dlvsym_libdl = dynsyms_lookup(&d, "dlvsym");
			s->dlmopen_libdl = dynsyms_lookup(&d, "dlmopen");
		}
		break;
	}
	return 0;
}

static gmp_dlsym_fn real_dlsym_ptr;
static gmp_dlvsym_fn real_dlvsym_ptr;
static gmp_dlmopen_fn real_dlmopen_ptr;

static void find_real(void)
{
	struct libc_search s = { 0 };
	int saved = errno;

	dl_iterate_phdr(find_libc_cb, &s);
	errno = saved;
	/* glibc >= 2.34 has dlsym in libc.so.6 (libdl.so.2 is an empty
	 * stub); before that only libdl.so.2 exports it. */
	if (s.dlsym_libc && s.dlvsym_libc) {
		STORE(real_dlmopen_ptr, (gmp_dlmopen_fn)s.dlmopen_libc);
		STORE(real_dlvsym_ptr, (gmp_dlvsym_fn)s.dlvsym_libc);
		STORE(real_dlsym_ptr, (gmp_dlsym_fn)s.dlsym_libc);
	} else if (s.dlsym_libdl) {
		STORE(real_dlmopen_ptr, (gmp_dlmopen_fn)s.dlmopen_libdl);
		STORE(real_dlvsym_ptr, (gmp_dlvsym_fn)s.dlvsym_libdl);
		STORE(real_dlsym_ptr, (gmp_dlsym_fn)s.dlsym_libdl);
	}
}

gmp_dlsym_fn gmp_real_dlsym(void)
{
	gmp_dlsym_fn f = LOAD(real_dlsym_ptr);
	if (__builtin_expect(f == NULL, 0)) {
		find_real();
		f = LOAD(real_dlsym_ptr);
	}
	return f;
}

gmp_dlvsym_fn gmp_real_dlvsym(void)
{
	gmp_dlvsym_fn f = LOAD(real_dlvsym_ptr);
	if (__builtin_expect(f == NULL, 0)) {
		find_real();
		f = LOAD(real_dlvsym_ptr);
	}
	return f;
}

gmp_dlmopen_fn gmp_real_dlmopen(void)
{
	gmp_dlmopen_fn f = LOAD(real_dlmopen_ptr);
	if (__builtin_expect(f == NULL, 0)) {
		find_real();
		f = LOAD(real_dlmopen_ptr);
	}
	return f;
}

const char *gmp_soname(const void *dynamic, uintptr_t base)
{
	const elf_dyn *dyn = dynamic;
	const char *str = NULL;
	uintptr_t off = UINTPTR_MAX;

	for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
		if (dyn->d_tag == DT_STRTAB)
			str = (const char *)dyn_ptr(base, dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_SONAME)
			off = (uintptr_t)dyn->d_un.d_val;
	}
	return str && off != UINTPTR_MAX ? str + off : NULL;
}

void *gmp_lookup(void *handle, const char *name, const char *version)
{
	if (version) {
		gmp_dlvsym_fn f = gmp_real_dlvsym();
		return f ? f(handle, name, version) : NULL;
	} else {
		gmp_dlsym_fn f = gmp_real_dlsym();
		return f ? f(handle, name) : NULL;
	}
}

/* ---- Address ranges of loaded objects ----------------------------------- */

struct range_search {
	uintptr_t addr;
	struct gmp_range r;
	int found;
};

static int range_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct range_search *s = arg;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	int hit = 0;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const elf_phdr *ph = &info->dlpi_phdr[i];
		uintptr_t a, b;
		if (ph->p_type != PT_LOAD)
			continue;
		a = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
		b = a + ph->p_memsz;
		if (a < lo)
			lo = a;
		if (b > hi)
			hi = b;
		if (s->addr >= a && s->addr < b)
			hit = 1;
	}
	if (!hit)
		return 0;
	s->r.lo = lo;
	s->r.hi = hi;
	s->found = 1;
	return 1;
}

static int range_of(const void *p, struct gmp_range *out)
{
	struct range_search s = { .addr = (uintptr_t)p };

	dl_iterate_phdr(range_cb, &s);
	if (!s.found)
		return -1;
	*out = s.r;
	return 0;
}

/* 0: not computed, 1: being computed by one thread, 2: ready. */
static int self_state;
static struct gmp_range self_range;

const struct gmp_range *gmp_self(void)
{
	static TLS_IE _Thread_local struct gmp_range local;
	int expect = 0;

	if (LOAD(self_state) == 2)
		return &self_range;
	if (__atomic_compare_exchange_n(&self_state, &expect, 1, 0,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		if (range_of((const void *)&gmp_self, &self_range) == 0) {
			STORE(self_state, 2);
			return &self_range;
		}
		STORE(self_state, 0);
		return NULL;
	}
	/* Someone else is filling the cache: compute our own copy. */
	if (range_of((const void *)&gmp_self, &local) == 0)
		return &local;
	return NULL;
}

/* ---- The real driver ------------------------------------------------------ */

static int cuda_state;
static struct gmp_cuda cuda_info;

static int cuda_find(struct gmp_cuda *c)
{
	/* RTLD_NOLOAD: a process that has not loaded the driver must not
	 * get it from us. */
	void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
	int rc = -1;

	if (!h) {
		dlerror(); /* not loaded is no error of the caller's */
		return -1;
	}
	memset(c, 0, sizeof *c);
	c->init = gmp_lookup(h, "cuInit", NULL);
	c->gpa1 = gmp_lookup(h, "cuGetProcAddress", NULL);
	c->gpa2 = gmp_lookup(h, "cuGetProcAddress_v2", NULL);
	if (c->init && range_of(c->init, &c->range) == 0) {
		/* A name the handle's dependencies define, not the driver
		 * (an old driver without cuGetProcAddress_v2), is no
		 * driver function. */
		if (c->gpa1 && !gmp_in_range(&c->range, c->gpa1))
			c->gpa1 = NULL;
		if (c->gpa2 && !gmp_in_range(&c->range, c->gpa2))
			c->gpa2 = NULL;
		rc = 0;
	}
	dlclose(h);
	/* Lookups that failed above must not show up in the caller's
	 * dlerror(). */
	dlerror();
	return rc;
}

const struct gmp_cuda *gmp_cuda(void)
{
	static TLS_IE _Thread_local struct gmp_cuda local;
	int expect = 0;

	if (LOAD(cuda_state) == 2)
		return &cuda_info;
	if (__atomic_compare_exchange_n(&cuda_state, &expect, 1, 0,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		if (cuda_find(&cuda_info) == 0) {
			STORE(cuda_state, 2);
			return &cuda_info;
		}
		STORE(cuda_state, 0);
		return NULL;
	}
	return cuda_find(&local) == 0 ? &local : NULL;
}

/* ---- RTLD_NEXT on behalf of a caller --------------------------------------- */

void *gmp_lookup_next(const void *caller, const char *name,
		      const char *version, int skip_self)
{
	const struct gmp_range *self = gmp_self();
	struct link_map *lm = NULL;
	Dl_info info;

	if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		/* Code outside every object (a JIT): glibc would refuse
		 * RTLD_NEXT; the nearest sensible answer is ours. */
		return gmp_lookup(RTLD_NEXT, name, version);
	for (struct link_map *l = lm->l_next; l; l = l->l_next) {
		struct link_map *owner = NULL;
		void *h, *p;

		if (!l->l_name || !*l->l_name)
			continue;
		if (skip_self && self && gmp_in_range(self, (void *)l->l_ld))
			continue;
		h = dlopen(l->l_name, RTLD_NOLOAD | RTLD_LAZY);
		if (!h)
			continue;
		/* The handle's search list starts with the object itself,
		 * then its dependencies: keep the answer only if it comes
		 * from this very object. */
		p = gmp_lookup(h, name, version);
		dlclose(h);
		if (p && dladdr1(p, &info, (void **)&owner, RTLD_DL_LINKMAP) &&
		    owner == l) {
			dlerror();
			return p;
		}
	}
	/* Not found after the caller. The caller still expects dlerror() to
	 * say why; a lookup that cannot succeed (a version nobody defines)
	 * makes glibc record "undefined symbol: <name>, version ...". */
	(void)gmp_lookup(RTLD_NEXT, name, "GPUMUTEX_NOT_FOUND");
	return NULL;
}
