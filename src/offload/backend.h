/*
 * backend.h - the private, versioned ABI between libgpuoffload.so and a GPU
 * backend (libgpuoffload-cuda.so of part 2; build/libgpuoffload-test.so,
 * the CPU test backend of tests/offload/backend/).
 *
 * The frontend never links a backend: it dlopen()s one at the first call
 * the policy sends to the GPU (src/offload/backend.c), looks up
 * GPO_BACKEND_ENTRY, calls it with the ABI version it was built for, and
 * uses the returned table only if its abi field matches, its size covers
 * at least the ABI 2 table (GPO_BACKEND_SIZE_BASE) and every function of
 * that table is present. Anything else declines: the call runs on the CPU
 * and one line says why, once. Entries added later are optional and
 * size-versioned: the frontend uses one only when the table's size covers
 * it and it is not NULL (GPO_BE_HAS), so an older backend keeps working
 * with a newer frontend and a newer one with an older frontend.
 *
 * The backend model is that of a device with its own memory: the frontend
 * allocates device buffers, copies operands in (2-D copies, so that only
 * the rows of each column are moved), runs one kernel on device buffers,
 * and copies results out (pure outputs straight into the caller's memory,
 * operands that are also inputs into the backend's staging, see
 * GPO_BE_STAGE); only once all of that succeeded does it commit the staged
 * results into the caller's memory. Every function returns 0 on
 * success and nonzero on failure (GPO_BE_UNSUPPORTED: this backend does not
 * take these arguments; anything else: it failed). One call at a time: the
 * frontend serialises all calls into the backend. A backend must not print
 * to stdout, exit, or leave errno changed.
 */
#ifndef GPUOFFLOAD_BACKEND_H
#define GPUOFFLOAD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h" /* GPO_OP_* (generated from tools/offload_ops.py's table) */

/* Bump when anything below changes incompatibly. 2: to_host takes flags
 * (GPO_BE_STAGE), commit and discard. */
#define GPO_BACKEND_ABI 2u
#define GPO_BACKEND_ENTRY "gpo_backend_entry"

#define GPO_BE_UNSUPPORTED 2

/* to_host flag: read the device data into the backend's own host staging
 * and remember the destination, but do not write `host` yet; commit()
 * writes it. Without the flag to_host writes `host` directly and may leave
 * it partly written when it fails: the frontend uses that only for
 * operands that are pure outputs (a CPU rerun overwrites them whole), and
 * stages every operand that is also an input, so that the caller's memory
 * stays as it was unless every device step succeeded. */
#define GPO_BE_STAGE 1u

/*
 * One kernel. The operands (buf[i], in the order of the operation's table
 * entry: e.g. gemm a, b, c; gesv a, ipiv, b; gesvd a, s, u, vt) are device
 * buffers of ld[i] elements per column (NULL when the operation does not
 * reference the operand with these options). Matrices are column-major;
 * CBLAS row-major calls have already been mapped to column-major ones.
 * Integer operands (pivots) have 8-byte elements when int64, else 4, and
 * are 1-based as in LAPACK. Real arrays (eigenvalues, singular values) have
 * the real element type of prec.
 */
struct gpo_kernel {
	uint32_t size;          /* sizeof(struct gpo_kernel) */
	uint16_t op;            /* GPO_OP_* */
	char prec;              /* 's', 'd', 'c', 'z' */
	uint8_t int64;          /* integer operands are 8 bytes */
	char opt[4];            /* character options in argument order, upper case */
	int64_t m, n, k, nrhs;  /* as the operation names them; unused 0 */
	double alpha[2];        /* real, imaginary */
	double beta[2];
	void *buf[4];
	int64_t ld[4];
	int64_t info;           /* out: LAPACK's info (0 on success) */
};

/* One operand of run_host in the caller's memory: rows x cols elements
 * of esize bytes, ld elements per column (host NULL: not referenced). */
struct gpo_hostop {
	void *host;
	int64_t ld, rows, cols;
	uint32_t esize;
	uint8_t in, out;        /* read, written by the operation */
};

/* The steps of a call, for run_host's failures (the frontend's message
 * and reason: allocation, a copy in, the computation, a copy out). */
enum { GPO_BE_STEP_ALLOC, GPO_BE_STEP_COPY_IN, GPO_BE_STEP_KERNEL,
       GPO_BE_STEP_COPY_OUT };

