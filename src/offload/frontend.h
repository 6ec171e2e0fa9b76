/*
 * frontend.h - what the generated wrappers (build/offload/gen/wrappers.c,
 * from tools/gen_offload.py) and the frontend's files share.
 *
 * A wrapper's life (each first tries the light path, below): gpo_begin()
 * (depth counter, the real function for this call site) -> if the call is not nested, the wrapper copies its arguments
 * into x.a and calls gpo_run() (size threshold, workspace queries, the
 * policy, the GPU path; a ?copy wrapper then offers the call to the CPU
 * copy engine, gpo_copy_call) -> unless the GPU did the call
 * (GPO_ST_DONE) or the copy engine did (GPO_ST_COPIED), the real
 * function runs between gpo_cpu_before() and gpo_cpu_after() ->
 * gpo_end() (depth, timing, the policy's observation, verify comparison,
 * errno as the caller should see it).
 */
#ifndef GPUOFFLOAD_FRONTEND_H
#define GPUOFFLOAD_FRONTEND_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "count.h"
#include "policy.h"

#define GPO_EXPORT __attribute__((visibility("default")))
#define GPO_HIDDEN __attribute__((visibility("hidden")))

/* Per-call-site cache of the real function (src/offload/resolve.c), and
 * behind it a per-module one: the answer depends only on the module that
 * holds the call site, and a LAPACK calls its BLAS from far more sites
 * than the first cache holds. */
#define GPO_SITES 8
#define GPO_MODS 4
struct gpo_site {
	const void *site;
	void *real;
};
struct gpo_mod {
	uintptr_t lo, hi;       /* the module's address range; lo 0: free */
	void *real;
};

/* One exported wrapper: its name and what it is. */
struct gpo_fn {
	const char *name;       /* the exported (and looked-up) symbol */
	uint16_t op;            /* GPO_OP_* */
	char prec;
	uint8_t cblas;          /* CBLAS interface (arguments by value) */
	uint8_t int64;          /* 64-bit integers (scipy_*_64_ names) */
	struct gpo_site cache[GPO_SITES];
	struct gpo_mod mcache[GPO_MODS];
};

/* The call's arguments, normalised (upper-case options, 64-bit integers,
 * scalars as doubles). */
struct gpo_args {
	char opt[4];
	int layout;             /* CBLAS: 101 row-major, 102 column-major */
	uint8_t query;          /* a workspace query (some lwork == -1) */
	char prec;
	int64_t m, n, k, nrhs;
	int64_t ld[GPO_MAX_BUFS];
	double alpha[2], beta[2];
	void *buf[GPO_MAX_BUFS];
	void *info;             /* int or int64_t, NULL for BLAS */
};

enum gpo_cmp { GPO_CMP_VAL = 1, GPO_CMP_VEC, GPO_CMP_PIV, GPO_CMP_LU };

/* The device operands of a call, from the table (generated describe()). */
struct gpo_shape {
	double flops;
	int nbuf;
	uint8_t gpu_ok;         /* the options are ones the GPU path takes */
	struct {
		const char *name;
		char kind;      /* 'M' matrix, 'R' real array, 'I' integers */
		uint8_t in, out, cmp, has_ld;
		int64_t rows, cols;
	} b[GPO_MAX_BUFS];
};

struct gpo_opdesc {
	const char *name;
	uint8_t level;
	uint8_t measure;        /* measured only, never offloaded */
	uint8_t gpu;            /* has device operands: may be offloaded */
	const char *opts;       /* allowed letters per option, '|' between */
	void (*describe)(const struct gpo_args *a, struct gpo_shape *s);
};
extern const struct gpo_opdesc gpo_opdesc[GPO_OP_MAX] GPO_HIDDEN;

enum gpo_state {
	GPO_ST_NESTED = 1,      /* inside another wrapper: straight through */
	GPO_ST_FILL,            /* the wrapper fills x.a and calls gpo_run */
	GPO_ST_CPU,             /* decided: the CPU library runs it */
	GPO_ST_DONE,            /* the GPU ran it; results are in place */
	GPO_ST_VERIFY,          /* GPU results staged; the CPU runs it too */
	GPO_ST_PASS,            /* secure-execution process, or called from
	                         * the backend's start/stop/memory: straight
	                         * through, not observed */
	GPO_ST_COPIED,          /* the CPU copy engine did a ?copy call */
};

struct gpo_ctx {
	int state;
	int err;                /* errno the caller sees after the call */
	int fail;               /* GPO_R_FAIL_* when the GPU path fell back */
	const void *site;
	double t0, copy_in, copy_out;
	struct gpo_args a;
	struct gpo_shape s;
	struct gpo_call c;
	struct gpo_decision d;
	void *stage[GPO_MAX_BUFS];  /* verify: the GPU's outputs, packed */
	int64_t gpu_info;
};

/*
 * The light path, inlined into every wrapper (tools/gen_offload.py): a
 * call that would do nothing but be counted and run the CPU library, when
 * the gate is open (gpo_fast_on(), count.h: configuration read, policy
 * initialised, no trace, not a secure-execution process, a nonzero
 * threshold) and the thread is not inside the backend (gpo_tls.quiet):
 *   - a nested call (gpo_tls.depth > 0: inside another wrapper, e.g. a CPU
 *     LAPACK's own BLAS calls), of any level, counted GPO_R_NESTED;
 *   - a BLAS level 1/2 call (the GPU never takes those) below the size
 *     threshold, gpo_fast_min (a ?copy also below the copy engine's size:
 *     gpo_fast_copy_min), counted GPO_R_SMALL.
 * The wrapper then takes gpo_fast_real(), counts (gpo_count), raises the
 * depth around the real call and returns what it returned; errno is the
 * real function's. Anything else, or no real function, is the full path
 * (gpo_begin ...), which does the same for these calls and more for the
 * rest.
 */
