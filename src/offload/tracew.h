/*
 * tracew.h - the trace writer (trace.c) and the buffer fingerprint.
 */
#ifndef GPUOFFLOAD_TRACEW_H
#define GPUOFFLOAD_TRACEW_H

#include <stdint.h>

#include "policy.h"
#include "trace.h"

/* Trace into directory `dir` (made if missing) at `level`; the file is
 * opened at the first record, and again under the child's pid after a
 * fork. 0, or -errno (the directory cannot be made). */
int gpo_trace_setup(const char *dir, int level);
/* 1 when tracing. */
int gpo_trace_on(void);
/* Before a call that may be offloaded: the fingerprints of its inputs,
 * kept per thread for the record gpo_trace_call writes after it. */
void gpo_trace_before(const struct gpo_call *c);
/* The record of one call (layout: trace.h). 0, or -errno when writing
 * failed (tracing has stopped; the caller says so once). */
int gpo_trace_call(const struct gpo_call *c, const struct gpo_decision *d,
		   int device, double seconds, double copy_in_s,
		   double copy_out_s, int fail);
/* An event record (enum gpo_trace_kind) lasting `seconds`. 0 or -errno. */
int gpo_trace_event(int kind, double seconds);
/* For the policy's fork handler: 0 before fork (takes the writer's lock),
 * 1 in the parent after it, 2 in the child (the lock made anew). */
void gpo_trace_fork(int stage);
/* A cheap content fingerprint of [p, p + bytes): 8 words sampled evenly,
 * mixed; never 0 (0 means unknown in a record). */
uint64_t gpo_fingerprint(const void *p, uint64_t bytes);

#endif
