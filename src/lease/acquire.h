/*
 * acquire.h - what the steps of one gm_lease_acquire call share (lease
 * core only, prefix gm__).
 *
 * The call's steps live in the files of the protocol's parts, in the
 * order docs/design.md ("Taking or joining a lease") tells them:
 *   lease.c   gm_lease_acquire: the steps in order, and the one cleanup
 *   job.c     the job lock, the job's record, joining its live lease
 *   queue.c   the ticket counter and tickets; ahead.c: who is ahead
 *   grant.c   at the head: the devices, the grant, the holder files
 * Each function returns 0 (or what it says) or a negative errno, with a
 * message in a->err where it fails.
 */
#ifndef GPUMUTEX_LEASE_ACQUIRE_H
#define GPUMUTEX_LEASE_ACQUIRE_H

#include <poll.h>

#include "events.h"
#include "internal.h"

/* Every GM_CLEANUP_EVERY-th ticket tidies its user's dead jobs. */
#define GM_CLEANUP_EVERY 16

/* Everything one acquire call holds, so one cleanup path frees it all.
 * On the heap, with claim's doorbell arrays: gm_lease_acquire runs on its
 * caller's stack, which for cuInit can be a 16 KiB thread stack. */
struct acq {
	const struct gm_config *cfg;
	const struct gm_acquire_hooks *hooks;
	struct gm__dir d;
	int64_t deadline;           /* CLOCK_MONOTONIC ns, -1: none */
	uint64_t mask;              /* candidate devices as a bit set */
	char jobname[GM_JOB_MAX + 1];
	int jobfd;                  /* holds the job lock */
	struct gm__ticket tk;       /* our place in line */
	int waited;                 /* on_wait already called */
	int cleaned;                /* gm__cleanup_jobs already ran */
	char cmd[GM_CMD_MAX];       /* our command line, for the record */
	int recfd;                  /* the record's temporary file, made early */
	char *err;
	size_t errlen;
	struct pollfd bells[GM_MAX_DEVICES]; /* claim: doorbells of busy devices */
	int belldev[GM_MAX_DEVICES];         /* ... and their device indices */
	struct gm__evnote ev;       /* event log: what to record (events.c) */
	struct gm_config narrow;    /* cfg narrowed to the GPUs of the job's
	                             * suspended members (a->cfg then) */
};

struct record {
	uint64_t lease;
	int devices[GM_MAX_DEVICES];
	int ndevices;
};

/* lease.c: say once that we wait (a->hooks->on_wait), and tidy this
 * user's dead jobs first when it is our turn to. */
void gm__notify_wait(struct acq *a, int ahead, int head, int job_busy);
/* lease.c: the timeout's message; returns -ETIMEDOUT. */
int gm__timed_out(struct acq *a);

/* job.c: take the job lock (sleeping while another process of the job
 * holds it). */
int gm__job_lock(struct acq *a);
/* job.c: our job's record, if there is one we can trust: 0, -ENOENT (none,
 * or not ours, or not valid), or another -errno when it could not be read. */
int gm__record_read(struct acq *a, struct record *r);
/* job.c: make the record's temporary file before waiting; its descriptor,
 * or -1 with errno set. Needs the job lock. */
int gm__record_prepare(struct acq *a);
/* job.c: write the record of lease *l whole (temporary file, rename). */
int gm__record_write(struct acq *a, const struct gm_lease *l);
/* job.c: add this process to the record's members (display only). */
void gm__record_add_member(struct acq *a);
/* job.c: unlock and close a lease's descriptors. */
void gm__drop(int *fds, int n);
/* job.c: join lease r if it is alive: 1 joined (out filled), 0 dead,
 * -errno when that could not be told (then nothing is removed). */
int gm__join(struct acq *a, const struct record *r, struct gm_lease *out);

/* grant.c: wait in line, then for devices, then grant: 0 with out filled,
 * or -errno. */
int gm__claim(struct acq *a, struct gm_lease *out);
/* grant.c: after a grant, name our record in job/<user>/held.<d>. */
void gm__holder_files(struct acq *a, const struct gm_lease *l);

/* events.c: the call's records (grant, join or give-up; the wait was
 * written when it began), once the ticket and the job lock are released:
 * off the hand-off path. `rc` is gm_lease_acquire's result. */
void gm__ev_acquired(struct acq *a, int rc, const struct gm_lease *out);
/* events.c: before a claim may wait, make its records ready (open the
 * log; a->ev.fd, closed by gm__ev_acquired). Never fails the claim. */
void gm__ev_prepare(struct acq *a);
/* events.c: a claim is about to sleep in line for the first time. */
void gm__ev_waiting(struct acq *a, int ahead, int head);

#endif