extern double gpo_fast_min GPO_HIDDEN;
extern double gpo_fast_copy_min GPO_HIDDEN;

/* gpo_resolve with errno kept: the light path's cache miss. */
void *gpo_resolve_light(struct gpo_fn *fn, const void *site) GPO_HIDDEN;

/* The real function for `site`: the site's own cache entry (its first
 * probe) or the first module entry, both lock-free loads (resolve.c fills
 * them: published last, never replaced); else the out-of-line lookup.
 * NULL when no library defines it. errno untouched. */
static inline void *gpo_fast_real(struct gpo_fn *fn, const void *site)
{
	struct gpo_site *e = &fn->cache[((uintptr_t)site >> 2) % GPO_SITES];
	uintptr_t lo;

	if (__atomic_load_n(&e->site, __ATOMIC_ACQUIRE) == site)
		return __atomic_load_n(&e->real, __ATOMIC_RELAXED);
	lo = __atomic_load_n(&fn->mcache[0].lo, __ATOMIC_ACQUIRE);
	/* lo 1: the entry is being filled (resolve.c's CLAIMED) */
	if (lo > 1 && (uintptr_t)site >= lo && (uintptr_t)site < fn->mcache[0].hi)
		return fn->mcache[0].real;
	return gpo_resolve_light(fn, site);
}

void *gpo_begin(struct gpo_fn *fn, struct gpo_ctx *x, const void *site) GPO_HIDDEN;
void gpo_run(struct gpo_fn *fn, struct gpo_ctx *x) GPO_HIDDEN;
void gpo_cpu_before(struct gpo_ctx *x) GPO_HIDDEN;
void gpo_cpu_after(struct gpo_ctx *x) GPO_HIDDEN;
void gpo_end(struct gpo_fn *fn, struct gpo_ctx *x) GPO_HIDDEN;

/* pcopy/call.c: a ?copy call the CPU library would run (state
 * GPO_ST_CPU) done by the CPU copy engine (pcopy/pcopy.h) when it
 * qualifies: returns 1 and sets GPO_ST_COPIED (the CPU library is then
 * not called), else 0 and changes nothing. */
int gpo_copy_call(struct gpo_ctx *x, int64_t n, const void *src, int64_t incx,
		  void *dst, int64_t incy, unsigned esz) GPO_HIDDEN;

/* resolve.c: the function the caller would have called without us, or
 * NULL (after one line on stderr) if no loaded object other than this
 * library defines it. */
void *gpo_resolve(struct gpo_fn *fn, const void *site) GPO_HIDDEN;

/* gpu.c: run x on the GPU; stage_only leaves the results in x->stage
 * (verify). Returns 0, a GPO_R_* reason to fall back for, or -1 when the
 * device computed a nonzero LAPACK info (the CPU library then runs the
 * call, so that its error conventions hold exactly). */
int gpo_gpu_call(struct gpo_fn *fn, struct gpo_ctx *x, int stage_only) GPO_HIDDEN;
void gpo_stage_free(struct gpo_ctx *x) GPO_HIDDEN;
/* front.c: on (1) / off (0) around calls into the backend that the policy
 * makes under its lock: wrappers this thread enters meanwhile pass
 * straight through, unobserved. Nests. */
void gpo_quiet(int on) GPO_HIDDEN;
/* The frontend's one-line-per-kind messages (prefixed "gpu-offload: "). */
#define GPO_MSG_NOFN     0
#define GPO_MSG_BACKEND  1
#define GPO_MSG_FAIL     2
#define GPO_MSG_VERIFY   3
#define GPO_MSG_MORE     4
#define GPO_MSG_FORK     5
#define GPO_MSG_COPY     6
#define GPO_MSG_FAILKIND 8   /* + 0..3: alloc, copy in, kernel, copy out */
void gpo_msg_once(int kind, const char *fmt, ...)
	__attribute__((format(printf, 2, 3))) GPO_HIDDEN;
void gpo_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2))) GPO_HIDDEN;

/* verify.c: compare the staged GPU outputs with the CPU's, report. */
void gpo_verify_compare(struct gpo_fn *fn, struct gpo_ctx *x) GPO_HIDDEN;

/* Element size of operand i. */
size_t gpo_elem_size(const struct gpo_ctx *x, int i) GPO_HIDDEN;
double gpo_now(void) GPO_HIDDEN;
/* config, read at the first call: */
extern int gpo_verify_mode GPO_HIDDEN;

static inline char gpo_upper(char c)
{
	return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
}

/* CBLAS enum values (cblas.h) to the Fortran option letters. */
static inline char gpo_cblas_opt(int v)
{
	switch (v) {
	case 111: return 'N';
	case 112: return 'T';
	case 113: return 'C';
	case 121: return 'U';
	case 122: return 'L';
	case 131: return 'N';
	case 132: return 'U';
	case 141: return 'L';
	case 142: return 'R';
	default: return '?';
	}
}

#endif
