/*
 * libs.c - finding and loading cuBLAS and cuSOLVER for
 * libgpuoffload-cuda.so, and resolving what blasapi.h declares.
 *
 * Both are dlopen()ed (RTLD_NOW | RTLD_LOCAL), never linked: one backend
 * serves CUDA 12 and 13, and the libraries are often present only as the
 * pip wheels PyTorch brings, in no directory the loader searches. Names
 * tried, newest first: libcublas.so.13, libcublas.so.12; libcusolver.so.12
 * (CUDA 13 ships cuSOLVER 12), libcusolver.so.11 (CUDA 12). For each name,
 * in this order (the first that loads wins):
 *
 *   1. a copy already loaded in the process (RTLD_NOLOAD): a program that
 *      imported torch has them, and a second copy of cuBLAS in one process
 *      would be wasteful at best;
 *   2. the loader's own search (LD_LIBRARY_PATH, ld.so.cache, the system
 *      directories);
 *   3. every directory of GPU_OFFLOAD_CUDA_PATH (colon-separated);
 *   4. pip's layout: for every object loaded in the process whose path has
 *      a site-packages or dist-packages component (numpy's own extension
 *      modules are, when numpy calls BLAS), that directory's
 *      nvidia/cu13/lib, nvidia/cublas/lib, nvidia/cusolver/lib and
 *      nvidia/cu12/lib;
 *   5. /usr/local/cuda/lib64.
 *
 * The handles are kept for the life of the process (the libraries start
 * threads of their own and register with the runtime; unloading them
 * under those is not safe). Called under the frontend's one-call lock.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpc.h"

struct gpc_bl gpc_bl;

static void *gpc__cublas, *gpc__cusolver;
static int gpc__bl_loaded;

/* dlopen dir/name; a failure's dlerror is cleared. */
static void *gpc__open_in(const char *dir, size_t dlen, const char *name)
{
	static char path[4096];     /* static: the caller serialises */
	void *h;

	if (dlen == 0 || dlen + strlen(name) + 2 > sizeof path)
		return NULL;
	memcpy(path, dir, dlen);
	path[dlen] = '/';
	strcpy(path + dlen + 1, name);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		(void)dlerror();
	return h;
}

struct gpc__pipscan {
	const char *name;
	void *h;
	char seen[8][1024];   /* site-packages directories already tried */
	int nseen;
};

static const char *const gpc__pip_sub[] = {
	"nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cusolver/lib",
	"nvidia/cu12/lib",
};

/* dl_iterate_phdr callback: for an object under a site-packages or
 * dist-packages directory, try pip's NVIDIA directories there. */
static int gpc__pip_one(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct gpc__pipscan *s = arg;
	static char dir[1024], sub[1100];  /* static: the caller serialises */
	const char *p = info->dlpi_name, *hit = NULL, *q;
	size_t dlen;

	(void)size;
	if (!p || !*p)
		return 0;
	for (q = p; (q = strstr(q, "-packages/")) != NULL; q++) {
		size_t back = (size_t)(q - p);
		if ((back >= 4 && memcmp(q - 4, "site", 4) == 0 &&
		     (back == 4 || q[-5] == '/')) ||
		    (back >= 4 && memcmp(q - 4, "dist", 4) == 0 &&
		     (back == 4 || q[-5] == '/'))) {
			hit = q + 9;    /* the '/' after site-packages */
			break;
		}
	}
	if (!hit || (size_t)(hit - p) >= sizeof dir)
		return 0;
	dlen = (size_t)(hit - p);
	memcpy(dir, p, dlen);
	dir[dlen] = '\0';
	for (int i = 0; i < s->nseen; i++)
		if (strcmp(s->seen[i], dir) == 0)
			return 0;
	if (s->nseen < (int)(sizeof s->seen / sizeof s->seen[0]))
		strcpy(s->seen[s->nseen++], dir);
	for (size_t i = 0; i < sizeof gpc__pip_sub / sizeof gpc__pip_sub[0]; i++) {
		int n = snprintf(sub, sizeof sub, "%s/%s", dir, gpc__pip_sub[i]);
		if (n <= 0 || (size_t)n >= sizeof sub)
			continue;
		s->h = gpc__open_in(sub, (size_t)n, s->name);
		if (s->h)
			return 1;
	}
	return 0;
}

