/*
 * gate.h - the once-per-process step in front of the real cuInit:
 * configuration, job id, lease, CUDA_VISIBLE_DEVICES.
 */
#ifndef GPUMUTEX_PRELOAD_GATE_H
#define GPUMUTEX_PRELOAD_GATE_H

/* The CUDA driver result codes the hooks return (values from cuda.h). */
#define GMP_CUDA_SUCCESS 0
#define GMP_CUDA_ERROR_INVALID_VALUE 1
#define GMP_CUDA_ERROR_NO_DEVICE 100
#define GMP_CUDA_ERROR_NOT_FOUND 500

/*
 * Run the gate for this process. The first call decides and, when
 * gpumutex is configured, takes or joins the job's lease and sets
 * CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and GPUMUTEX_JOB; threads that
 * arrive meanwhile wait for it. Every later call returns the same answer
 * at once. Returns 0 when the caller may go on to the real cuInit, or the
 * CUDA error cuInit must return instead:
 *   GMP_CUDA_ERROR_INVALID_VALUE  malformed configuration, or settings
 *                                 that the job's live lease does not fit
 *                                 (GM_EJOIN) (sticky);
 *   GMP_CUDA_ERROR_NO_DEVICE      GPUMUTEX_TIMEOUT ran out, or the lock
 *                                 directory is unusable (sticky).
 * Preserves errno. Never exits, never writes to stdout.
 */
int gmp_gate(void);

/*
 * Before a driver call that can touch a device (the wrappers' slow path,
 * wrap.c): make sure this process holds its lease, taking it now (waiting
 * in the queue, with the waiting line naming `call`) when cuInit deferred
 * it; decides first, as cuInit would, if no cuInit came yet. Returns 0
 * when the call may go on to the driver, or the CUDA error it must return
 * instead (sticky, as for cuInit). Preserves errno.
 */
int gmp_gate_work(const char *call);
/* The same, for a context call of wrap.c: when this call takes the lease,
 * *inflight is incremented under the gate's lock and GMP_GATE_COUNTED is
 * returned (the caller then owns that count); 0 when the lease was held
 * already or is not needed (nothing counted); else a CUresult. */
#define GMP_GATE_COUNTED (-1)
int gmp_gate_work_counted(const char *call, int *inflight);

/* The error a refused driver call returns (the gate's sticky code). */
int gmp_gate_code(void);

/* A context was destroyed or released: look again, after the give-back
 * delay, whether the process still holds one. */
void gmp_gate_context_gone(void);

/*
 * The give-back step (wrap.c's helper thread, after the delay): if this
 * process holds a lease it took itself and surely holds no context
 * (gmp_wrap_may_hold_context), close its lease descriptors and go back
 * to DEFER, so that its next device call queues again for the same GPUs.
 */
void gmp_gate_give_back(void);

/* 1 while this thread is inside gmp_gate (re-entrancy guard). */
int gmp_gate_busy(void);

/*
 * The exit release (exit.c; docs/design.md, "Exit and readiness rules").
 * gmp_gate_exit_release: at exit, with the lease held by this process
 * itself, stop new calls from going straight to the driver, ask
 * `quiesce` (with the gate's lock held) whether any GPU work can still be
 * in flight, and when it answers 0, mark this process as an exiting
 * holder on its GPUs and give the lease back: the gate is then EXIT,
 * where teardown calls (gmp_exit_teardown_call) go to the driver without
 * a lease and any other device call queues for a new one, as in DEFER.
 * Returns 1 when the lease was given back, 0 when kept.
 * gmp_gate_oom_wait: after an allocation failed for lack of memory in a
 * process that holds its lease: wait until every exiting holder marked on
 * its GPUs is gone. Returns how many (> 0: allocate again), 0 (none), or
 * -1 (no lease held, or the marks cannot be read: the error stands).
 * gmp_exit_arm: called at each grant; registers the exit release once
 * when GPUMUTEX_EXIT_EARLY=1.
 * gmp_exit_teardown_call: 1 when driver function `call` only frees,
 * destroys, unloads or waits (it can put no work on a GPU).
 */
int gmp_gate_exit_release(int (*quiesce)(void));
int gmp_gate_oom_wait(void);
/* The GPUs of the lease this process holds into devs[] (room for
 * GM_MAX_DEVICES) and the lock directory; returns how many (0: none). */
int gmp_gate_held_devices(int *devs, const char **lock_dir);
void gmp_exit_arm(void);
int gmp_exit_teardown_call(const char *call);

/* Write "gpumutex: <message>\n" to file descriptor 2 with one write(2),
 * preserving errno. */
void gmp_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
