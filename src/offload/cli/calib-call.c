/*
 * calib-call.c - the calibration workload's calls into the CPU library,
 * made as a program makes them (calib-work.h): loading the libraries,
 * their name scheme and integer width (the reference BLAS, numpy's
 * bundled OpenBLAS with its scipy_*_64_ names), and one call of each
 * measured operation with its Fortran argument list. Apart from the
 * workload's loop (calib-workload.c) because it is the one part that
 * knows the libraries' ABI: the argument lists, the hidden string
 * lengths, the integer width.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib-work.h"

/* ---- Integers of the library's width ------------------------------------ */

int calib_w64;

/* A Fortran integer argument: `n` in the library's width. */
struct fint { int32_t i32; int64_t i64; };
static void *fi(struct fint *v, int64_t n)
{
	v->i32 = (int32_t)n;
	v->i64 = n;
	return calib_w64 ? (void *)&v->i64 : (void *)&v->i32;
}
/* A struct fint already set, as the argument. */
#define FI(v) (calib_w64 ? (void *)&(v).i64 : (void *)&(v).i32)
static int64_t fget(const struct fint *v)
{
	return calib_w64 ? v->i64 : v->i32;
}
/* An integer array element (ipiv, iwork) read back. */
static int64_t aget(const void *p, size_t i)
{
	return calib_w64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
}

/* ---- The library -------------------------------------------------------- */

const char *calib_prefix = "", *calib_suffix = "_";

fn_t *calib_find(const char *name)
{
	/* RTLD_DEFAULT: the preloaded libgpuoffload.so's wrapper first,
	 * which then finds the library loaded below (its global scope). */
	return (fn_t *)dlsym(RTLD_DEFAULT, name);
}

