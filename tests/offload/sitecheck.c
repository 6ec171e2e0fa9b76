/*
 * sitecheck - ddot_ called from 24 distinct call sites (more than the
 * frontend's per-wrapper site cache holds), 200 times each, through the
 * preloaded wrapper; prints the sum, so that a wrong function would show.
 * With tests/offload/dlcount.c preloaded first, the test counts how often
 * the frontend had to look the function up: per module, not per call.
 */
#include <stdio.h>

double ddot_(const int *n, const double *x, const int *incx, const double *y,
	     const int *incy);

static double v[4] = { 1, 2, 3, 4 };
static const int n = 4, one = 1;

/* noinline + a distinct body per instance: 24 return addresses. */
#define SITE(i)                                                       \
	static __attribute__((noinline)) double site##i(void)         \
	{                                                             \
		return ddot_(&n, v, &one, v, &one) + (double)(i) * 0.0;  \
	}
SITE(0) SITE(1) SITE(2) SITE(3) SITE(4) SITE(5) SITE(6) SITE(7)
SITE(8) SITE(9) SITE(10) SITE(11) SITE(12) SITE(13) SITE(14) SITE(15)
SITE(16) SITE(17) SITE(18) SITE(19) SITE(20) SITE(21) SITE(22) SITE(23)

int main(void)
{
	static double (*const sites[])(void) = {
		site0, site1, site2, site3, site4, site5, site6, site7,
		site8, site9, site10, site11, site12, site13, site14, site15,
		site16, site17, site18, site19, site20, site21, site22, site23,
	};
	double sum = 0;

	for (int r = 0; r < 200; r++)
		for (unsigned i = 0; i < sizeof sites / sizeof sites[0]; i++)
			sum += sites[i]();
	printf("sum %.1f\n", sum);
	return sum == 200.0 * 24 * 30 ? 0 : 1;
}
