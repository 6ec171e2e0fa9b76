/*
 * fakesolver.h - what the stand-in cuBLAS/cuSOLVER's two files share
 * (fakesolver.c: the handles, gemm, syevd; fakelin.c: the factorisations
 * and solves), and the fake driver's functions they call (fakedev.c).
 */
#ifndef FAKESOLVER_H
#define FAKESOLVER_H

#include <complex.h>
#include <stdint.h>

#define API __attribute__((visibility("default")))

void fakedev_count(const char *name);
void fakedev_flush(void *stream);
int fakedev_defer(void *stream, const char *name, int (*fn)(void *),
		  void *arg);

#define CNT() fakedev_count(__func__)

/* A cuBLAS or cuSOLVER handle: its stream. */
struct fh {
	void *stream;
};

/* Element idx of an array of precision p ('s' 'd' 'c' 'z'), widened to
 * double complex; and stored back. */
double complex fs_ld(char p, const char *base, int64_t idx);
void fs_st(char p, char *base, int64_t idx, double complex v);

#endif
