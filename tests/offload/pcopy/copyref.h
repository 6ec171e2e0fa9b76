/*
 * copyref.h - the reference a BLAS ?copy is checked against, for the copy
 * engine's test programs (copycheck.c through the wrappers, pcunit.c the
 * engine alone).
 */
#ifndef GPUOFFLOAD_TEST_COPYREF_H
#define GPUOFFLOAD_TEST_COPYREF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* y := x with BLAS semantics, element by element in index order (memmove:
 * an overlapping copy gives what the CPU library's loop gives). */
static inline void copy_ref(int64_t n, const char *x, int64_t incx, char *y,
			    int64_t incy, size_t esz)
{
	int64_t ix = incx < 0 ? (1 - n) * incx : 0;
	int64_t iy = incy < 0 ? (1 - n) * incy : 0;

	for (int64_t i = 0; i < n; i++, ix += incx, iy += incy)
		memmove(y + iy * (int64_t)esz, x + ix * (int64_t)esz, esz);
}

/* Bytes a vector of n elements of esz bytes, increment inc, spans (one
 * element's worth for n <= 0). */
static inline int64_t copy_span(int64_t n, int64_t inc, size_t esz)
{
	return n <= 0 ? (int64_t)esz : ((n - 1) * llabs(inc) + 1) * (int64_t)esz;
}

#endif
