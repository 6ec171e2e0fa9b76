/*
 * tracew.h - the trace writer (trace.c) and the buffer fingerprint.
 */
#ifndef GPUOFFLOAD_TRACEW_H
#define GPUOFFLOAD_TRACEW_H

#include <stdint.h>

#include "trace.h"

/* Trace into directory `dir` (made if missing) at `level`; the file is
 * opened at the first record, and again under the child's pid after a
 * fork. 0, or -errno (the directory cannot be made). */
int gpo_trace_setup(const char *dir, int level);
/* 1 when tracing. */
int gpo_trace_on(void);
/* Append one record (thread-safe; one write(2) per record). 0 or -errno;
 * after an error tracing stops and the caller says so once. */
int gpo_trace_write(const struct gpo_trace_rec *r);
/* A cheap content fingerprint of [p, p + bytes): 8 words sampled evenly,
 * mixed; never 0 (0 means unknown in a record). */
uint64_t gpo_fingerprint(const void *p, uint64_t bytes);

#endif
