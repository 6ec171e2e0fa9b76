/*
 * gputime.h - exact GPU time per lease (GPUMUTEX_GPU_TIME=1, config key
 * gpu_time; docs/gputime.md): CUPTI, found at run time,
 * reports this process's kernels and memory copies, and the event log
 * gets a `gputime` record per process and lease (busy time as the union
 * of their intervals, kernel time, copy time, the longest idle stretch)
 * at the lease's end and every minute of recorded GPU time in between.
 * A profiler comes first: when one is present or starts using CUPTI
 * later, this collector steps aside for good, with one line. Anything
 * that keeps it from working (no CUPTI, another major version, a CUPTI
 * that fails) is one line too; nothing else changes.
 */
#ifndef GPUMUTEX_PRELOAD_GPUTIME_H
#define GPUMUTEX_PRELOAD_GPUTIME_H

#include "lease.h"

/*
 * Read GPUMUTEX_GPU_TIME (from the gate, under its lock, once).
 * `file_val`: the configuration file's gpu_time (-1 absent); with
 * `enforce` the file's value stands. Returns 0, or -1 after saying that
 * the value is malformed (the gate then fails, as for every setting).
 */
int gmp_gt_configure(int file_val, int enforce);

/* A lease was granted (under the gate's lock): note it; the collector
 * starts at gmp_gt_run_pending, outside the lock (CUPTI calls the
 * driver, whose calls may need the gate). */
void gmp_gt_granted(const struct gm_config *cfg, const struct gm_lease *l);
/* Outside the gate's lock, on the thread that took the lease, before its
 * call goes on: start collecting if a grant is pending. */
void gmp_gt_run_pending(void);

/* The lease this process held ends (outside the gate's lock; `why`: one
 * word for the record): flush, write the final record, stop counting
 * until the next grant. `cupti`: 0 when CUPTI must not be called (the
 * process is checkpointed): what was flushed before is written. */
void gmp_gt_end(const char *why, int cupti);
/* Hand every finished record over now (before a suspension). */
void gmp_gt_flush(void);
/* The idle-suspension helper thread, at each sample: flush once a
 * minute, so that a long lease gets its records while it runs. */
void gmp_gt_tick(void);

/* A CUPTI entry point that a profiler uses was called by the program
 * (hooks.c): step aside first, for good. */
void gmp_gt_step_aside(const char *call);
/* The real CUPTI function `name` for a call from `caller` (cuptihooks.c;
 * gtload.h's gmp_gt_find_real). NULL: none found. */
void *gmp_gt_real(const char *name, const void *caller, int *global);

/* Fork: the child has no subscription and collects nothing. */
void gmp_gt_atfork_child(void);

#endif
