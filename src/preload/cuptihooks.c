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

/* The real functions, by hook (the order below): the one a dlsym of its
 * name answered last (what the program asked that handle for), or the
 * global scope's, found once (a CUPTI is not unloaded while the program
 * that uses it runs). Otherwise looked up for each call, from its caller
 * (a profiler starts with a handful of these calls). */
enum { H_SUB, H_REG, H_EN, H_DUMP, H_CTX, H_PROF, H_N };
static void *found[H_N];
static const char *const names[H_N] = {
	"cuptiSubscribe", "cuptiActivityRegisterCallbacks",
	"cuptiActivityEnable", "cuptiActivityEnableAndDump",
	"cuptiActivityEnableContext", "cuptiProfilerInitialize",
};

/* The real function after stepping aside; errno as the caller left it. */
static void *real(int i, const void *caller)
{
	int saved = errno, global = 0;
	void *p;

	gmp_gt_step_aside(names[i]);
	p = __atomic_load_n(&found[i], __ATOMIC_ACQUIRE);
	if (!p) {
		p = gmp_gt_real(names[i], caller, &global);
		if (p && global)
			__atomic_store_n(&found[i], p, __ATOMIC_RELEASE);
	}
	errno = saved;
	return p;
}

#define CALLER __builtin_return_address(0)

GMP_EXPORT gmp_cupti_result cuptiSubscribe(void **s, void *cb, void *u)
{
	sub_fn f = (sub_fn)real(H_SUB, CALLER);

	return f ? f(s, cb, u) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityRegisterCallbacks(void *a, void *b)
{
	reg_fn f = (reg_fn)real(H_REG, CALLER);

	return f ? f(a, b) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityEnable(int kind)
{
	kind_fn f = (kind_fn)real(H_EN, CALLER);

	return f ? f(kind) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityEnableAndDump(int kind)
{
	kind_fn f = (kind_fn)real(H_DUMP, CALLER);

	return f ? f(kind) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityEnableContext(void *ctx, int kind)
{
	ctx_fn f = (ctx_fn)real(H_CTX, CALLER);

	return f ? f(ctx, kind) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiProfilerInitialize(void *params)
{
	init_fn f = (init_fn)real(H_PROF, CALLER);

	return f ? f(params) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

void *gmp_cupti_hook(const char *name, void *answer)
{
	static void *const hooks[H_N] = {
		(void *)&cuptiSubscribe, (void *)&cuptiActivityRegisterCallbacks,
		(void *)&cuptiActivityEnable, (void *)&cuptiActivityEnableAndDump,
		(void *)&cuptiActivityEnableContext,
		(void *)&cuptiProfilerInitialize,
	};

	if (strncmp(name, "cupti", 5) != 0)
		return NULL;
	for (int i = 0; i < H_N; i++)
		if (strcmp(name, names[i]) == 0) {
			if (answer)
				__atomic_store_n(&found[i], answer,
						 __ATOMIC_RELEASE);
			return hooks[i];
		}
	return NULL;
}
