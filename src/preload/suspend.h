/*
 * suspend.h - idle holders give their GPUs to whoever waits: a process
 * whose GPU calls stopped for GPUMUTEX_IDLE_SUSPEND_MS while another job
 * waits for one of its GPUs checkpoints itself through the driver's
 * checkpoint API (from its own helper thread) and lets its lease go; its
 * next wrapped driver call queues for the same GPUs, restores and goes on.
 * docs/suspend.md.
 */
#ifndef GPUMUTEX_PRELOAD_SUSPEND_H
#define GPUMUTEX_PRELOAD_SUSPEND_H

#include <stdint.h>

#include "lease.h"

/* The default GPUMUTEX_IDLE_SUSPEND_MS (docs/preload.md says why). */
#define GMP_IDLE_SUSPEND_DEFAULT_MS 60000u
#define GMP_IDLE_SUSPEND_MAX_MS 86400000u

/*
 * Read GPUMUTEX_IDLE_SUSPEND_MS (once, from the gate, under its lock).
 * `file_ms`: the configuration file's idle_suspend_ms (UINT32_MAX: none),
 * the default; with `enforce`, also a ceiling the environment may only
 * lower (0, never, being the lowest). Returns 0, or -1 after saying on
 * stderr that the value is malformed (the gate then fails).
 */
int gmp_susp_configure(unsigned file_ms, int enforce);

/* The lease was taken (or taken again): start or wake the helper thread
 * that watches activity and suspends. Copies what it needs. */
void gmp_susp_arm(const struct gm_config *cfg, const struct gm_lease *l);

/*
 * Under the gate's lock, with gmp_go already 0 (no new call goes straight
 * to the driver): if no call started since the sample `seen`
 * (gmp_act_quiet), lock and checkpoint this process through the driver.
 * Returns 0 (checkpointed: the caller lets the lease go), or 1 with *why
 * set to a one-word reason (nothing changed: a half-done checkpoint is
 * undone).
 */
int gmp_susp_checkpoint(long seen, const char **why);

/* After the lease was taken again for a resume: restore and unlock.
 * 0, or -1 (said on stderr) when the driver would not. */
int gmp_susp_restore(void);

/* For the waiting line of a resume: ms this process has been suspended
 * (-1 when it is not suspended). */
int64_t gmp_susp_suspended_ms(void);

/* Checkpointed, the lease about to be let go: mark the job file (a new
 * process of the job then claims our GPUs: gm_lease_suspended_mark) and
 * publish "suspended". Then, once it is let go (off the hand-off's path),
 * the event log's record. */
void gmp_susp_done(void);
void gmp_susp_record(const struct gm_lease *l);
/* Taken again after a resume: publish the state, write the record. */
void gmp_susp_resumed(const struct gm_lease *l, int64_t waited_ms);
/* The restore failed (the process is shut): no longer "suspended" (its
 * GPUs are no longer its job's to keep). */
void gmp_susp_failed(void);

/* Fork: the child has no helper thread and is not suspended. */
void gmp_susp_atfork_child(void);

/* gate.c, for the thread: 1 while this process holds a lease it took
 * itself (HELD); and the suspension itself: under the gate's lock, if
 * HELD, stop the wrappers' fast path, gmp_susp_checkpoint(seen, why), and
 * on success let the lease go (state SUSPENDED: the next wrapped call
 * resumes). 0 suspended, 1 declined (*why), -1 not held. */
int gmp_gate_holds(void);
int gmp_gate_suspend(long seen, const char **why);

#endif
