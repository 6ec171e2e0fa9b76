/*
 * policy.h - the boundary between the offload frontend (the generated
 * BLAS/LAPACK wrappers, symbol resolution, the backend boundary, verify
 * mode: src/offload/ files other than those listed below) and the policy
 * (machine profile, cost model, levels, ski-rental start, learning, CPU
 * probes, gpumutex leases, traces, the exit summary: policy.c, observe.c,
 * pstate.c, count.c, model.c, profile.c, trace.c, olease.c, onvml.c).
 *
 * Prefixes: gpo_ is the module's internal API (hidden visibility, nothing
 * here is exported from libgpuoffload.so); gpo__ is private to one file.
 *
 * Threading: the frontend serialises GPU work (one GPU call at a time per
 * process), but gpo_policy_decide and gpo_policy_observe may be called from
 * several threads at once; the policy protects its own state.
 * Nothing here may print to stdout, exit, or change errno as seen by the
 * caller of the wrapper (the frontend saves and restores errno around the
 * whole wrapper).
 */
#ifndef GPUOFFLOAD_POLICY_H
#define GPUOFFLOAD_POLICY_H

#include <stdint.h>

/* What the frontend knows of one intercepted call, for the decision, the
 * trace and learning. Filled by the generated wrapper before the call. */
#define GPO_MAX_BUFS 4
struct gpo_buf {
	const void *ptr;       /* operand as the caller passed it */
	uint64_t bytes;        /* bytes the device copy of it would move */
	uint8_t in;            /* 1: copied to the device */
	uint8_t out;           /* 1: copied back (an output) */
	uint8_t resident;      /* 1: an input the GPU already held (gpu.c,
	                        * resid.h): not copied in */
};

struct gpo_call {
	uint16_t op;           /* operation id from the generated table
	                        * (gpo_op_name(op) names it, e.g. "gemm") */
	char prec;             /* 's', 'd', 'c' or 'z' */
	uint8_t level;         /* 1, 2, 3: BLAS level; 4: LAPACK */
	uint8_t int64;         /* 1: the caller used 64-bit integers */
	uint8_t iface;         /* 0 Fortran, 1 CBLAS, 2 LAPACKE (if any) */
	int64_t dims[4];       /* m, n, k, nrhs as the op defines; unused 0 */
	double flops;          /* estimated work */
	double bytes_in;       /* host-to-device bytes if offloaded */
	double bytes_out;      /* device-to-host bytes if offloaded */
	const void *site;      /* the caller's return address */
	int nbuf;
	struct gpo_buf buf[GPO_MAX_BUFS];
};

enum gpo_device { GPO_CPU = 0, GPO_GPU = 1 };

/* Why a call ran where it ran (trace, report, summary). Stable numbers:
 * they are stored in traces. */
enum gpo_reason {
	GPO_R_SMALL = 1,        /* below the size threshold: no decision */
	GPO_R_NESTED,           /* inside another intercepted call */
	GPO_R_WORKSPACE,        /* LAPACK workspace query (lwork = -1) */
	GPO_R_MODEL_CPU,        /* the model says the CPU is fast enough */
	GPO_R_MODEL_GPU,        /* the model says the GPU pays */
	GPO_R_SKI_RENTAL,       /* would pay, but start-up not yet justified */
	GPO_R_PROBE,            /* CPU probe (learning) */
	GPO_R_NO_LEASE,         /* another gpumutex job holds or waits */
	GPO_R_GPU_BUSY,         /* other programs load the GPU (NVML) */
	GPO_R_NO_MEMORY,        /* not enough free device memory */
	GPO_R_NO_BACKEND,       /* backend missing, mismatched or failed */
	GPO_R_FORKED,           /* a child of a process that started the GPU */
	GPO_R_FORCED_CPU,       /* forced by the configuration */
	GPO_R_FORCED_GPU,       /* forced by the configuration */
	GPO_R_UNSUPPORTED,      /* arguments the GPU path does not take */
	GPO_R_FAIL_ALLOC,       /* the backend failed: allocation */
	GPO_R_FAIL_COPY,        /* the backend failed: a copy */
	GPO_R_FAIL_KERNEL,      /* the backend failed: the computation */
	GPO_R_VERIFY,           /* verify mode: ran on both */
	GPO_R_MEASURED,         /* measured only (level 1): never offloaded */
	GPO_R_COPY_ENGINE,      /* a strided ?copy done by the CPU copy engine */
	GPO_R_PAUSED,           /* the offloader was paused (gpu_offload_pause) */
	GPO_R_NO_PROFILE,       /* no machine profile: nothing to decide by */
	GPO_R_NO_DRIVER,        /* the backend found no CUDA driver */
	GPO_R_MAX
};

