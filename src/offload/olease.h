/*
 * olease.h - gpu-offload's gpumutex lease: taken without waiting, given
 * back when another job waits (docs/offload.md, "Under gpumutex").
 *
 * Not thread-safe by itself: the policy calls it under its lock (pstate.h).
 */
#ifndef GPUOFFLOAD_OLEASE_H
#define GPUOFFLOAD_OLEASE_H

#include <stddef.h>
#include <stdint.h>

enum gpo_olease_rc {
	GPO_OL_HELD = 0,       /* held now (or gpumutex is not configured) */
	GPO_OL_REFUSED = 1,    /* another job holds or waits: try later */
	GPO_OL_BACKOFF = 2,    /* refused recently: not asked again yet */
	GPO_OL_BROKEN = 3      /* misconfigured or unusable lock dir: never */
};

/*
 * Take the lease if it is not held. Reads the gpumutex configuration the
 * first time, as libgpumutex does (gm_config_resolve: the machine-wide
 * file, GPUMUTEX_CONFIG, the environment): not configured (no visible
 * devices) means no lease is needed (HELD, gpo_olease_managed() == 0). Otherwise claims with a
 * timeout of 0 for the job GPUMUTEX_JOB (generated and put into the
 * environment when unset, as libgpumutex does, so that the CUDA backend's
 * cuInit, if libgpumutex is also preloaded, and the process's children
 * join this lease instead of queueing behind it), and after a grant sets
 * CUDA_VISIBLE_DEVICES to the leased GPUs (and CUDA_DEVICE_ORDER). Later
 * claims ask only for the GPUs of the first one, which the CUDA driver of
 * this process was started with. After a refusal the next try comes no
 * sooner than a back-off (1 s, doubling to 30 s; GPU_OFFLOAD_RETRY_MS sets
 * the first). `now_ns` is CLOCK_MONOTONIC. A message, for REFUSED and
 * BROKEN, goes to `err`.
 */
int gpo_olease_take(int64_t now_ns, char *err, size_t errlen);
/* 1 when a gpumutex lease governs this process's GPU use. */
int gpo_olease_managed(void);
/* 1 when the lease is held by this process now. */
int gpo_olease_held(void);
/* The leased devices, formatted (gm_format_list); "" when none. */
const char *gpo_olease_devices(void);
/* 1 when another job waits for the held lease's GPUs, 0 when not or when
 * nothing is held, -errno when it cannot be told. */
int gpo_olease_contended(void);
/* Give the lease back (the GPU must no longer be used). The next claim
 * comes no sooner than one back-off from `now_ns`. */
void gpo_olease_release(int64_t now_ns);
/* In a child after fork: the parent's lease descriptors are closed here,
 * so that they do not keep the lease alive once the parent gives it
 * back. */
void gpo_olease_forget(void);
/* 1 when giving the lease back would free nothing: libgpumutex is loaded
 * in this process (its cuInit joins our lease and holds it for the life
 * of the process), or the lease is our job's, joined, which another of
 * its processes holds. */
int gpo_olease_pinned(void);

#endif
