/*
 * exit.c - giving the lease back at exit, before the process's CUDA
 * teardown, and an allocation that waits for such an exit instead of
 * failing (docs/design.md, "Exit and readiness rules"). Off unless
 * GPUMUTEX_EXIT_EARLY=1.
 *
 * Why: a holder's lease is let go when its files close, at the very end
 * of its exit. Everything between its last GPU work and that point (the
 * program's atexit handlers, the CUDA runtime's and the driver's
 * teardown of its contexts, the kernel unmapping its memory) is idle GPU
 * time that the next job waits through.
 *
 * The release runs as an atexit handler registered at the grant: atexit
 * handlers run in reverse order, so it runs before those the CUDA
 * runtime and the driver registered at their initialisation (before the
 * grant). It declines, and the process keeps its lease until it is gone
 * as before, unless every context it may have is a primary context that
 * it can synchronise (no non-primary context, no call through a wrapper
 * the table does not name, every context call finished), and the
 * synchronisation succeeds on every device. The GPU memory the process
 * still has is then its teardown's to free; the lock directory marks it
 * as an exiting holder until it is gone (src/lease/exiting.c), and a next
 * holder's allocation that fails for lack of memory waits for it and runs
 * again (wrap.c, gmp_wrap_leave), so that no job sees an out-of-memory
 * error that holding the lease to the end would have avoided.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate.h"
#include "lease.h"
#include "wrap.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;

static int exit_armed;

/*
 * Under the gate's lock, with gmp_go 0: 0 when no GPU work of this
 * process can be in flight any more, else -1. Every context call has
 * finished and every context is a primary one (gmp_wrap_ctx_settled);
 * each active primary context is then synchronised through the real
 * driver. Known limit: a thread of the program that passed a work
 * wrapper's gmp_go check just before it was cleared, and has not yet
 * entered the driver, is not seen (the wrappers' fast path counts
 * nothing); the per-process in-flight count of the activity API is the
 * place to close that, and why this is opt-in.
 */
static int quiesce(void)
{
	CUresult (*count)(int *) =
		(CUresult (*)(int *))gmp_wrap_driver_fn("cuDeviceGetCount");
	CUresult (*get)(CUdevice *, int) =
		(CUresult (*)(CUdevice *, int))gmp_wrap_driver_fn("cuDeviceGet");
	CUresult (*state)(CUdevice, unsigned *, int *) =
		(CUresult (*)(CUdevice, unsigned *, int *))gmp_wrap_driver_fn(
			"cuDevicePrimaryCtxGetState");
	CUresult (*retain)(CUcontext *, CUdevice) =
		(CUresult (*)(CUcontext *, CUdevice))gmp_wrap_driver_fn(
			"cuDevicePrimaryCtxRetain");
	CUresult (*release)(CUdevice) =
		(CUresult (*)(CUdevice))gmp_wrap_driver_fn(
			"cuDevicePrimaryCtxRelease_v2");
	CUresult (*push)(CUcontext) =
		(CUresult (*)(CUcontext))gmp_wrap_driver_fn(
			"cuCtxPushCurrent_v2");
	CUresult (*pop)(CUcontext *) =
		(CUresult (*)(CUcontext *))gmp_wrap_driver_fn(
			"cuCtxPopCurrent_v2");
	CUresult (*sync)(void) =
		(CUresult (*)(void))gmp_wrap_driver_fn("cuCtxSynchronize");
	int n = 0;

	if (gmp_wrap_ctx_settled())
		return -1;
	if (!count || !get || !state || !retain || !release || !push ||
	    !pop || !sync || count(&n))
		return -1;
	for (int d = 0; d < n; d++) {
		CUdevice dev = 0;
		CUcontext ctx = NULL, was = NULL;
		unsigned flags = 0;
		int active = 0, rc;

		if (get(&dev, d) || state(dev, &flags, &active))
			return -1;
		if (!active)
			continue;
		/* Retained and released around the synchronisation: the
		 * context is active, so this never creates or destroys it. */
		if (retain(&ctx, dev))
			return -1;
		rc = push(ctx);
		if (rc == 0) {
			rc = sync();
			if (pop(&was) && rc == 0)
				rc = -1;
		}
		release(dev);
		if (rc)
			return -1;
	}
	return 0;
}

static void exit_release(void)
{
	int saved = errno;

	gmp_gate_exit_release(quiesce);
	errno = saved;
}

void gmp_exit_arm(void)
{
	const char *v = getenv("GPUMUTEX_EXIT_EARLY");

	if (!v || strcmp(v, "1") != 0 || !gmp_wrappers())
		return;
	/* Once per process (a forked child inherits the registration, and
	 * its handler finds no lease of its own to give back). */
	if (__atomic_exchange_n(&exit_armed, 1, __ATOMIC_ACQ_REL))
		return;
	atexit(exit_release);
}

int gmp_gate_oom_wait(void)
{
	/* On the heap: this runs on the caller's thread, whose stack may
	 * be small (see gmp_say). */
	char *err;
	int devs[GM_MAX_DEVICES], n, rc;
	const char *lock_dir = NULL;

	n = gmp_gate_held_devices(devs, &lock_dir);
	if (n <= 0)
		return -1; /* no lease: nobody's exit to wait for */
	/* Without the gate's lock: the wait lasts as long as the other
	 * process's teardown, and this process's other threads go on. */
	err = malloc(GM_ERR_MAX);
	if (!err)
		return -1;
	rc = gm_lease_exit_wait(lock_dir, devs, n, getpid(), err, GM_ERR_MAX);
	if (rc < 0)
		gmp_say("%s; the allocation's out-of-memory error stands", err);
	free(err);
	return rc;
}

/* Substrings of the driver's names for calls that only free, destroy,
 * unload or wait, and the context-stack calls (which touch no GPU). */
static const char *const teardown[] = {
	"Free", "Destroy", "Unload", "Unregister", "Release", "Unmap",
	"PrimaryCtxReset", "Close", "Synchronize", "Detach",
	"cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent",
};

int gmp_exit_teardown_call(const char *call)
{
	if (!call || strncmp(call, "cu", 2) != 0)
		return 0; /* "a driver function": unknown, queues */
	for (size_t i = 0; i < sizeof teardown / sizeof teardown[0]; i++)
		if (strstr(call, teardown[i]))
			return 1;
	return 0;
}
