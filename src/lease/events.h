/*
 * events.h - the event log (lease core only, prefix gm__ev): one line per
 * wait, grant, join, give-up and exit in job/<user>/events.log, written
 * by the process it is about. Format and meaning: docs/report.md.
 *
 * Nothing here is on the hand-off path: a claim opens its log before it
 * may wait (gm__ev_prepare), notes times in its struct gm__evnote as it
 * goes (a clock read, no system call beyond it) and writes its records
 * once the ticket and job lock are released, with one fstat and one
 * write each; the exit record likewise, through the claim's descriptor
 * kept for the lease (gm__ev_remember). No
 * function here fails its caller: the log is a description, so a log that
 * cannot be written (full disk, a planted file, GPUMUTEX_LOG=0) is
 * skipped and the claim goes on.
 */
#ifndef GPUMUTEX_LEASE_EVENTS_H
#define GPUMUTEX_LEASE_EVENTS_H

#include <stdint.h>
#include <sys/types.h>

#include "lease.h"

#define GM_EVLOG_NAME "events.log"      /* in job/<user>/ */
#define GM_EVLOG_OLD  "events.log.1"    /* the rotated one */
#define GM_EVLOG_MAX_DEFAULT (4u << 20) /* bytes per file, GPUMUTEX_LOG_MAX */
#define GM_EVLINE_MAX 1024              /* < PIPE_BUF: one write, whole */

/* What a claim learns on its way, for its records. */
struct gm__evnote {
	int64_t arrived_mono, arrived_real; /* gm_lease_acquire started */
	int64_t wait_mono;                  /* first had to wait; 0: never */
	int ahead;                          /* live tickets ahead then */
	int head;                           /* 1: was at the head then */
	int64_t woke_mono;                  /* last doorbell of a device */
	uint64_t rang;                      /* the devices whose bells rang */
	int wrote_wait;
	/* Made ready before the claim may wait (gm__ev_prepare), so that
	 * after the grant a record costs one fstat and one write: */
	int fd;                             /* the log, open; -1: none */
	pid_t pid;                          /* ours, read then; 0: not yet */
	unsigned uid;                       /* our effective uid, likewise */
	char fields[GM_EVLINE_MAX];         /* a record's own fields */
	char line[GM_EVLINE_MAX];           /* the whole line */
};

/*
 * Append one record to this user's log (the directory `userfd`,
 * job/<user>/): `fields` is the text after "gm1 <event> t=... mono=...
 * uid=... pid=... job=...", without a newline. The file is opened for
 * the record (O_APPEND, O_NOFOLLOW, O_NONBLOCK) and believed only as a
 * regular file of ours that only we can write; otherwise nothing is
 * written. Rotates the file past GPUMUTEX_LOG_MAX. errno is preserved.
 * (A claim's own records go through the descriptor gm__ev_prepare
 * opened instead: acquire.h.)
 */
void gm__ev_write(int userfd, const char *event, const char *job,
		  const char *fields);

/* 1 when the log is on (GPUMUTEX_LOG is not "0"). */
int gm__ev_enabled(void);

/* This process gave lease *l back before exiting (gm_lease_release, its
 * descriptors closed): its exit record now, marked why=give-back, and
 * none at exit; the lease's log descriptor closed. Nothing when *l is
 * not the lease the exit record is about. errno is preserved. */
void gm__ev_gave_back(const struct gm_lease *l);

/* Remember lease *l of job `job` (lock directory `lock_dir`, user
 * directory `user_name` in job/) for the exit record of process `pid`
 * with effective uid `uid` (ours: passed in, read before the grant):
 * the record formatted now but for its times. gm__ev_acquired then
 * keeps the claim's log descriptor as the lease's, for that record. */
void gm__ev_remember(const char *lock_dir, const char *user_name,
		     const char *job, const struct gm_lease *l, pid_t pid,
		     unsigned uid);

#endif
