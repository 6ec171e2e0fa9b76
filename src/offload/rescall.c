/*
 * rescall.c - residency's steps in one GPU call (resid.h, "One call"):
 * the operands' keys, whether the backend's pipelined path may take the
 * call, and what is kept once the call succeeded. gpu.c calls these with
 * its lock held; the table itself is resid.c's.
 */
#define _GNU_SOURCE
#include <string.h>

#include "frontend.h"
#include "resid.h"

/* Residency for this call (NULL: off): the operands' keys. */
struct gpo_res_call *gpo_res_begin(struct gpo_ctx *x, struct gpo_res_call *rx)
{
	if (!gpo_res_enabled())
		return NULL;
	memset(rx, 0, sizeof *rx);
	for (int i = 0; i < x->s.nbuf; i++) {
		uint64_t es = gpo_elem_size(x, i);
		x->c.buf[i].resident = 0;
		if (!x->s.b[i].rows || !x->s.b[i].cols)
			continue;
		rx->key[i].host = x->a.buf[i];
		rx->key[i].pitch = (uint64_t)x->a.ld[i] * es;
		rx->key[i].width = (uint64_t)x->s.b[i].rows * es;
		rx->key[i].cols = (uint64_t)x->s.b[i].cols;
		rx->bytes[i] = ((uint64_t)x->a.ld[i] *
				(uint64_t)(x->s.b[i].cols - 1) +
				(uint64_t)x->s.b[i].rows) * es;
	}
	return rx;
}

int gpo_res_decide(const struct gpo_backend *be, struct gpo_ctx *x,
		   int level2, struct gpo_res_call *rx, double *bytes)
{
	int matrix = 0;

	*bytes = 0;
	if (!gpo_res_begin(x, rx))
		return 0;
	for (int i = 0; i < x->s.nbuf; i++) {
		int held;
		if (!rx->key[i].host || !x->s.b[i].in)
			continue;
		held = gpo_res_held(&rx->key[i]);
		if (level2 && i == 0) {
			matrix = held || gpo_res_known(&rx->key[i]);
			/* Not known: this call stays on the CPU, a sighting
			 * (the next one may then arm and keep it). */
			if (!matrix)
				(void)gpo_res_wanted(be, &rx->key[i], 1);
			held = matrix;
		}
		if (held)
			*bytes += (double)x->c.buf[i].bytes;
	}
	return matrix;
}

/* Whether an operand of the call is kept or was seen before: then the
 * frontend's own flow runs it (the backend's pipelined run_host neither
 * takes nor keeps device copies). */
int gpo_res_call_known(const struct gpo_ctx *x, const struct gpo_res_call *rx)
{
	if (!rx)
		return 0;
	for (int i = 0; i < x->s.nbuf; i++)
		if (rx->key[i].host && gpo_res_known(&rx->key[i]))
			return 1;
	return 0;
}

void gpo_res_call_wrote(const struct gpo_backend *be, const struct gpo_ctx *x,
			const struct gpo_res_call *rx)
{
	for (int i = 0; i < x->s.nbuf; i++)
		if (rx->key[i].host && x->s.b[i].out)
			gpo_res_forget(be, &rx->key[i]);
}

/* A call run_host did: its operands seen once (nothing kept). */
void gpo_res_call_seen(const struct gpo_backend *be, const struct gpo_ctx *x,
		       const struct gpo_res_call *rx)
{
	for (int i = 0; i < x->s.nbuf; i++)
		if (rx->key[i].host)
			(void)gpo_res_wanted(be, &rx->key[i],
					     x->s.b[i].in);
}

/* Whether operand i shares pages with another operand of the call that
 * was armed in it: arming that one forgot the writes to those pages since
 * i was checked or armed, so i's copy cannot be trusted. */
static int gpo__res_shared(const struct gpo_ctx *x, const struct gpo_res_call *rx,
			   int i)
{
	const uintptr_t pg = 4096;

	for (int j = 0; j < x->s.nbuf; j++) {
		const struct gpo_res_key *a = &rx->key[i], *b = &rx->key[j];
		if (j == i || !rx->armed[j] || !b->host)
			continue;
		if (((uintptr_t)a->host & ~(pg - 1)) <
		    (uintptr_t)b->host + b->pitch * (b->cols - 1) + b->width &&
		    ((uintptr_t)b->host & ~(pg - 1)) <
		    (uintptr_t)a->host + a->pitch * (a->cols - 1) + a->width)
			return 1;
	}
	return 0;
}

/* After a call that succeeded (the outputs committed, unless verify):
 * keep pure inputs that were kept or armed; then outputs, armed now that
 * the results are in the caller's memory (dropping what overlaps them,
 * inputs of this call included). Kept buffers leave dev[]. */
void gpo_res_end(const struct gpo_backend *be, const struct gpo_ctx *x,
		 struct gpo_res_call *rx, void **dev, int stage_only)
{
	for (int i = 0; i < x->s.nbuf; i++)
		if (dev[i] && x->s.b[i].in && !x->s.b[i].out &&
		    (rx->hit[i] || rx->armed[i]) && !gpo__res_shared(x, rx, i) &&
		    gpo_res_keep(be, &rx->key[i], dev[i], rx->bytes[i]))
			dev[i] = NULL;
	if (stage_only)
		return;         /* verify: the host holds the CPU's results */
	for (int i = 0; i < x->s.nbuf; i++)
		if (dev[i] && x->s.b[i].out &&
		    (rx->hit[i] || rx->want[i]) &&
		    gpo_res_arm(be, &rx->key[i]) == 0 &&
		    gpo_res_keep(be, &rx->key[i], dev[i], rx->bytes[i]))
			dev[i] = NULL;
}

