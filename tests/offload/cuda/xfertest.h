/*
 * xfertest.h - what the copy engine's test program (xfertest.c, the
 * round trips and main; xfertest-prefault.c; xfertest-stage.c) shares:
 * the check counter, the fake driver's controls, buffers and their
 * comparison, and starting and stopping the engine with the thread
 * count checked. Only the test program includes it.
 */
#ifndef GPO_XFERTEST_H
#define GPO_XFERTEST_H

#include <stdint.h>
#include <stdio.h>

#include "xfer.h"

extern int checks, failed;
extern int base_tasks;          /* threads before the engine started (the
                                 * real driver has its own) */
/* The fake driver's fakedev_ctl and fakedev_get; NULL on a real driver. */
extern void (*ctl)(const char *, long);
extern long (*get)(const char *);

/* One check: counted, and a line "FAIL file:line: ..." when it fails. */
#define CHECK(c, ...) do { checks++; if (!(c)) { failed++; \
	printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); \
	printf("\n"); } } while (0)

/* `bytes` of host memory filled with `fill`, or random bytes if fill < 0;
 * exits 2 when out of memory. */
unsigned char *hbuf(uint64_t bytes, int fill);
/* Rows of dst (pitch dp) equal rows of src (pitch sp); dst's padding is
 * `pad` (or unchecked if pad < 0). */
int same(const unsigned char *dst, uint64_t dp, const unsigned char *src,
	 uint64_t sp, uint64_t w, uint64_t rows, int pad);
/* Every byte of [p, p + n) is v. */
int all(const unsigned char *p, uint64_t n, int v);
/* Device memory (exits 2 when the driver refuses). */
gpc_dptr dalloc(uint64_t bytes);
/* The thread count, read again while above base_tasks (bounded). */
int ntasks_settled(void);
/* Start the engine so tuned (config name `cfg` in messages), checking its
 * threads; stop it, checking that its threads and the fake's pinned and
 * registered memory are gone. */
void start(const char *cfg, uint64_t chunk, int nbuf, int threads,
	   uint64_t reg_min, uint64_t keep);
void stop(const char *cfg);

/* The parts of the test (each starts and stops the engine itself). */
void prefaults(void);           /* xfertest-prefault.c */
void failures(void);            /* xfertest-stage.c: the fake only */
void stage_parts(void);         /* xfertest-stage.c */

#endif
