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

/* 1 while this thread is inside gmp_gate (re-entrancy guard). */
int gmp_gate_busy(void);

/* Write "gpumutex: <message>\n" to file descriptor 2 with one write(2),
 * preserving errno. */
void gmp_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
