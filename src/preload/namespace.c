/*
 * namespace.c - dlmopen outside the main link-map namespace.
 *
 * A library that dlmopen loads into another namespace (LM_ID_NEWLM, or one
 * made that way before) gets its own copy of everything it needs, the
 * NVIDIA driver included, whether or not the driver is already loaded in
 * the main namespace; and LD_PRELOAD libraries are not loaded there. Code
 * in that namespace reaches its copy's cuInit by its own PLT or its own
 * libc's dlsym, and no hook of ours sees it: the process could use a GPU
 * that another job holds, with no lease and no CUDA_VISIBLE_DEVICES. So,
 * when gpumutex is configured, such a dlmopen is made here on the caller's
 * behalf and the namespace it loaded into is inspected afterwards; one that
 * holds the driver is refused (the handle closed again, NULL returned).
 *
 * Afterwards, not before: which objects a load brings in (dependencies,
 * their search paths) is the dynamic linker's business, and reproducing it
 * would be a second, diverging loader. The price: constructors of the
 * loaded objects have run before the check (see docs/design.md, "Users and
 * permissions", for what remains open).
 *
 * The file name as the caller meant it. glibc resolves $ORIGIN in a name
 * against the calling object's directory and searches a name without a
 * slash along the calling object's RPATH/RUNPATH, finding the caller from
 * dlmopen's return address. Our real dlmopen is called from here, so both
 * are done here first, for the caller:
 *   - $ORIGIN / ${ORIGIN}: the caller's directory (the executable's, from
 *     /proc/self/exe, for the main program);
 *   - a name without a slash: the caller's search directories
 *     (dlinfo RTLD_DI_SERINFO), less those it shares at the end with this
 *     library's own list (the default directories, which glibc searches
 *     after its ld.so.cache, and what the executable's RPATH and
 *     LD_LIBRARY_PATH put in both), tried in order for an ELF object of
 *     this process's kind; the first found is passed as a path. Found
 *     nowhere there: the name as given, which glibc then looks up from here
 *     along the same shared directories and the cache. Approximations: the
 *     glibc-hwcaps subdirectories are not tried, and a caller with a
 *     RUNPATH does not search the executable's DT_RPATH where this library
 *     does.
 * Set-user-ID processes (AT_SECURE) get the name unchanged: glibc's own
 * restrictions on $ORIGIN there are not reproduced.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "gate.h"
#include "namespace.h"
#include "resolve.h"

/* The dlerror() a refused call leaves: dlopen with RTLD_NOLOAD of this
 * path fails with it (one open(2) of a file only root could make, and
 * RTLD_NOLOAD loads nothing even then). */
#define REFUSED_NAME "/gpumutex refused to load the NVIDIA driver outside the main link-map namespace (see its message on stderr)"

int gmp_ns_passes(long lmid, const char *file)
{
	const char *v = getenv("GPUMUTEX_VISIBLE_DEVICES");

	/* Empty is unset, as for the gate (src/lease/config.c). */
	return lmid == LM_ID_BASE || !file || !v || !*v;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* ---- The caller's view of the file name ------------------------------- */

/* A handle of the object containing `caller` (the main program for code
 * outside every object), and its link map in *lm (NULL for the main
 * program). dlclose the handle. */
static void *caller_handle(const void *caller, struct link_map **lm)
{
	Dl_info info;

	*lm = NULL;
	if (dladdr1(caller, &info, (void **)lm, RTLD_DL_LINKMAP) && *lm &&
	    (*lm)->l_name && (*lm)->l_name[0])
		return dlopen((*lm)->l_name, RTLD_LAZY | RTLD_NOLOAD);
	*lm = NULL;
	return dlopen(NULL, RTLD_LAZY);
}

/* This library's own handle (dlclose it), or NULL. */
static void *self_handle(void)
{
	struct link_map *lm = NULL;
	Dl_info info;

	if (!dladdr1((const void *)&gmp_ns_passes, &info, (void **)&lm,
		     RTLD_DL_LINKMAP) || !lm || !lm->l_name || !lm->l_name[0])
		return NULL;
	return dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD);
}

/* $ORIGIN of `lm` (NULL: the main program) on the heap, or NULL when it
 * cannot be told (a library loaded by a relative path). */
