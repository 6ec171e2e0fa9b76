/*
 * pipeval.h - what the pipelines' test programs (gemmpipe.c, solvepipe.c)
 * share: the precision of the run (P: s d c z, set from the command line,
 * with its element size ES and CPLX), the padding's sentinel byte, and an
 * element of a matrix read or written in that precision (as a double
 * complex, which holds every value of the four exactly). Included once
 * by each program, so its definitions are the program's own.
 */
#ifndef GPUOFFLOAD_TESTS_PIPEVAL_H
#define GPUOFFLOAD_TESTS_PIPEVAL_H

#include <complex.h>
#include <stdint.h>

static char P;
static size_t ES;
static int CPLX;
static const unsigned char SENT = 0xa5;

static double complex ld(const char *m, int64_t i)
{
	switch (P) {
	case 's': return ((const float *)(const void *)m)[i];
	case 'd': return ((const double *)(const void *)m)[i];
	case 'c': return ((const float complex *)(const void *)m)[i];
	default: return ((const double complex *)(const void *)m)[i];
	}
}

static void st(char *m, int64_t i, double complex v)
{
	switch (P) {
	case 's': ((float *)(void *)m)[i] = (float)creal(v); break;
	case 'd': ((double *)(void *)m)[i] = creal(v); break;
	case 'c': ((float complex *)(void *)m)[i] = (float complex)v; break;
	default: ((double complex *)(void *)m)[i] = v; break;
	}
}

#endif
