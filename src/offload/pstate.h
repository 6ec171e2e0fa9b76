/*
 * pstate.h - the policy's own state, shared by its three files and by
 * nothing else: pstate.c (the state, its configuration, fork handling and
 * the messages said once), policy.c (the decisions: starting the GPU,
 * sharing it, giving it back) and observe.c (what ran: learning, the
 * counts, traces of calls and the exit summary). Apart from policy.h
 * because the frontend must not see it: policy.h is the boundary.
 *
 * Locking: gpo_pol_lock over the GPU state and the lease; the trace
 * writer has its own (trace.c), taken after the first or alone. A fork
 * handler takes both, so a child starts with them free. The calls that
 * stay on the CPU take neither (policy.c's gpo_policy_decide, observe.c):
 * they read the settings, fixed once `inited` is 1, and the three state
 * words `started`, `dead` and `draining`, which are written under the lock
 * but with gpo_pol_set and read with gpo_pol_get; the model needs no lock
 * (model.h); the summary's counts are per thread (count.h).
 */
#ifndef GPUOFFLOAD_PSTATE_H
#define GPUOFFLOAD_PSTATE_H

#include <pthread.h>
#include <stdint.h>

#include "model.h"
#include "onvml.h"
#include "policy.h"
#include "profile.h"

#define GPO_POL_HIDDEN __attribute__((visibility("hidden")))

enum gpo_pol_force { GPO_POL_FORCE_NONE = 0, GPO_POL_FORCE_CPU,
		     GPO_POL_FORCE_GPU };

struct gpo_pol_state {
	int inited;
	int force, level, summary;
	int64_t watch_ns, yield_ns, idle_ns, mem_ns;
	int64_t mem_at;        /* when mem_free/mem_total were read (0: not) */
	uint64_t mem_free, mem_total;
	int nvml_off;          /* GPU_OFFLOAD_NVML=0, or NVML unusable */
	int64_t nvml_at;       /* when `nvml` was read (0: never) */
	int nvml_rc;           /* its gpo_nvml_read result */
	struct gpo_nvml_reading nvml;
	struct gpo_profile prof;
	int have_prof;
	struct gpo_model model;
	/* the GPU */
	int started;           /* backend started, lease held (if managed) */
	int dead;              /* a GPO_R_* reason that keeps the GPU off */
	int pinned;            /* libgpumutex joined: the lease stays */
	int draining;          /* a waiter: no new GPU calls, then give back */
	int inflight;          /* decided GPU, not yet observed */
	int64_t last_gpu_ns;
	int watching;
	unsigned said;         /* bit per kind of message said once */
	/* the summary (the per-reason counts: count.c's gpo_count_total) */
	uint64_t on_gpu;       /* (decided calls: from the counts) */
	double gpu_s, saved_s, startup_s;
};

extern pthread_mutex_t gpo_pol_lock GPO_POL_HIDDEN;
/* Written under gpo_pol_lock; `inited` is also read without it (atomic
 * acquire: the settings are fixed once it is 1). */
extern struct gpo_pol_state gpo_pol GPO_POL_HIDDEN;

/* The state words read without the lock (above): an atomic store, made
 * under gpo_pol_lock, and an atomic load. */
static inline void gpo_pol_set(int *word, int v)
{
	__atomic_store_n(word, v, __ATOMIC_RELEASE);
}

static inline int gpo_pol_get(const int *word)
{
	return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t gpo_pol_mono(void) GPO_POL_HIDDEN;

/* Under gpo_pol_lock: one stderr line per kind of problem for the
 * process (bit `kind`, below 32, one per message): "gpu-offload: ", then
 * fmt with a and b. */
void gpo_pol_say(unsigned kind, const char *fmt, const char *a,
		 const char *b) GPO_POL_HIDDEN;

/* Under gpo_pol_lock, once (gpo_pol.inited is 0): read the configuration
 * (pstate.c's header lists it), load the profile, set up the model, the
 * trace, the summary at exit and the fork handlers, then set inited. */
void gpo_pol_init(void) GPO_POL_HIDDEN;

/* A trace function returned rc (-errno): trace writing has stopped for
 * good. Says so once, taking gpo_pol_lock for the message unless `locked`
 * (the caller holds it), and opens the frontend's light path once nothing
 * is traced. */
void gpo_pol_trace_failed(int rc, int locked) GPO_POL_HIDDEN;

/* A trace event (trace.c) of `kind`; a failed write as
 * gpo_pol_trace_failed. */
void gpo_pol_event(int kind, double seconds, int locked) GPO_POL_HIDDEN;

/* The summary line on stderr (registered with atexit by gpo_pol_init when
 * GPU_OFFLOAD_SUMMARY=1; observe.c). Takes no lock. */
void gpo_pol_summary(void) GPO_POL_HIDDEN;

#endif