struct gpo_decision {
	uint8_t device;        /* enum gpo_device */
	uint16_t reason;       /* enum gpo_reason */
	double t_cpu;          /* predicted seconds, CPU (0 when unknown) */
	double t_gpu;          /* predicted seconds, GPU incl. copies */
};

/*
 * Decide where `c` runs. Called by the wrapper for every call that is
 * neither nested, nor a workspace query, nor below the size threshold
 * (the frontend decides those without the policy, with the reasons above,
 * and still reports them through gpo_policy_observe). Never waits: when the
 * GPU is not started and the ski-rental rule says it now pays, it takes a
 * gpumutex lease without waiting and calls gpo_gpu_start(); any failure
 * there gives GPO_CPU with the reason. Fills `d` and returns d->device.
 */
int gpo_policy_decide(const struct gpo_call *c, struct gpo_decision *d);

/*
 * After the call: it ran on `device` (which differs from d->device when the
 * GPU path failed and the CPU ran it; `fail` is then the GPO_R_FAIL_* or
 * GPO_R_NO_BACKEND reason, else 0), taking `seconds` in all, of which
 * `copy_in_s` and `copy_out_s` were copies. Feeds learning, the trace
 * and the summary.
 */
void gpo_policy_observe(const struct gpo_call *c,
			const struct gpo_decision *d, int device,
			double seconds, double copy_in_s, double copy_out_s,
			int fail);

/* Nonzero when calls are traced (GPU_OFFLOAD_TRACE): the frontend then
 * fills the whole record of a call below the size threshold too. Cheap:
 * read on every call. */
int gpo_policy_tracing(void);

/* Count a call the frontend kept on the CPU without asking the policy
 * (GPO_R_SMALL or GPO_R_NESTED) in the summary's counts, as
 * gpo_policy_observe does for such a call: in the calling thread's own
 * counters (count.h), no lock, no atomic operation. Only once the policy
 * is initialised (gpo_policy_tracing() returned 0). */
void gpo_policy_count(unsigned reason);

/* Provided by the frontend's backend boundary, called by the policy. */

/* Load the GPU backend (dlopen, ABI check) if not yet loaded and start it
 * (context, handles). Returns 0, or a GPO_R_* reason (GPO_R_NO_BACKEND,
 * GPO_R_FORKED, ...) after printing one line on stderr the first time. */
int gpo_gpu_start(void);

/* Register the GPU boundary's fork handlers (once). The policy calls it
 * just before registering its own: fork runs prepare handlers in the
 * reverse order of registration, so the policy's lock is then taken
 * before the boundary's, the order every call takes them in (the
 * policy's decision reads the backend's free memory, its give-back stops
 * the backend); the other order deadlocks a fork against such a call. */
void gpo_gpu_atfork(void);
/* Stop using the GPU: release device memory, handles and the context, so
 * that the lease can be given back. Safe when not started. */
void gpo_gpu_stop(void);
/* Free and total device memory in bytes, from the started backend.
 * Returns 0, or -1 when not started or unknown. */
int gpo_gpu_memory(uint64_t *free_bytes, uint64_t *total_bytes);

/* The operation's name from the generated table ("gemm", "getrf", ...). */
const char *gpo_op_name(unsigned op);

#endif
