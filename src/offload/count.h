/*
 * count.h - the summary's per-reason call counts, kept per thread
 * (count.c), and the one word that says whether the frontend's light
 * path may be taken at all.
 *
 * A call the frontend keeps on the CPU without asking the policy (its
 * light path, and the full path's own verdicts when untraced) is counted
 * in the calling thread's block (initial-exec TLS: no atomic operation, no
 * shared cache line), which is folded into the process's totals
 * (gpo_count_total) by its own thread only: every GPO_COUNT_FOLD_EVERY
 * counts, at the thread's next call that goes the GPU's way (a decision
 * that takes the policy's lock), at the thread's exit (a
 * pthread key destructor, registered at the thread's first count), and
 * for the thread printing the summary just before it does. What a
 * summary may miss: the counts not yet folded of threads still running
 * when it is printed (fewer than GPO_COUNT_FOLD_EVERY each; exact for the
 * printing thread and for every thread that exited before).
 */
#ifndef GPUOFFLOAD_COUNT_H
#define GPUOFFLOAD_COUNT_H

#include <stdint.h>

#include "policy.h"

#define GPO_COUNT_HIDDEN __attribute__((visibility("hidden")))
#define GPO_COUNT_FOLD_EVERY 1024u

/* One thread's state for the frontend (depth, quiet) and its counts: one
 * block, so that a wrapper computes one TLS address. */
struct gpo_tls {
	int depth;             /* wrappers of this thread now running */
	int quiet;             /* inside the backend's start/stop/memory */
	uint32_t left;         /* counts until the next fold; 0: fold next */
	uint8_t keyed;         /* 0: no destructor yet, 1: registered,
	                        * 2: exited (or no key): fold every count */
	uint8_t cfg;           /* reading the frontend's configuration */
	uint64_t n[GPO_R_MAX]; /* counts not yet folded, per reason */
};
extern __thread struct gpo_tls gpo_tls
	__attribute__((tls_model("initial-exec"))) GPO_COUNT_HIDDEN;

/* The process's totals, per reason (read by the summary). */
extern uint64_t gpo_count_total[GPO_R_MAX] GPO_COUNT_HIDDEN;

/* Fold t (the calling thread's block) into the totals, and register the
 * thread's exit destructor if not yet done. errno untouched. */
void gpo_count_fold(struct gpo_tls *t) GPO_COUNT_HIDDEN;
/* Fold the calling thread's block now (the summary, a call that takes
 * the policy's lock). */
void gpo_count_flush(void) GPO_COUNT_HIDDEN;
/* In a fork child: the forking thread's counts not yet folded were the
 * parent's calls; dropped (the child's totals start from zero). */
void gpo_count_child(void) GPO_COUNT_HIDDEN;

/* Count one call of `reason` (< GPO_R_MAX) for the calling thread, whose
 * block is t. */
static inline void gpo_count(struct gpo_tls *t, unsigned reason)
{
	t->n[reason]++;
	if (__builtin_expect(t->left == 0, 0))
		gpo_count_fold(t);
	else
		t->left--;
}

/*
 * The light path's gate: one word, read once per call (a plain load on
 * x86), whose bits are what keeps the light path SHUT; 0: nothing does,
 * nothing makes a small or nested call more than a count and the CPU
 * library's call. Two bits stand for states that hold for good once
 * reached, and are only ever cleared: the frontend's configuration read
 * (not a secure-execution process, the threshold not 0: GPO_FAST_CONFIG,
 * cleared by the frontend) and the policy initialised with no trace
 * running (GPO_FAST_POLICY, cleared by the policy at its initialisation,
 * or when trace writing stopped). The third, GPO_FAST_PAUSED, comes and
 * goes (gpu_offload_pause, pause.c): while it is set every call the
 * wrapper makes is the CPU library's, counted GPO_R_PAUSED (top level)
 * or GPO_R_NESTED (inside another wrapper). The per-call conditions (the
 * thread inside the backend, the size) are the caller's. Shut bits
 * rather than open ones so that each of the light path's tests is one
 * instruction: word == 0 (active), word & GPO_FAST_SHUT == 0 (nested,
 * paused or not), word == GPO_FAST_PAUSED (paused).
 */
#define GPO_FAST_CONFIG 1u
#define GPO_FAST_POLICY 2u
#define GPO_FAST_SHUT (GPO_FAST_CONFIG | GPO_FAST_POLICY)
#define GPO_FAST_PAUSED 4u
extern unsigned gpo_fast_word GPO_COUNT_HIDDEN;

/* The state `bit` (GPO_FAST_CONFIG or GPO_FAST_POLICY) stands for holds
 * now, for good. */
static inline void gpo_fast_allow(unsigned bit)
{
	__atomic_fetch_and(&gpo_fast_word, ~bit, __ATOMIC_RELEASE);
}

/* The gate word, for one call's tests (above). */
static inline unsigned gpo_fast_gate(void)
{
	return __atomic_load_n(&gpo_fast_word, __ATOMIC_ACQUIRE);
}

/* Paused now (gpu_offload_pause): the full path's test. */
static inline int gpo_paused(void)
{
	return (gpo_fast_gate() & GPO_FAST_PAUSED) != 0;
}

#endif
