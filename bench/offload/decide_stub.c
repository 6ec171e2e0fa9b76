/*
 * decide_stub.c - a CPU "library" whose dgemm_ returns at once, for
 * decide_cost: what is left of a call's time is the offloader's own.
 */
void dgemm_(const char *ta, const char *tb, const int *m, const int *n,
	    const int *k, const double *alpha, const double *a, const int *lda,
	    const double *b, const int *ldb, const double *beta, double *c,
	    const int *ldc);

void dgemm_(const char *ta, const char *tb, const int *m, const int *n,
	    const int *k, const double *alpha, const double *a, const int *lda,
	    const double *b, const int *ldb, const double *beta, double *c,
	    const int *ldc)
{
	(void)ta; (void)tb; (void)m; (void)n; (void)k; (void)alpha; (void)a;
	(void)lda; (void)b; (void)ldb; (void)beta; (void)c; (void)ldc;
}
