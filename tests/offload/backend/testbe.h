/*
 * testbe.h - the CPU test backend's kernels (kernels.c), called by its ABI
 * table (testbe.c). Device buffers are plain host memory; operands are read
 * and written through the accessors below in any precision, computing in
 * double complex (so one reference implementation serves s, d, c and z).
 */
#ifndef GPO_TESTBE_H
#define GPO_TESTBE_H

#include <complex.h>
#include <stdint.h>

#include "backend.h"

typedef double complex Z;

/* Reference implementation of k; 0, GPO_BE_UNSUPPORTED, or -1 (no memory). */
int tb_kernel(struct gpo_kernel *k);

#endif
