/*
 * ahead.h - inside the copy engine (src/offload/pcopy/): what ahead.c
 * does for a gather's fresh destination, and the populate job pcopy.c
 * runs for it. docs/offload.md, "The CPU copy engine".
 */
#ifndef GPUOFFLOAD_PCOPY_AHEAD_H
#define GPUOFFLOAD_PCOPY_AHEAD_H

#include <stdint.h>

/* The regions of a transparent huge page (x86-64 and arm64 with 4 KiB
 * pages): the unit of the hint and of populating. */
#define GPO_AHEAD_REGION ((uintptr_t)2 << 20)

/*
 * gpo_ahead: before the copy job of a gather (contiguous destination
 * [lo, hi)) that t threads will do: follow the run of gathers, and for
 * the regions after hi, in private anonymous memory only, give the
 * mapping the huge-page hint and have the engine's threads fault them
 * in (ahead.c says when). Under the engine's job lock; errno is the
 * caller's to restore; nothing is printed.
 */
void gpo_ahead(uintptr_t lo, uintptr_t hi, int t);

/* A fork child's: the parent's run is not the child's. */
void gpo_ahead_forget(void);

/* pcopy.c: a populate job of n regions from `from` (page-aligned to a
 * region) over t threads, the caller's the first; returns when done.
 * Under the job lock. */
void gpo_pcopy_populate(uintptr_t from, int64_t n, int t);

#endif
