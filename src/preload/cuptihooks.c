/*
 * cuptihooks.c - the CUPTI entry points a profiler starts with, interposed
 * (listed in hooks.c's list, exported by exports.map) so that the GPU-time
 * collector (gputime.c) steps aside before a profiler's first call goes
 * on: CUPTI allows one subscriber and one set of activity callbacks per
 * process, and the profiler must get them as if gpumutex were not there.
 *
 * Each hook: gmp_gt_step_aside (nothing unless GPUMUTEX_GPU_TIME=1 and
 * collecting), then the program's own CUPTI function with the same
 * arguments, its result returned unchanged. The real function is found
 * among the loaded objects (gtload.c), also one loaded with RTLD_LOCAL (as
 * a Python extension's dependencies are), which the PLT bound to us
 * because this library comes first in the global scope. The
 * collector's own CUPTI calls use the pointers it resolved, never these
 * names. None found: CUPTI_ERROR_NOT_INITIALIZED.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "cuptiapi.h"
#include "gputime.h"
#include "hookpriv.h"

#define GMP_EXPORT __attribute__((visibility("default")))
#define GMP_CUPTI_ERROR_NOT_INITIALIZED 15

typedef gmp_cupti_result (*sub_fn)(void **, void *, void *);
typedef gmp_cupti_result (*reg_fn)(void *, void *);
typedef gmp_cupti_result (*kind_fn)(int);
typedef gmp_cupti_result (*ctx_fn)(void *, int);
typedef gmp_cupti_result (*init_fn)(void *);

/* The exported hooks (declared for -Wmissing-prototypes). */
GMP_EXPORT gmp_cupti_result cuptiSubscribe(void **s, void *cb, void *u);
GMP_EXPORT gmp_cupti_result cuptiActivityRegisterCallbacks(void *a, void *b);
GMP_EXPORT gmp_cupti_result cuptiActivityEnable(int kind);
GMP_EXPORT gmp_cupti_result cuptiActivityEnableAndDump(int kind);
GMP_EXPORT gmp_cupti_result cuptiActivityEnableContext(void *ctx, int kind);
GMP_EXPORT gmp_cupti_result cuptiProfilerInitialize(void *params);

/* The real functions, found once (a CUPTI is not unloaded while the
 * program that uses it runs), by hook: cuptihooks.c's order below. */
enum { H_SUB, H_REG, H_EN, H_DUMP, H_CTX, H_PROF, H_N };
static void *found[H_N];

/* The real function after stepping aside; errno as the caller left it. */
static void *real(const char *name, int i)
{
	int saved = errno;
	void *p;

	gmp_gt_step_aside(name);
	p = __atomic_load_n(&found[i], __ATOMIC_ACQUIRE);
	if (!p) {
		p = gmp_gt_real(name);
		__atomic_store_n(&found[i], p, __ATOMIC_RELEASE);
	}
	errno = saved;
	return p;
}

GMP_EXPORT gmp_cupti_result cuptiSubscribe(void **s, void *cb, void *u)
{
	sub_fn f = (sub_fn)real("cuptiSubscribe", H_SUB);

	return f ? f(s, cb, u) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityRegisterCallbacks(void *a, void *b)
{
	reg_fn f = (reg_fn)real("cuptiActivityRegisterCallbacks", H_REG);

	return f ? f(a, b) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityEnable(int kind)
{
	kind_fn f = (kind_fn)real("cuptiActivityEnable", H_EN);

	return f ? f(kind) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityEnableAndDump(int kind)
{
	kind_fn f = (kind_fn)real("cuptiActivityEnableAndDump", H_DUMP);

	return f ? f(kind) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityEnableContext(void *ctx, int kind)
{
	ctx_fn f = (ctx_fn)real("cuptiActivityEnableContext", H_CTX);

	return f ? f(ctx, kind) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiProfilerInitialize(void *params)
{
	init_fn f = (init_fn)real("cuptiProfilerInitialize", H_PROF);

	return f ? f(params) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

void *gmp_cupti_hook(const char *name)
{
	static const struct {
		const char *name;
		void *fn;
	} t[] = {
		{ "cuptiSubscribe", (void *)&cuptiSubscribe },
		{ "cuptiActivityRegisterCallbacks",
		  (void *)&cuptiActivityRegisterCallbacks },
		{ "cuptiActivityEnable", (void *)&cuptiActivityEnable },
		{ "cuptiActivityEnableAndDump",
		  (void *)&cuptiActivityEnableAndDump },
		{ "cuptiActivityEnableContext",
		  (void *)&cuptiActivityEnableContext },
		{ "cuptiProfilerInitialize", (void *)&cuptiProfilerInitialize },
	};

	if (strncmp(name, "cupti", 5) != 0)
		return NULL;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (strcmp(name, t[i].name) == 0)
			return t[i].fn;
	return NULL;
}