int calib_load(FILE *log)
{
	const char *libs = getenv("GPO_CALIB_LIBS");
	char buf[4096], *save = NULL;
	static const struct { const char *pre, *suf; int i64; } schemes[] = {
		{ "scipy_", "_64_", 1 }, { "scipy_", "_", 0 }, { "", "_", 0 },
	};
	int found = -1;

	snprintf(buf, sizeof buf, "%s", libs && *libs ? libs :
		 "libblas.so.3:liblapack.so.3");
	for (char *t = strtok_r(buf, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
		void *h = dlopen(t, RTLD_NOW | RTLD_GLOBAL);
		if (!h) {
			fprintf(stderr, "gpu-offload-calib: %s\n", dlerror());
			return -1;
		}
		fprintf(log, "library %s\n", t);
		/* The scheme: the first of ours whose dgemm the library has
		 * (numpy's bundled OpenBLAS has only the 64-bit scipy_ names). */
		for (int s = 0; s < 3 && found < 0; s++) {
			char name[64];
			snprintf(name, sizeof name, "%sdgemm%s", schemes[s].pre,
				 schemes[s].suf);
			if (dlsym(h, name))
				found = s;
		}
	}
	if (found < 0) {
		fprintf(stderr, "gpu-offload-calib: the CPU libraries have no dgemm under a name gpu-offload intercepts (dgemm_, scipy_dgemm_, scipy_dgemm_64_)\n");
		return -1;
	}
	calib_prefix = schemes[found].pre;
	calib_suffix = schemes[found].suf;
	calib_w64 = schemes[found].i64;
	fprintf(log, "scheme %s %s %d\n", *calib_prefix ? calib_prefix : "-", calib_suffix, calib_w64);
	return 0;
}

/* ---- One call ----------------------------------------------------------- */

typedef void gemm_t(const char *, const char *, void *, void *, void *,
		    const void *, void *, void *, void *, void *, const void *,
		    void *, void *, size_t, size_t);
typedef void gemv_t(const char *, void *, void *, const void *, void *,
		    void *, void *, void *, const void *, void *, void *,
		    size_t);
typedef void getrf_t(void *, void *, void *, void *, void *, void *);
typedef void gesv_t(void *, void *, void *, void *, void *, void *, void *,
		    void *);
typedef void potrf_t(const char *, void *, void *, void *, void *, size_t);
typedef void syevd_t(const char *, const char *, void *, void *, void *,
		     void *, void *, void *, void *, void *, void *, size_t,
		     size_t);
typedef void heevd_t(const char *, const char *, void *, void *, void *,
		     void *, void *, void *, void *, void *, void *, void *,
		     void *, size_t, size_t);
typedef void gesdd_r_t(const char *, void *, void *, void *, void *, void *,
		       void *, void *, void *, void *, void *, void *, void *,
		       void *, size_t);
typedef void gesdd_c_t(const char *, void *, void *, void *, void *, void *,
		       void *, void *, void *, void *, void *, void *, void *,
		       void *, void *, size_t);
typedef void gesvd_r_t(const char *, const char *, void *, void *, void *,
		       void *, void *, void *, void *, void *, void *, void *,
		       void *, void *, size_t, size_t);

/* One call: calib-work.h. lwork = -1 makes it the workspace query. */
int64_t calib_call(struct point *pt, int query, double *qwork,
		   int64_t *qiwork, double *qrwork)
{
	struct fint n, n2, n3, ld, lw, liw, lrw, info;
	static const double one[2] = { 1, 0 }, zero[2] = { 0, 0 };
	static const float onef[2] = { 1, 0 }, zerof[2] = { 0, 0 };
	int dbl = isdbl(pt->p);
	const void *al = dbl ? (const void *)one : (const void *)onef;
	const void *be = dbl ? (const void *)zero : (const void *)zerof;
	/* work(1) of a query: a real (or the real part) of the precision */
	double qw[2] = { 0, 0 }, qr[2] = { 0, 0 };
	int64_t qi[2] = { 0, 0 };
	void *work = query ? (void *)qw : pt->work;
	void *iwork = query ? (void *)qi : pt->iwork;
	void *rwork = query ? (void *)qr : pt->rwork;

	fi(&info, 0);
	fi(&n, pt->n);
	fi(&n2, pt->n);
	fi(&n3, pt->n);
	fi(&ld, pt->n);
	fi(&lw, query ? -1 : pt->lwork);
	fi(&liw, query ? -1 : pt->liwork);
	fi(&lrw, query ? -1 : pt->lrwork);
	switch (pt->w->kind) {
	case K_GEMM:
		((gemm_t *)pt->fn)("N", "N", fi(&n, pt->n), fi(&n2, pt->n),
				   fi(&n3, pt->n), al, pt->a, fi(&ld, pt->n),
				   pt->b, FI(ld), be, pt->c, FI(ld), 1, 1);
		return 0;
	case K_GEMV:            /* y = A x: x is b's first column, y c's */
		((gemv_t *)pt->fn)("N", fi(&n, pt->n), fi(&n2, pt->n), al, pt->a,
				   fi(&ld, pt->n), pt->b, fi(&n3, 1), be, pt->c,
				   FI(n3), 1);
		return 0;
	case K_GETRF:
		((getrf_t *)pt->fn)(fi(&n, pt->n), fi(&n2, pt->n), pt->a,
				    fi(&ld, pt->n), pt->piv, fi(&info, 0));
		break;
	case K_GESV:
		((gesv_t *)pt->fn)(fi(&n, pt->n), fi(&n2, pt->n), pt->a,
				   fi(&ld, pt->n), pt->piv, pt->b, FI(ld),
				   fi(&info, 0));
		break;
	case K_POTRF:
		((potrf_t *)pt->fn)("L", fi(&n, pt->n), pt->a, fi(&ld, pt->n),
				    fi(&info, 0), 1);
		break;
	case K_SYEVD:
		((syevd_t *)pt->fn)("V", "L", fi(&n, pt->n), pt->a,
				    fi(&ld, pt->n), pt->w_, work,
				    FI(lw),
				    iwork, FI(liw),
				    fi(&info, 0), 1, 1);
		break;
	case K_HEEVD:
		((heevd_t *)pt->fn)("V", "L", fi(&n, pt->n), pt->a,
				    fi(&ld, pt->n), pt->w_, work,
				    FI(lw),
				    rwork, FI(lrw),
				    iwork, FI(liw),
				    fi(&info, 0), 1, 1);
		break;
	case K_GESDD:
		if (iscpx(pt->p))
			((gesdd_c_t *)pt->fn)("A", fi(&n, pt->n), fi(&n2, pt->n),
					      pt->a, fi(&ld, pt->n), pt->w_,
					      pt->b, FI(ld), pt->c, FI(ld), work,
					      FI(lw),
					      pt->rwork, pt->iwork, fi(&info, 0), 1);
		else
			((gesdd_r_t *)pt->fn)("A", fi(&n, pt->n), fi(&n2, pt->n),
					      pt->a, fi(&ld, pt->n), pt->w_,
					      pt->b, FI(ld), pt->c, FI(ld), work,
					      FI(lw),
					      pt->iwork, fi(&info, 0), 1);
		break;
	case K_GESVD:
		((gesvd_r_t *)pt->fn)("A", "A", fi(&n, pt->n), fi(&n2, pt->n),
				      pt->a, fi(&ld, pt->n), pt->w_, pt->b, FI(ld),
				      pt->c, FI(ld), work,
				      FI(lw),
				      fi(&info, 0), 1, 1);
		break;
	}
	if (query) {
		*qwork = qw[0];
		*qiwork = aget(qi, 0);
		*qrwork = qr[0];
		if (!isdbl(pt->p)) {
			/* single precision: work(1) and rwork(1) are floats */
			float f;
			memcpy(&f, qw, sizeof f);
			*qwork = f;
			memcpy(&f, qr, sizeof f);
			*qrwork = f;
		}
	}
	return fget(&info);
}
