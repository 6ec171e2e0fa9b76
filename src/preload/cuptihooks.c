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
 * in the libcupti loaded in the process (gtload.c), also one loaded with
 * RTLD_LOCAL (as a Python extension's dependencies are), which the PLT
 * bound to us because this library comes first in the global scope. The
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

/* The real function after stepping aside; errno as the caller left it. */
static void *real(const char *name)
{
	int saved = errno;
	void *p;

	gmp_gt_step_aside(name);
	p = gmp_gt_real(name);
	errno = saved;
	return p;
}

GMP_EXPORT gmp_cupti_result cuptiSubscribe(void **s, void *cb, void *u)
{
	sub_fn f = (sub_fn)real("cuptiSubscribe");

	return f ? f(s, cb, u) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityRegisterCallbacks(void *a, void *b)
{
	reg_fn f = (reg_fn)real("cuptiActivityRegisterCallbacks");

	return f ? f(a, b) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityEnable(int kind)
{
	kind_fn f = (kind_fn)real("cuptiActivityEnable");

	return f ? f(kind) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityEnableAndDump(int kind)
{
	kind_fn f = (kind_fn)real("cuptiActivityEnableAndDump");

	return f ? f(kind) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiActivityEnableContext(void *ctx, int kind)
{
	ctx_fn f = (ctx_fn)real("cuptiActivityEnableContext");

	return f ? f(ctx, kind) : GMP_CUPTI_ERROR_NOT_INITIALIZED;
}

GMP_EXPORT gmp_cupti_result cuptiProfilerInitialize(void *params)
{
	init_fn f = (init_fn)real("cuptiProfilerInitialize");

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
