/*
 * frontend.h - what the generated wrappers (build/offload/gen/wrappers.c,
 * from tools/gen_offload.py) and the frontend's files share.
 *
 * A wrapper's life (each first tries the light path, below): gpo_begin()
 * (depth counter, the real function for this call site; paused: the CPU
 * library's call alone) -> if the call is neither nested nor paused, the
 * wrapper copies its arguments
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
	GPO_ST_PAUSED,          /* paused (pause.c): straight through,
	                         * counted GPO_R_PAUSED */
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
 * the gate is open (gpo_fast_gate() == 0, count.h: configuration read, policy
 * initialised, no trace, not a secure-execution process, a nonzero
 * threshold), the thread is not inside the backend (gpo_tls.quiet), no
 * fold of its counts is due (gpo_tls.left) and the call site's real
 * function is cached (gpo_fast_cached):
 *   - a nested call (gpo_tls.depth > 0: inside another wrapper, e.g. a CPU
 *     LAPACK's own BLAS calls), of any operation, counted GPO_R_NESTED; a
 *     tail call of the real function (its own calls are nested anyway);
 *   - else a workspace query (lwork -1), counted GPO_R_WORKSPACE, or a
 *     call below the size threshold gpo_fast_min, counted GPO_R_SMALL:
 *     the full path's flops (describe_<op>) for BLAS level 3 and LAPACK
 *     (not a row-major CBLAS call of a side-dependent op, which gpo_run
 *     maps first); for level 1/2 the table's flops as this path always
 *     had them, and a ?copy also below the copy engine's size
 *     (gpo_fast_copy_min). The depth is raised around the real call.
 * While paused (gpu_offload_pause, pause.c: the gate's GPO_FAST_PAUSED,
 * the other bits clear), a nested call takes the nested path above, and
 * any other call, whatever its size, is counted GPO_R_PAUSED and runs
 * the CPU library with the depth raised (so that a resume meanwhile
 * leaves its own calls nested: it finishes as it began).
 * errno is the real function's. Anything else is the full path (gpo_begin
 * ...), which counts these calls the same way and does more for the rest.
 */
extern double gpo_fast_min GPO_HIDDEN;
extern double gpo_fast_copy_min GPO_HIDDEN;

/* The real function for `site` if fn's caches have it: the site's own
 * entry (its first probe) or its module's, all lock-free loads
 * (resolve.c fills them: published last, never replaced; a module entry's
 * lo is 1 while it is being filled); else NULL (the full path resolves
 * it). */
static inline void *gpo_fast_cached(struct gpo_fn *fn, const void *site)
{
	struct gpo_site *e = &fn->cache[((uintptr_t)site >> 2) % GPO_SITES];
	uintptr_t p = (uintptr_t)site;

	if (__atomic_load_n(&e->site, __ATOMIC_ACQUIRE) == site)
		return __atomic_load_n(&e->real, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < GPO_MODS; i++) {
		uintptr_t lo = __atomic_load_n(&fn->mcache[i].lo, __ATOMIC_ACQUIRE);
		if (!lo)
			break;
		if (lo > 1 && p >= lo && p < fn->mcache[i].hi)
			return fn->mcache[i].real;
	}
	return NULL;
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
/* gpu.c: the bytes of x's inputs whose device copies are kept (the model
 * leaves them out of its copies in), and, level2, whether the table knows
 * its matrix (resid.h, gpo_res_decide; a sighting when not). 0 and no
 * bytes when residency is off, or another thread's GPU call is running. */
int gpo_gpu_resident(struct gpo_ctx *x, int level2, double *bytes) GPO_HIDDEN;
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