/* One library name through the search order above. */
static void *gpc__find(const char *name)
{
	const char *path = secure_getenv("GPU_OFFLOAD_CUDA_PATH");
	struct gpc__pipscan *scan;
	void *h;

	h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!h)
		h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	while (!h && path && *path) {
		const char *end = strchr(path, ':');
		size_t len = end ? (size_t)(end - path) : strlen(path);
		h = gpc__open_in(path, len, name);
		path = end ? end + 1 : NULL;
	}
	if (!h && (scan = calloc(1, sizeof *scan)) != NULL) {
		scan->name = name;
		dl_iterate_phdr(gpc__pip_one, scan);
		h = scan->h;
		free(scan);
	}
	if (!h)
		h = gpc__open_in("/usr/local/cuda/lib64", 21, name);
	(void)dlerror();
	return h;
}

static void *gpc__find_any(const char *const *names)
{
	void *h = NULL;

	for (int i = 0; names[i] && !h; i++)
		h = gpc__find(names[i]);
	return h;
}

int gpc_bl_load(const char **why, char *why_buf, size_t why_len)
{
	static const char *const blas_names[] = { "libcublas.so.13",
						  "libcublas.so.12", NULL };
	static const char *const solver_names[] = { "libcusolver.so.12",
						    "libcusolver.so.11", NULL };
	static const struct {
		int solver;
		const char *name;
		size_t off;
	} fns[] = {
#define F(lib, field, sym) { lib, sym, offsetof(struct gpc_bl, field) }
		F(0, Create, "cublasCreate_v2"),
		F(0, Destroy, "cublasDestroy_v2"),
		F(0, SetStream, "cublasSetStream_v2"),
		F(0, SetPointerMode, "cublasSetPointerMode_v2"),
		F(1, DnCreate, "cusolverDnCreate"),
		F(1, DnDestroy, "cusolverDnDestroy"),
		F(1, DnSetStream, "cusolverDnSetStream"),
		F(1, DnCreateParams, "cusolverDnCreateParams"),
		F(1, DnDestroyParams, "cusolverDnDestroyParams"),
#undef F
	};
	struct gpc_bl t;

	if (gpc__bl_loaded)
		return 0;
	if (!gpc__cublas)
		gpc__cublas = gpc__find_any(blas_names);
	if (!gpc__cublas) {
		*why = "no cuBLAS (libcublas.so.13 or .12 not found; "
		       "GPU_OFFLOAD_CUDA_PATH names more directories)";
		return -1;
	}
	if (!gpc__cusolver)
		gpc__cusolver = gpc__find_any(solver_names);
	if (!gpc__cusolver) {
		*why = "no cuSOLVER (libcusolver.so.12 or .11 not found; "
		       "GPU_OFFLOAD_CUDA_PATH names more directories)";
		return -1;
	}
	memset(&t, 0, sizeof t);
	for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
		void *f = dlsym(fns[i].solver ? gpc__cusolver : gpc__cublas,
				fns[i].name);
		if (!f) {
			(void)dlerror();
			snprintf(why_buf, why_len, "%s lacks %s",
				 fns[i].solver ? "cuSOLVER" : "cuBLAS",
				 fns[i].name);
			*why = why_buf;
			return -1;
		}
		memcpy((char *)&t + fns[i].off, &f, sizeof f);
	}
	gpc_bl = t;
	gpc__bl_loaded = 1;
	return 0;
}

void *gpc_blas_sym(const char *name)
{
	void *f = gpc__cublas ? dlsym(gpc__cublas, name) : NULL;

	if (!f)
		(void)dlerror();
	return f;
}

void *gpc_solver_sym(const char *name)
{
	void *f = gpc__cusolver ? dlsym(gpc__cusolver, name) : NULL;

	if (!f)
		(void)dlerror();
	return f;
}