static char *origin_of(const struct link_map *lm)
{
	char *buf, *slash;

	if (!lm) {
		ssize_t n;

		buf = malloc(PATH_MAX);
		n = buf ? readlink("/proc/self/exe", buf, PATH_MAX - 1) : -1;
		if (n <= 0) {
			free(buf);
			return NULL;
		}
		buf[n] = '\0';
	} else if (lm->l_name[0] == '/') {
		buf = strdup(lm->l_name);
	} else {
		return NULL;
	}
	if (!buf)
		return NULL;
	slash = strrchr(buf, '/');
	if (slash == buf)
		slash[1] = '\0'; /* "/" */
	else
		*slash = '\0';
	return buf;
}

static int ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_';
}

/* `file` with $ORIGIN and ${ORIGIN} replaced by `dir`, on the heap. */
static char *expand_origin(const char *file, const char *dir)
{
	size_t dl = strlen(dir), n = strlen(file) + 1;
	char *out, *w;

	for (const char *p = file; *p; p++)
		n += *p == '$' ? dl : 0;
	out = w = malloc(n);
	if (!out)
		return NULL;
	for (const char *p = file; *p;) {
		size_t skip = 0;

		if (p[0] == '$' && strncmp(p + 1, "ORIGIN", 6) == 0 &&
		    !ident_char(p[7]))
			skip = 7;
		else if (p[0] == '$' && strncmp(p + 1, "{ORIGIN}", 8) == 0)
			skip = 9;
		if (skip) {
			memcpy(w, dir, dl);
			w += dl;
			p += skip;
		} else {
			*w++ = *p++;
		}
	}
	*w = '\0';
	return out;
}

/* The search directories of the object behind handle `h`, on the heap. */
static Dl_serinfo *search_list(void *h)
{
	Dl_serinfo size, *si;

	if (!h || dlinfo(h, RTLD_DI_SERINFOSIZE, &size) != 0 ||
	    size.dls_size < sizeof *si)
		return NULL;
	si = malloc(size.dls_size);
	if (!si)
		return NULL;
	si->dls_size = size.dls_size;
	si->dls_cnt = size.dls_cnt;
	if (dlinfo(h, RTLD_DI_SERINFO, si) != 0) {
		free(si);
		return NULL;
	}
	return si;
}

/* 1 if `path` is an ELF shared object this process could load (class,
 * byte order, type and, where known, machine), as glibc checks before it
 * takes a file it found and goes on searching otherwise. */
static int loadable(const char *path)
{
	unsigned char h[20];
	uint16_t type, machine;
	int fd = open(path, O_RDONLY | O_CLOEXEC), ok;

	if (fd < 0)
		return 0;
	ok = read(fd, h, sizeof h) == (ssize_t)sizeof h;
	close(fd);
	if (!ok || memcmp(h, ELFMAG, SELFMAG) != 0 ||
	    h[EI_CLASS] != (UINTPTR_MAX > 0xffffffffu ? ELFCLASS64 : ELFCLASS32))
		return 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (h[EI_DATA] != ELFDATA2LSB)
		return 0;
#else
	if (h[EI_DATA] != ELFDATA2MSB)
		return 0;
#endif
	memcpy(&type, h + 16, 2);
	memcpy(&machine, h + 18, 2);
	if (type != ET_DYN)
		return 0;
#if defined(__x86_64__)
	return machine == EM_X86_64;
#elif defined(__aarch64__)
	return machine == EM_AARCH64;
#else
	(void)machine;
	return 1;
#endif
}

/* Where the caller (handle `ch`) finds `name` before the directories it
 * shares at the end of its list with this library's (handle `sh`); heap
 * path, or NULL. */
static char *search(void *ch, void *sh, const char *name)
{
	Dl_serinfo *c = search_list(ch), *o = search_list(sh);
	unsigned common = 0, nc;
	char *found = NULL;

	if (!c)
		goto out;
	nc = c->dls_cnt;
	while (o && common < nc && common < o->dls_cnt &&
	       strcmp(c->dls_serpath[nc - 1 - common].dls_name,
		      o->dls_serpath[o->dls_cnt - 1 - common].dls_name) == 0)
		common++;
	for (unsigned i = 0; i + common < nc && !found; i++) {
		const char *dir = c->dls_serpath[i].dls_name;
		size_t len = strlen(dir) + strlen(name) + 2;
		char *p = malloc(len);

		if (!p)
			break;
		snprintf(p, len, "%s/%s", dir, name);
		if (loadable(p))
			found = p;
		else
			free(p);
	}
out:
	free(c);
	free(o);
	return found;
}

/* `file` as the code at `caller` meant it, on the heap; NULL to pass
 * `file` unchanged. */
