/*
 * pause.c - the offloader's pause switch, libgpuoffload.so's one export
 * that is not a BLAS/LAPACK name (src/offload/exports.list).
 *
 * The state is one bit of the light path's gate word (count.h), so that
 * a call pays nothing more for it: the wrappers already load that word
 * once per call. docs/offload.md "Pausing the offloader" is the user's
 * side, with a ctypes recipe.
 */
#include "frontend.h"

/*
 * gpu_offload_pause(on): on > 0 pauses the offloader, on == 0 resumes it,
 * on < 0 changes nothing; returns the state before the call (1 paused,
 * 0 not). Never fails; errno untouched; no lock, one atomic operation;
 * callable from any thread, at any time (before the first BLAS call,
 * from a signal handler).
 *
 * While paused, every intercepted call (the light path's and the full
 * path's, every ?copy call too: the CPU copy engine does not run) calls
 * the CPU library's function straight away, as if this library were not
 * loaded, and never starts the GPU. Such a call is counted in the exit
 * summary as `paused` (a call made inside another intercepted call, e.g.
 * a CPU LAPACK's own BLAS calls, stays `nested`), traced with that
 * reason when traces are on, and not shown to the policy: the ski-rental
 * rule and learning are not fed by it. The policy's state is kept: a
 * started GPU stays started (and its lease held, given back to a waiting
 * job as usual), so that resuming costs nothing.
 *
 * Process-wide, not per thread, and not counted: a second pause is no
 * deeper than the first (callers nest by restoring the value returned).
 * A call already inside the offloader when the state changes finishes
 * as it began (the state is read once, when a call enters a wrapper).
 * A fork child inherits the state.
 */
GPO_EXPORT int gpu_offload_pause(int on);

int gpu_offload_pause(int on)
{
	unsigned old;

	if (on < 0)
		old = gpo_fast_gate();
	else if (on)
		old = __atomic_fetch_or(&gpo_fast_word, GPO_FAST_PAUSED,
					__ATOMIC_ACQ_REL);
	else
		old = __atomic_fetch_and(&gpo_fast_word, ~GPO_FAST_PAUSED,
					 __ATOMIC_ACQ_REL);
	return (old & GPO_FAST_PAUSED) != 0;
}
