/*
 * call.c - the copy engine behind the generated ?copy wrappers
 * (tools/gen_offload.py): a call the frontend left to the CPU library
 * (below the size threshold, or measured) that qualifies (pcopy.h) is
 * done by the engine, and the CPU library's ?copy is not called. The
 * policy sees it as `copy-engine`, timed when the call would have been.
 */
#include "frontend.h"
#include "pcopy.h"

int gpo_copy_call(struct gpo_ctx *x, int64_t n, const void *src, int64_t incx,
		  void *dst, int64_t incy, unsigned esz)
{
	double t = 0;

	if (x->state != GPO_ST_CPU)
		return 0;
	if (x->t0 != 0)
		t = gpo_now();
	if (!gpo_pcopy(n, src, incx, dst, incy, esz))
		return 0;
	if (x->t0 != 0)
		x->t0 = gpo_now() - t;
	x->state = GPO_ST_COPIED;
	x->d.reason = GPO_R_COPY_ENGINE;
	return 1;
}