static char *for_caller(const void *caller, const char *file)
{
	struct link_map *lm;
	char *name = NULL;
	void *ch;

	if (getauxval(AT_SECURE) ||
	    (strchr(file, '/') && !strchr(file, '$')))
		return NULL;
	ch = caller_handle(caller, &lm);
	if (strchr(file, '$')) {
		char *dir = origin_of(lm);

		if (dir)
			name = expand_origin(file, dir);
		free(dir);
	}
	if (!strchr(name ? name : file, '/') && ch) {
		void *sh = self_handle();
		char *found = search(ch, sh, name ? name : file);

		if (sh)
			dlclose(sh);
		if (found) {
			free(name);
			name = found;
		}
	}
	if (ch)
		dlclose(ch);
	return name;
}

/* ---- The namespace's contents ----------------------------------------- */

static int is_driver(const struct link_map *l)
{
	const char *soname;

	if (l->l_name && strncmp(base_name(l->l_name), "libcuda.so", 10) == 0)
		return 1;
	soname = gmp_soname(l->l_ld, (uintptr_t)l->l_addr);
	return soname && strncmp(soname, "libcuda.so", 10) == 0;
}

struct ns_check {
	const struct link_map *start; /* an object of the namespace */
	char *driver;                 /* the driver's name, when found */
	int unknown;                  /* could not tell */
};

/*
 * Walk the namespace's list of objects. Done from inside dl_iterate_phdr,
 * which holds the dynamic linker's lock on those lists while it calls us:
 * another thread's dlopen or dlclose in that namespace cannot change the
 * list under the walk. Called once (returns 1).
 */
static int ns_check_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct ns_check *c = arg;
	const struct link_map *l = c->start;

	(void)info;
	(void)size;
	while (l->l_prev)
		l = l->l_prev;
	for (; l; l = l->l_next) {
		if (!is_driver(l))
			continue;
		c->driver = strdup(l->l_name && l->l_name[0] ? l->l_name :
				   "libcuda.so");
		c->unknown = !c->driver;
		break;
	}
	return 1;
}

void *gmp_ns_dlmopen(long lmid, const char *file, int mode,
		     const void *caller)
{
	gmp_dlmopen_fn real = gmp_real_dlmopen();
	struct ns_check c = { NULL, NULL, 0 };
	struct link_map *lm = NULL;
	char *path, where[32];
	int saved = errno;
	void *h;

	if (!real)
		return NULL;
	/* In a namespace that exists, glibc first takes an object already
	 * there under that name (its file name, a name it was loaded by, or
	 * its SONAME), wherever the caller's search path would point: asked
	 * for by name with RTLD_NOLOAD, which loads nothing. Only then is
	 * the name resolved for the caller. */
	h = NULL;
	if (lmid != LM_ID_NEWLM && !strchr(file, '/') && !strchr(file, '$'))
		h = real(lmid, file, mode | RTLD_NOLOAD);
	if (!h) {
		path = for_caller(caller, file);
		errno = saved;
		h = real(lmid, path ? path : file, mode);
		free(path);
	}
	saved = errno;
	if (!h)
		return NULL; /* the real error, in dlerror() and errno */
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm) {
		c.start = lm;
		dl_iterate_phdr(ns_check_cb, &c);
	} else {
		c.unknown = 1;
	}
	if (!c.driver && !c.unknown) {
		errno = saved;
		return h;
	}
	dlclose(h);
	if (lmid == LM_ID_NEWLM)
		snprintf(where, sizeof where, "LM_ID_NEWLM");
	else
		snprintf(where, sizeof where, "%ld", lmid);
	if (c.driver)
		gmp_say("refused dlmopen(%s, \"%s\"): it loads the NVIDIA driver (%s) into a link-map namespace of its own, where gpumutex cannot queue cuInit, so this process could use a GPU that another job holds; load \"%s\" with dlopen (or dlmopen(LM_ID_BASE, ...)) instead",
			where, file, c.driver, file);
	else
		gmp_say("refused dlmopen(%s, \"%s\"): cannot tell whether it loads the NVIDIA driver into a link-map namespace of its own, where gpumutex cannot queue cuInit; load \"%s\" with dlopen (or dlmopen(LM_ID_BASE, ...)) instead",
			where, file, file);
	free(c.driver);
	/* The last dl call: what dlerror() reports. */
	(void)dlopen(REFUSED_NAME, RTLD_LAZY | RTLD_NOLOAD);
	errno = saved;
	return NULL;
}
