/*
 * fcopy.c - libfcopy.so: a CPU "BLAS" of nothing but ?copy, under every
 * name the offloader wraps (scopy_ .. zcopy_, cblas_?copy, scipy_?copy_,
 * scipy_cblas_?copy, scipy_?copy_64_, scipy_cblas_?copy64_), copying
 * element by element in index order (reference BLAS), and counting its
 * calls (fcopy_calls): a test sees which calls reached the CPU library
 * and which the copy engine took.
 */
#include <stdint.h>
#include <string.h>

__attribute__((visibility("default"))) long fcopy_calls;

static void ref(int64_t n, const char *x, int64_t incx, char *y, int64_t incy,
		size_t esz)
{
	int64_t ix = incx < 0 ? (1 - n) * incx : 0;
	int64_t iy = incy < 0 ? (1 - n) * incy : 0;

	__atomic_fetch_add(&fcopy_calls, 1, __ATOMIC_RELAXED);
	for (int64_t i = 0; i < n; i++, ix += incx, iy += incy)
		memmove(y + iy * (int64_t)esz, x + ix * (int64_t)esz, esz);
}

#define F32(name, esz)                                                      \
	void name(const int *n, const void *x, const int *incx, void *y,    \
		  const int *incy);                                          \
	void name(const int *n, const void *x, const int *incx, void *y,    \
		  const int *incy)                                           \
	{ ref(*n, x, *incx, y, *incy, esz); }
#define F64(name, esz)                                                      \
	void name(const int64_t *n, const void *x, const int64_t *incx,     \
		  void *y, const int64_t *incy);                             \
	void name(const int64_t *n, const void *x, const int64_t *incx,     \
		  void *y, const int64_t *incy)                              \
	{ ref(*n, x, *incx, y, *incy, esz); }
#define C32(name, esz)                                                      \
	void name(int n, const void *x, int incx, void *y, int incy);       \
	void name(int n, const void *x, int incx, void *y, int incy)        \
	{ ref(n, x, incx, y, incy, esz); }
#define C64(name, esz)                                                      \
	void name(int64_t n, const void *x, int64_t incx, void *y,          \
		  int64_t incy);                                             \
	void name(int64_t n, const void *x, int64_t incx, void *y,          \
		  int64_t incy)                                              \
	{ ref(n, x, incx, y, incy, esz); }

#define ALL(p, esz)                                                          \
	F32(p##copy_, esz) F32(scipy_##p##copy_, esz)                        \
	F64(scipy_##p##copy_64_, esz)                                        \
	C32(cblas_##p##copy, esz) C32(scipy_cblas_##p##copy, esz)            \
	C64(scipy_cblas_##p##copy64_, esz)

ALL(s, 4)
ALL(d, 8)
ALL(c, 8)
ALL(z, 16)
