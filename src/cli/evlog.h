/*
 * evlog.h - reading the event log (every user's job/<user>/events.log and
 * events.log.1) and rebuilding leases and waits from it, for `gpumutex
 * log` and `gpumutex report`. The format and how each number is derived:
 * docs/report.md.
 */
#ifndef GPUMUTEX_CLI_EVLOG_H
#define GPUMUTEX_CLI_EVLOG_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "lease.h" /* gm_job_short */

enum gm_evkind { EV_WAIT, EV_GRANT, EV_JOIN, EV_GIVEUP, EV_EXIT, EV_UTIL,
		 EV_END, EV_OTHER, EV_SUSPEND, EV_RESUME, EV_GPUTIME };

/* One record. Times: t (CLOCK_REALTIME ns) and mono (CLOCK_MONOTONIC ns)
 * read together by the writer; other times in a record are monotonic
 * and turned into real time with that record's t - mono. */
struct gm_ev {
	enum gm_evkind kind;
	char name[16];
	int64_t t, mono;
	unsigned uid;
	int pid;
	char job[72];
	uint64_t lease, ticket;
	uint64_t dev, cand, usable, rang;   /* device bit sets */
	int want, place, queued, ahead, head, err;
	int64_t arrived, waited, woke;      /* arrived, woke: monotonic */
	char why[16];
	int gpu, memutil;                   /* util: percent, -1 unknown */
	uint64_t used, total;               /* util: bytes; suspend, resume:
					     * used = device memory moved */
	int64_t took, dur;                  /* suspend: checkpoint time, idle
					     * time; resume: dur = time
					     * suspended (waited: for GPUs) */
	/* gputime (docs/report.md, "GPU time"): ns, cumulative for the
	 * process's lease; final 1 on its last record. */
	int64_t held, busy, gpubusy, kernel, copy, idlemax;
	int final;
	char *cmd;                          /* "" when none; owned */
	/* EV_END (made by the reader): how its time is known. */
	const char *how;
	int64_t lower;                      /* real: last sign of life */
};

/* A lease as rebuilt: granted at start, ended at end (real ns). */
struct gm_span {
	uint64_t lease;
	unsigned uid;
	int pid;
	char job[72];
	const char *cmd;
	uint64_t dev;
	int64_t start, end, start_mono, end_mono;
	int64_t lower;          /* last sign of life (real) */
	const char *how;        /* woken, exit, next-grant, last-seen, live */
	int exact;              /* end known to the wake-up, not bounded */
	int64_t waited;         /* before the grant, ns */
	int queued, place, handoff;
	int members;
};

/* A wait as rebuilt: from arrival to grant, give-up, or death. */
struct gm_wait {
	unsigned uid;
	int pid;
	char job[72];
	const char *cmd;
	uint64_t cand, ticket;
	int want;
	int64_t start, end;     /* real ns */
	const char *outcome;    /* granted, timeout, error, died, waiting */
	int place;
};

struct gm_log {
	struct gm_ev *ev;       /* every record, in time order */
	int nev;
	struct gm_span *spans;  /* in grant order */
	int nspans;
	struct gm_wait *waits;  /* claims that queued or gave up */
	int nwaits;
	int64_t now;            /* real ns when read */
	int files, refused;     /* log files read; refused (with a note) */
};

/*
 * Read every user's log in `lock_dir` (a user's directory is believed
 * only if owned by the uid its name says and not writable by others; a
 * log file only if it is a regular file owned by that user: anything
 * else is refused, without blocking, with one `gpumutex: ...` line on
 * `notes`), then rebuild spans and waits. `live` (may be NULL, n) are the
 * lease ids alive now, from gm_state_read. 0, or -errno (-ENOENT: no
 * lock directory).
 */
int gm_log_read(const char *lock_dir, const uint64_t *live, int nlive,
		FILE *notes, struct gm_log *log);
void gm_log_free(struct gm_log *log);

/* Parse one line into *e (e->cmd malloc'ed). 0, or -1 if not a record. */
int gm_ev_parse(const char *line, struct gm_ev *e);

/* "0,1" from a bit set. */
void gm_mask_list(uint64_t m, char *out, size_t len);
/* Whether `want` (a --job value: any prefix, the short form included)
 * names `job`. */
int gm_job_prefix(const char *want, const char *job);
/* A user's name, or the number. */
void gm_user_name(unsigned uid, char *out, size_t len);
/* Local time "2026-12-01 14:05:09" of real ns. */
void gm_clock(int64_t real_ns, char *out, size_t len, int with_date);
/* A time argument: "24h", "90m", "30s", "2d" ago, or "@<unix seconds>",
 * or "YYYY-MM-DD[ HH:MM[:SS]]" (local). 0 with *real_ns, or -EINVAL. */
int gm_parse_since(const char *text, int64_t now, int64_t *real_ns);

#endif
