/*
 * trace.h - the trace file of `gpu-offload run --trace DIR`: the one
 * definition of its layout (docs/offload.md, "Traces"). Read by
 * `gpu-offload report` (src/offload/cli/report.c) and written by
 * trace.c; both include this header, nothing else describes it.
 *
 * One file per process, DIR/gpo-<pid>.trace: a 64-byte header, then one
 * fixed-size record (GPO_TRACE_REC_SIZE bytes) per call or event, in the
 * byte order of the machine that wrote it (the header says which).
 */
#ifndef GPUOFFLOAD_TRACE_H
#define GPUOFFLOAD_TRACE_H

#include <stdint.h>

#define GPO_TRACE_MAGIC "GPOTRACE"
#define GPO_TRACE_VERSION 1
#define GPO_TRACE_REC_SIZE 320
#define GPO_TRACE_ENDIAN 0x01020304u

struct gpo_trace_header {
	char magic[8];           /* GPO_TRACE_MAGIC, no NUL */
	uint32_t version;        /* GPO_TRACE_VERSION */
	uint32_t rec_size;       /* GPO_TRACE_REC_SIZE */
	uint32_t endian;         /* GPO_TRACE_ENDIAN as written */
	int32_t pid;
	int64_t start_ns;        /* CLOCK_REALTIME at the first record */
	uint32_t level;          /* GPU_OFFLOAD_LEVEL in force */
	uint8_t pad[28];
};

enum gpo_trace_kind {
	GPO_TK_CALL = 0,         /* an intercepted call */
	GPO_TK_GPU_START = 1,    /* the GPU was started: dur = start-up cost */
	GPO_TK_GPU_STOP = 2,     /* the GPU was given back (a waiter) */
	GPO_TK_LEASE_REFUSED = 3,/* a lease without waiting was refused */
	GPO_TK_GPU_KEPT = 4      /* after a start: the lease cannot be given
	                          * back (libgpumutex joined it, or it is our
	                          * job's, held by another process too) */
};

struct gpo_trace_buf {
	uint64_t ptr;            /* the caller's address */
	uint64_t bytes;          /* what a device copy moves */
	uint64_t fp_before;      /* fingerprint before the call (0: unknown) */
	uint64_t fp_after;       /* fingerprint after the call (0: unknown) */
	uint8_t in, out;         /* copied to the device / back */
	uint8_t resident;        /* an input the GPU already held: not
	                          * copied in (residency; 0 in older traces) */
	uint8_t pad[5];
};

struct gpo_trace_rec {
	int64_t t_ns;            /* CLOCK_REALTIME when the call started */
	int64_t dur_ns;          /* the whole call, wrapper included */
	uint8_t kind;            /* enum gpo_trace_kind */
	uint8_t device;          /* enum gpo_device it ran on */
	uint8_t decided;         /* enum gpo_device the policy chose */
	char prec;               /* s d c z */
	uint8_t blas_level;      /* 1..3 BLAS, 4 LAPACK */
	uint8_t iface;           /* 0 Fortran, 1 CBLAS, 2 LAPACKE */
	uint8_t int64;           /* 64-bit integers */
	uint8_t nbuf;
	uint16_t op;             /* the frontend's op id (this build's) */
	uint16_t reason;         /* enum gpo_reason (policy.h: stable) */
	uint16_t fail;           /* GPO_R_FAIL_* after a GPU failure, or 0 */
	uint16_t pad0;
	uint32_t tid;
	uint32_t pad2;
	char opname[16];         /* "gemm": the report needs no op table */
	int64_t dims[4];
	double flops, bytes_in, bytes_out;
	double t_cpu, t_gpu;     /* predictions, seconds (0: none) */
	double copy_in_s, copy_out_s;
	uint64_t site;           /* the caller's return address */
	struct gpo_trace_buf buf[4];
	uint8_t pad1[8];
};

_Static_assert(sizeof(struct gpo_trace_header) == 64, "trace header size");
_Static_assert(sizeof(struct gpo_trace_rec) == GPO_TRACE_REC_SIZE,
	       "trace record size");

/* Names of enum gpo_reason (policy.h) for reports and the summary. */
static inline const char *gpo_reason_name(unsigned r)
{
	static const char *const names[] = {
		"?", "small", "nested", "workspace", "model-cpu", "model-gpu",
		"ski-rental", "probe", "no-lease", "gpu-busy", "no-memory",
		"no-backend", "forked", "forced-cpu", "forced-gpu",
		"unsupported", "fail-alloc", "fail-copy", "fail-kernel",
		"verify", "measured", "copy-engine", "paused", "no-profile",
		"no-driver",
	};
	return r < sizeof names / sizeof names[0] ? names[r] : "?";
}

#endif
