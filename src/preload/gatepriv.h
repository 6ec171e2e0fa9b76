/*
 * gatepriv.h - what gate.c and waitline.c share (preload library only).
 */
#ifndef GPUMUTEX_PRELOAD_GATEPRIV_H
#define GPUMUTEX_PRELOAD_GATEPRIV_H

#include "gate.h"
#include "lease.h"

/* gm_acquire_hooks.arg of the gate's acquires. */
struct wait_ctx {
	const struct gm_config *cfg;
	const char *call; /* the first device call, or NULL: in cuInit */
	int64_t suspended_ms; /* >= 0: a resume, suspended this long */
};

/*
 * gm_acquire_hooks.on_wait: called once per acquire, when the process
 * first has to wait. Says in one line what it waits for, its place, who
 * holds the GPUs (a lock-free snapshot of the lock directory), and where
 * it waits (in cuInit, or at its first device call). Under the gate's
 * lock only (static buffers).
 */
void gmp_on_wait(void *arg, const struct gm_wait_info *w);

/*
 * Narrow cfg's candidates to the GPUs an inherited CUDA_VISIBLE_DEVICES
 * allows. Returns 0 (cfg narrowed), 1 ("" or "-1": no GPU wanted), or
 * -EINVAL with a message in err (UUIDs, not indices, none managed, fewer
 * than wanted).
 */
int gmp_narrow(struct gm_config *cfg, const char *cvd, char *err,
	       size_t errlen);

/* The variable a launcher (gpumutex-run, gpumutex.run) sets in a pool to
 * the CUDA_VISIBLE_DEVICES it chose for the counts of device queries. */
#define GMP_PLACEHOLDER_ENV "GPUMUTEX_CUDA_PLACEHOLDER"

/*
 * The CUDA_VISIBLE_DEVICES this process was given by its user: NULL when
 * unset, or when it is exactly the launcher's placeholder (a pool's count,
 * not a narrowing: the pool stays the pool). Any other value, the user's
 * own or a grant a child inherited, is returned as set; so is every value
 * in a set-user-ID (AT_SECURE) process, which reads no GPUMUTEX_* variable.
 */
const char *gmp_user_cvd(void);

/* The job's lease is alive but does not fit this process's settings
 * (gm_join_check's reason in `why`): say so, on stderr. */
void gmp_join_refused(const char *cvd, const char *why);

#endif
