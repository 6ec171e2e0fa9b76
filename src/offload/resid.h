/*
 * resid.h - residency: device copies of operands kept between GPU calls
 * while their host memory is provably unchanged (resid.c; the design:
 * docs/offload-residency.md).
 *
 * Everything here is called by gpu.c with its lock (gpo__lock) held, on
 * the started backend; the table holds device buffers of that backend.
 *
 * An operand is named by its range in the caller's memory: the address,
 * the pitch (ld in bytes), the bytes per column that a copy moves
 * (width) and the columns. Its life:
 *   1. first seen (gpo_res_seen): only remembered, nothing protected: a
 *      program that never reuses an operand pays a lookup, no tracking;
 *   2. seen again: before its copy in, its pages are write-protected
 *      (gpo_res_arm); after the call succeeded, its device buffer is
 *      kept (gpo_res_keep) instead of released;
 *   3. later calls take the buffer (gpo_res_take) when the tracker says
 *      no byte of the range was written since; else it is dropped, and
 *      the operand is not armed again for a while (twice as long after
 *      each such change: a buffer the program rewrites between calls
 *      costs a write-fault per page at most once per period).
 * Outputs the call copied back are kept too (gpo_res_keep after the
 * commit, armed then) once their memory was read by some call: the next
 * call that reads them finds them there.
 * Arming a range drops every other entry that overlaps its pages (their
 * record of writes there would be lost). The table's device bytes stay
 * within half the memory the level leaves beyond its reserve, least
 * recently used out first.
 */
#ifndef GPUOFFLOAD_RESID_H
#define GPUOFFLOAD_RESID_H

#include <stdint.h>

#include "backend.h"
#include "policy.h"     /* GPO_MAX_BUFS */

/* Operands smaller than this are never tracked: arming one (reading
 * /proc/self/maps, registering, write-protecting) costs about what
 * copying a few MB costs. GPU_OFFLOAD_RESIDENT_MIN=BYTES sets it. (The
 * calibration's workload skips the gemv sizes under it: their calls are
 * never offloaded.) */
#define GPO_RES_MIN_DEFAULT (4u << 20)

struct gpo_res_key {
	const void *host;
	uint64_t pitch, width, cols;
};

/* Residency in force for this process: 1, or 0 (off: GPU_OFFLOAD_RESIDENT
 * =0, or the tracker found unavailable at its first arming; gpo_res_why
 * says which). Opens nothing. */
int gpo_res_enabled(void);
/* One word: "on", "off" (switched off), or the tracker's reason
 * ("kernel", "permission", ...). */
const char *gpo_res_why(void);

/* A kept device buffer for k, still equal to the host memory: removed
 * from the table and returned (the caller owns it now; gpo_res_keep may
 * give it back); NULL when there is none (a changed one is released). */
void *gpo_res_take(const struct gpo_backend *be, const struct gpo_res_key *k);

/* Whether k should be armed for keeping (seen before, not backing off,
 * and, for a pure output (input 0), read as an input by some call
 * before); remembers k as seen either way. Called once per operand per
 * call (a sighting); operands under the minimum size are ignored. */
int gpo_res_wanted(const struct gpo_backend *be, const struct gpo_res_key *k,
		   int input);

/* Whether k is in the table (kept, or seen and not backing off): no
 * change to the table. */
int gpo_res_known(const struct gpo_res_key *k);

/* Whether k has a kept device copy (not checked against the host memory
 * yet: gpo_res_take does that). No change to the table. */
int gpo_res_held(const struct gpo_res_key *k);

/* Write-protect k's pages before they are copied in (or after results
 * were written into them): drops the entries overlapping them. 0 when
 * armed; else a tracker reason (then k must not be kept). */
int gpo_res_arm(const struct gpo_backend *be, const struct gpo_res_key *k);

/* Drop every kept copy that shares a page with k: the call wrote k in
 * the caller's memory (its copy out may be a device's DMA, which the
 * tracker does not see). */
void gpo_res_forget(const struct gpo_backend *be, const struct gpo_res_key *k);

/* Keep dev as the device copy of k (armed by gpo_res_arm since its
 * content was last written on the host): 1 when kept (the table owns
 * dev), 0 when not (the caller releases it). bytes: dev's size. */
int gpo_res_keep(const struct gpo_backend *be, const struct gpo_res_key *k,
		 void *dev, uint64_t bytes);

/* Release every kept buffer and stop tracking (before the backend
 * stops: the lease given back). */
void gpo_res_drop_all(const struct gpo_backend *be);

/* Release kept buffers, least recently used first, until `need` more
 * bytes fit on the device (an allocation failed); 1 if any went. */
int gpo_res_evict(const struct gpo_backend *be, uint64_t need);

/* Whether a device copy was ever kept in this process: without the lock
 * (one relaxed load), so that a call that stays on the CPU asks the table,
 * which the lock guards, only once something can be in it. */
int gpo_res_ever_kept(void);

/* Totals for the summary: copies avoided and their bytes, buffers kept. */
void gpo_res_totals(uint64_t *hits, uint64_t *saved, uint64_t *kept);

/* ---- One call (rescall.c) ---------------------------------------------- */
struct gpo_ctx;

/* A call's residency: each operand's key and device size, whether its
 * kept copy was taken (hit), whether it is to be armed (want), armed. */
struct gpo_res_call {
	struct gpo_res_key key[GPO_MAX_BUFS];
	uint64_t bytes[GPO_MAX_BUFS];
	uint8_t hit[GPO_MAX_BUFS], want[GPO_MAX_BUFS], armed[GPO_MAX_BUFS];
};

/* Residency's part in the decision of call x (rescall.c; the model,
 * docs/offload-residency.md): the bytes of its inputs the GPU already
 * holds, which the model then leaves out of its copies in. level2: x is
 * a level-2 call, whose matrix (operand 0) counts when the table knows it
 * (kept, or seen and not backing off: its one copy in is then invested
 * in the calls that follow); returns whether it does, and remembers it
 * as seen when not (that call stays on the CPU). rx: scratch. */
int gpo_res_decide(const struct gpo_backend *be, struct gpo_ctx *x,
		   int level2, struct gpo_res_call *rx, double *bytes);

/* rx filled for call x (its resident flags cleared), or NULL when
 * residency is off. */
struct gpo_res_call *gpo_res_begin(struct gpo_ctx *x, struct gpo_res_call *rx);
/* Whether an operand of the call is kept or was seen before: then the
 * frontend's own flow runs it, not the backend's run_host. */
int gpo_res_call_known(const struct gpo_ctx *x, const struct gpo_res_call *rx);
/* After the call, whatever its outcome: the kept copies that share pages
 * with its outputs dropped (gpo_res_forget). */
void gpo_res_call_wrote(const struct gpo_backend *be, const struct gpo_ctx *x,
			const struct gpo_res_call *rx);
/* A call run_host did: each operand's sighting. */
void gpo_res_call_seen(const struct gpo_backend *be, const struct gpo_ctx *x,
		       const struct gpo_res_call *rx);
/* After the call succeeded (results committed, unless stage_only: verify):
 * keep its buffers as resid.h says; kept ones leave dev[] (NULL). */
void gpo_res_end(const struct gpo_backend *be, const struct gpo_ctx *x,
		 struct gpo_res_call *rx, void **dev, int stage_only);

/* The summary's residency line on stderr (observe.c calls it at exit,
 * through a weak reference, once something was offloaded): when a copy
 * was kept, or residency is unavailable (the reason in a word). */
void gpo_res_summary(void);

#endif