struct gpo_hostcall {
	uint32_t size;                  /* sizeof(struct gpo_hostcall) */
	struct gpo_hostop op[4];        /* in the order of gpo_kernel's buf */
	/* out: */
	int failed;                     /* GPO_BE_STEP_* of a failure */
	double copy_in_s, copy_out_s;   /* host time spent copying in and
	                                 * out (they overlap the kernels) */
};

struct gpo_backend {
	uint32_t abi;           /* GPO_BACKEND_ABI */
	uint32_t size;          /* sizeof(struct gpo_backend) */
	const char *name;       /* for messages */
	/* Create the context and handles; 0 on success. */
	int (*start)(void);
	/* Release everything start() and later calls made. */
	void (*stop)(void);
	int (*memory)(uint64_t *free_bytes, uint64_t *total_bytes);
	int (*alloc)(void **dev, uint64_t bytes);
	void (*release)(void *dev);
	/* Copy `rows` rows of `width` bytes, `spitch` bytes apart in the
	 * source and `dpitch` apart in the destination. */
	int (*to_device)(void *dev, uint64_t dpitch, const void *host,
			 uint64_t spitch, uint64_t width, uint64_t rows);
	int (*to_host)(void *host, uint64_t dpitch, const void *dev,
		       uint64_t spitch, uint64_t width, uint64_t rows,
		       unsigned flags);
	/* Write every result staged by to_host(GPO_BE_STAGE) since the last
	 * commit or discard to its destination, and forget them. Cannot
	 * fail: staging already holds every byte. */
	void (*commit)(void);
	/* Forget the staged results without writing them. */
	void (*discard)(void);
	/* Run one kernel to completion (synchronously). */
	int (*run)(struct gpo_kernel *k);
	/* ---- Optional, size-versioned (GPO_BE_HAS) ---- */
	/* A hint, before the copies in: `rows` rows of `width` bytes,
	 * `pitch` apart, at `host` are a pure output that to_host (flags 0)
	 * will write after run(). The backend may fault those pages in
	 * (in the background, while the device computes) but must return at
	 * once, never change the memory's contents, and finish with it
	 * before any to_host without GPO_BE_STAGE, commit or discard
	 * returns; it cannot fail. The frontend calls it for each pure
	 * output of a call that copies results into the caller's memory
	 * (not in verify mode). */
	void (*prefault)(void *host, uint64_t pitch, uint64_t width,
			 uint64_t rows);
	/* The whole call from host operands (allocate, copy in, compute,
	 * copy out), for operations the backend can pipeline (the CUDA
	 * backend: large gemm, gesv and posv, their copies overlapping
	 * their kernels). k is as
	 * for run() but its buf[] are unset (NULL); h describes each
	 * operand in the caller's memory. The invariant of the frontend's
	 * own flow holds: pure outputs (out && !in) may be written straight
	 * into the caller's memory, at its ld, never the padding beyond
	 * the rows; every operand that is also an input is read into the
	 * backend's staging (as to_host with GPO_BE_STAGE) and reaches the
	 * caller's memory only when the frontend calls commit() after this
	 * returned 0. Returns 0; GPO_BE_UNSUPPORTED having done nothing at
	 * all (the frontend then runs its own flow: alloc, to_device, run,
	 * to_host); anything else: it failed in step h->failed
	 * (GPO_BE_STEP_*), every device operation of the call has ended,
	 * and the frontend calls discard() and runs the call on the CPU.
	 * Never called in verify mode. */
	int (*run_host)(struct gpo_kernel *k, struct gpo_hostcall *h);
};

/* The size of the ABI 2 table without the optional entries: the least a
 * backend's table may be. */
#define GPO_BACKEND_SIZE_BASE offsetof(struct gpo_backend, prefault)

/* Whether table be has the optional entry f. */
#define GPO_BE_HAS(be, f) \
	((be)->size >= offsetof(struct gpo_backend, f) + sizeof((be)->f) && \
	 (be)->f != NULL)

/* The one symbol a backend exports: its table for ABI `abi`, or NULL if
 * it does not implement that version. */
typedef const struct gpo_backend *(*gpo_backend_entry_fn)(uint32_t abi);

#endif
