/*
 * opcheck.h - what opcheck.c (the framework, BLAS level 3, main) and
 * opcheck_lapack.c (the LAPACK cases) share.
 */
#ifndef OPCHECK_H
#define OPCHECK_H

#include <complex.h>
#include <stddef.h>
#include <stdint.h>

typedef double complex Z;
typedef void (*fn_t)();

struct buf {
	void *p;
	int rows, cols, ld;     /* as stored (column-major view) */
	char kind;              /* 'M' matrix of P, 'R' real of P, 'I' int */
};

extern char P;                  /* precision of the case */
extern int M_, N_, K_;
int cplx(void);
size_t esz(void);
size_t rsz(void);
Z bget(const struct buf *b, int i, int j);
void bset(struct buf *b, int i, int j, Z v);
struct buf mk(int rows, int cols, char kind);
void herm(struct buf *b, int spd);
void dominant(struct buf *b);
void check(const char *cs, const struct buf *b, const struct buf *orig, char tri);
struct buf dup(const struct buf *b);
void out(const char *cs, const char *name, const struct buf *b, int cmp, int nvec);
fn_t sym(const char *fmt);
int want(const char *cs);

void t_getrf(void);
void t_getrs(char tr);
void t_gesv(int singular);
void t_potrf(char uplo, int notpd);
void t_posv(char uplo, int solve_only);
void t_eig(int dc, char jobz, char uplo);
void t_svd(int dd, char ju, char jv, int m, int n);
void t_geqrf(void);
void t_gels(void);

#endif
