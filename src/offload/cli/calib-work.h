/*
 * calib-work.h - what the two files of the calibration workload
 * (gpu-offload-calib) share: the operations it measures, one point's
 * state, the precisions' element types, and calling the CPU library
 * (calib-call.c). calib-workload.c runs the points; nothing else includes
 * this header.
 */
#ifndef GPO_CALIB_WORK_H
#define GPO_CALIB_WORK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef void fn_t(void);

enum kind { K_GEMM, K_GEMV, K_GETRF, K_GESV, K_POTRF, K_SYEVD, K_HEEVD,
	    K_GESDD, K_GESVD };

/* An operation and its precisions ("sdcz"). */
struct wop {
	const char *op, *precs;
	enum kind kind;
};

/* One point: an operation at one precision and size, its buffers, and
 * its accepted measurement's calls. */
struct point {
	const struct wop *w;
	char p, name[40];
	int n, reps, singular, slow_hook;
	double cap;
	fn_t *fn;
	void *a, *b, *c, *piv, *w_, *work, *iwork, *rwork;
	void *a0;              /* A as made once a point, copied into a
	                        * before each LAPACK call (which overwrites a) */
	int thorough;          /* every rep, whatever the calls agree on */
	double prep_s;         /* seconds spent making the matrices */
	int64_t lwork, liwork, lrwork;
	/* the accepted measurement's calls */
	int ncall;
	int64_t t0[64], t1[64], info[64];
	double fastest;
};

static inline int isdbl(char p) { return p == 'd' || p == 'z'; }
static inline int iscpx(char p) { return p == 'c' || p == 'z'; }
static inline size_t esize(char p) { return (isdbl(p) ? 8 : 4) * (iscpx(p) ? 2 : 1); }

/* The names of the library calib_load found: calib_prefix, the operation
 * (dgemm), calib_suffix; calib_w64: it takes 64-bit integers. */
extern const char *calib_prefix, *calib_suffix;
extern int calib_w64;

/*
 * dlopen() the CPU libraries of GPO_CALIB_LIBS (default
 * libblas.so.3:liblapack.so.3) RTLD_GLOBAL, and choose the name scheme
 * (scipy_*_64_, scipy_*_, *_) from the first whose dgemm they have.
 * Writes the "library" and "scheme" lines to `log`. 0, or -1 after a line
 * on stderr.
 */
int calib_load(FILE *log);
/* The function of that name, as a program finds it (the preloaded
 * wrapper first); NULL when none. */
fn_t *calib_find(const char *name);
/*
 * One call of the point (query: the workspace query, lwork = -1; then
 * only *qwork, *qiwork and *qrwork are written: work(1), iwork(1),
 * rwork(1) as numbers). Returns LAPACK's info (0 for BLAS).
 */
int64_t calib_call(struct point *pt, int query, double *qwork,
		   int64_t *qiwork, double *qrwork);

#endif
