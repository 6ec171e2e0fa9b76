/*
 * activity.h - when this process last made a GPU call (any wrapped driver
 * call but the pure queries), and how many of the calls it can see the end
 * of are in flight. Read by the idle-suspension thread (suspend.c) and
 * published for `gpumutex status`; callable from any code of the preload
 * library that brackets a driver call (context calls in wrap.c, the exit
 * path of gate.c).
 */
#ifndef GPUMUTEX_PRELOAD_ACTIVITY_H
#define GPUMUTEX_PRELOAD_ACTIVITY_H

#include <stdint.h>

/*
 * Bumped with a locked increment by every work wrapper before it reads
 * gmp_go (tools/gen-wrappers.sh): a full barrier, so that a thread that
 * read gmp_go == 1 has its bump visible to whoever cleared gmp_go and
 * then reads the count (suspend.c relies on that). Its own cache line.
 */
extern long gmp_act_calls;
/* Set by the wrappers of the CUDA IPC functions (driver-policy.txt, class
 * ipc): the process exported or imported memory or events, which idle
 * suspension must not checkpoint. */
extern unsigned char gmp_ipc_used;

/* A bracketed driver call starts / ends (any thread; errno kept). Begin
 * counts as a call start (gmp_act_calls) and in flight. */
void gmp_act_begin(void);
void gmp_act_end(void);
/* Bracketed calls in flight now. */
int gmp_act_inflight(void);
/* CLOCK_MONOTONIC ms of the last bracketed call's end (0: none yet). */
int64_t gmp_act_last_end_ms(void);

/*
 * The sampler (one thread only: suspend.c's): milliseconds since the
 * call count last changed, as seen by the calls of this function (0 when
 * it changed since the previous call, or a bracketed call is in flight).
 * *seen gets the count it compared, for gmp_act_since.
 */
int64_t gmp_act_idle_ms(long *seen);
/* 1 when no call started since the sample that returned `seen`, and none
 * of the bracketed ones is in flight. */
int gmp_act_quiet(long seen);

/* CLOCK_MONOTONIC in ms. */
int64_t gmp_mono_ms(void);

#endif
