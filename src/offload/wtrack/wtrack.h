/*
 * wtrack.h - write tracking for gpu-offload's residency: has a range of
 * the process's memory been written since we last looked?
 *
 * The mechanism (docs/offload-residency.md): userfaultfd write-protection
 * in asynchronous mode (UFFD_FEATURE_WP_ASYNC, Linux 6.7 and later) and
 * the PAGEMAP_SCAN ioctl on /proc/self/pagemap. A protected page's first
 * write, by any thread or by the kernel on the process's behalf (read(2),
 * recv), is resolved inside the kernel, which clears the page's
 * write-protect bit: no handler thread, no signal, nothing the program
 * sees. PAGEMAP_SCAN then reads the bits for a range. Only private
 * anonymous memory is tracked (another process cannot write it); a page
 * that is gone (MADV_DONTNEED), a mapping that was replaced, moved
 * (mremap) or never registered, reads as written. Anything not provably
 * unchanged is changed.
 *
 * Libc only; thread-safe (one internal lock); never prints, never changes
 * errno; the descriptors it holds are O_CLOEXEC and checked to still be
 * its own before each use (a program may close and reuse their numbers).
 */
#ifndef GPUOFFLOAD_WTRACK_H
#define GPUOFFLOAD_WTRACK_H

#include <stddef.h>

/* Why a range cannot be tracked (0: it can). */
enum {
	GPO_WT_OK = 0,
	GPO_WT_R_KERNEL,        /* no async write-protect or PAGEMAP_SCAN */
	GPO_WT_R_PERM,          /* userfaultfd not permitted here */
	GPO_WT_R_SHARED,        /* not private anonymous memory */
	GPO_WT_R_BUSY,          /* the program's own userfaultfd has it */
	GPO_WT_R_LIMIT,         /* the kernel's map count or memory */
	GPO_WT_R_ERROR,         /* any other failure */
	GPO_WT_R_OFF,           /* switched off (gpo_wt_reset(1)) */
	GPO_WT_NREASONS
};

/* One word for a reason code, for the summary and the report. */
const char *gpo_wt_reason(int r);

/* Start tracking writes to [p, p+len) (widened to whole pages): from the
 * moment it returns 0, every write to the range, by anyone in this
 * process, makes gpo_wt_clean() of any part of it answer 0. Calling it
 * again on a tracked range re-arms it (forgets the writes so far): a
 * caller that keeps copies of several overlapping ranges must first
 * check the others. Returns 0, or a GPO_WT_R_* reason (nothing tracked). */
int gpo_wt_protect(const void *p, size_t len);

/* 1 when provably no byte of [p, p+len) was written since the
 * gpo_wt_protect() that covered it; 0 otherwise (written, gone, remapped,
 * unknown, a fork since, tracking stopped). */
int gpo_wt_clean(const void *p, size_t len);

/* Stop tracking everything (the kernel forgets every registration and
 * write-protect bit with the descriptor): after it, gpo_wt_clean answers
 * 0 for every range until a new gpo_wt_protect. off != 0 also refuses
 * every later protect (GPO_WT_R_OFF). */
void gpo_wt_reset(int off);

/* Whether tracking can work in this process: 0, or the reason why not
 * (tried once, then latched; cheap). */
int gpo_wt_available(void);

#endif
