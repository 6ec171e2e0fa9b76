/*
 * events.c - the event log: job/<user>/events.log, one line per event,
 * written by the process the event is about (docs/report.md).
 *
 * Why this shape:
 * - One file per user, in the user's own job directory (mode 0755, only
 *   the user can make or remove files there): nobody can forge, change
 *   or remove another user's records, and everyone can read them.
 * - One write(2) of one whole line on an O_APPEND file: appends to a
 *   regular file are atomic against each other on Linux, so concurrent
 *   writers never interleave or tear lines (lines are kept below
 *   PIPE_BUF, GM_EVLINE_MAX, as a further margin).
 * - Written after the ticket and the job lock are released (lease.c), so
 *   no waiter ever waits for a log write, and through a descriptor opened
 *   before the claim may wait, so that no open (and its path lookup)
 *   delays the granted claim's return either. A granted claim keeps that
 *   descriptor as its lease's, for the exit record, which the holder's
 *   destructor writes while the lease is still held (below).
 * - The lease ends are not written by anyone at the moment they happen
 *   (a lease ends when its last member dies), but reconstructed by the
 *   reader from the records of the next holder and the members' exits
 *   (docs/report.md, "Ends").
 * - Bounded: past GPUMUTEX_LOG_MAX bytes the file is renamed to
 *   events.log.1 (replacing the older one) by whichever writer gets the
 *   file's lock first; at most twice the limit per user.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>

#include "acquire.h"

/* snprintf that may cut (a record's command comes last and may be cut). */
__attribute__((format(printf, 3, 4)))
static int fmt(char *buf, size_t len, const char *f, ...)
{
	va_list ap;
	int n;

	va_start(ap, f);
	n = vsnprintf(buf, len, f, ap);
	va_end(ap);
	return n < 0 ? 0 : n >= (int)len ? (int)len - 1 : n;
}

int gm__ev_enabled(void)
{
	const char *v = getenv("GPUMUTEX_LOG");

	return !(v && strcmp(v, "0") == 0);
}

static uint64_t log_max(void)
{
	const char *v = getenv("GPUMUTEX_LOG_MAX");
	uint64_t n;

	if (v && gm_parse_uint(v, 10, UINT64_C(1) << 40, &n) == 0)
		return n < 4096 ? 4096 : n;
	return GM_EVLOG_MAX_DEFAULT;
}

/* A log file we may append to: a regular file of ours, one link, that
 * nobody else can write. Anything else (a FIFO, a device, a link to a
 * file elsewhere) is someone's trap or damage: not written to. */
static int log_ok(int fd, struct stat *st)
{
	if (gm__fstat(fd, st) != 0)
		return 0;
	return S_ISREG(st->st_mode) && st->st_uid == geteuid() &&
	       st->st_nlink == 1 && !(st->st_mode & 022);
}

static int log_open(int dirfd, const char *path, struct stat *st)
{
	int fd, flags = O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW |
		O_NONBLOCK | O_CLOEXEC | O_NOCTTY;

	fd = dirfd >= 0 ? openat(dirfd, GM_EVLOG_NAME, flags, 0644) :
		open(path, flags, 0644);
	if (fd < 0)
		return -1;
	if (!log_ok(fd, st)) {
		close(fd);
		return -1;
	}
	if ((st->st_mode & 0777) != 0644)
		(void)fchmod(fd, 0644); /* readable by all whatever the umask */
	return fd;
}

/* Past the limit: rename the file to events.log.1, under the file's own
 * lock (so two writers do not rotate twice, throwing away the first
 * rotation), and only if the name still is this file. */
static void rotate(int dirfd, const char *path, int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = 0, .l_len = 1 };
	char *old;

	if (fcntl(fd, F_OFD_SETLK, &fl) != 0)
		return; /* someone else is rotating it */
	if (dirfd >= 0) {
		if (gm__still_linked(dirfd, GM_EVLOG_NAME, fd))
			(void)renameat(dirfd, GM_EVLOG_NAME, dirfd, GM_EVLOG_OLD);
	} else {
		struct stat a, b;
		/* The exit record: by path, the descriptors are gone. */
		if (asprintf(&old, "%s.1", path) >= 0) {
			if (gm__fstat(fd, &a) == 0 && gm__fstatat(AT_FDCWD, path, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
			    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
				(void)rename(path, old);
			free(old);
		}
	}
	fl.l_type = F_UNLCK;
	(void)fcntl(fd, F_OFD_SETLK, &fl);
}

/* The log in `dirfd` (or at `path`), open for `need` more bytes: rotated
 * first if they would take it past the limit. -1 when it is not ours. */
static int log_ready(int dirfd, const char *path, size_t need,
		     struct stat *st)
{
	int fd = log_open(dirfd, path, st);

	if (fd >= 0 && (uint64_t)st->st_size + need > log_max()) {
		rotate(dirfd, path, fd);
		close(fd);
		fd = log_open(dirfd, path, st);
	}
	return fd;
}

/* Record `event` as one line in `line` (GM_EVLINE_MAX bytes); returns
 * its length, newline included. */
static int ev_format(char *line, const char *event, unsigned uid, int pid,
		     const char *job, const char *fields)
{
	int n = fmt(line, GM_EVLINE_MAX,
		    "gm1 %s t=%" PRId64 " mono=%" PRId64 " uid=%u pid=%d job=%s %s",
		    event, gm__real_ns(), gm__mono_ns(), uid, pid,
		    job && *job ? job : "-", fields);

	if (n > GM_EVLINE_MAX - 2)
		n = GM_EVLINE_MAX - 2; /* the command is last: cut it */
	line[n++] = '\n';
	return n;
}

static void ev_append(int dirfd, const char *path, const char *event,
		      const char *job, const char *fields)
{
	char *line;
	struct stat st;
	int fd, n, saved = errno;

	if (!gm__ev_enabled())
		return;
	line = malloc(GM_EVLINE_MAX);
	if (!line)
		goto out;
	n = ev_format(line, event, (unsigned)geteuid(), (int)getpid(), job,
		      fields);
	fd = log_ready(dirfd, path, (size_t)n, &st);
	if (fd >= 0) {
		(void)!write(fd, line, (size_t)n);
		close(fd);
	}
out:
	free(line);
	errno = saved;
}

void gm__ev_write(int userfd, const char *event, const char *job,
		  const char *fields)
{
	if (userfd >= 0)
		ev_append(userfd, NULL, event, job, fields);
}

/* ---- The exit record ----------------------------------------------------
 * A lease ends when its last member has gone, which nobody sees happen.
 * A member that exits through exit() says so here, from a destructor:
 * the reader takes the last such record of a lease as its end when no
 * successor was woken by it earlier (docs/report.md, "Ends"). A member
 * killed by a signal, or leaving through _exit, writes nothing.
 *
 * The destructor runs before the lease's descriptors close (the kernel
 * closes them after it), so whatever it does, the next waiter waits
 * for. It does one fstat and one write: the log descriptor is the
 * lease's (the claim's, kept at the grant: `fd`, O_CLOEXEC, shared with
 * forked children like the lease's own descriptors, closed when the
 * lease is given back) and the record is formatted at the grant except
 * its two clock readings (`tail`; its buffer `line` touched then, so no
 * page fault at exit). Only when that descriptor is gone, rotated away
 * or full, or in a forked child (another pid), is the record written by
 * path as before.
 * Static, not on the stack nor the heap: destructors run late. */
static struct {
	int held;
	int fd;                 /* the lease's log descriptor; -1: none */
	pid_t pid;
	uint64_t lease_id;
	uint64_t max;           /* log_max(), read at the grant */
	int ntail;
	char path[4096 + GM_JOB_MAX + 96];
	char job[GM_JOB_MAX + 1];
	char fields[GM_MAX_DEVICES * 4 + 64];
	char tail[GM_EVLINE_MAX]; /* " uid=... pid=... job=... lease=... dev=...\n" */
	char line[GM_EVLINE_MAX];
} ex = { .fd = -1 };

static int ex_path(const char *lock_dir, const char *user_name)
{
	return snprintf(ex.path, sizeof ex.path, "%s/job/%s/" GM_EVLOG_NAME,
			lock_dir, user_name) < (int)sizeof ex.path;
}

void gm__ev_remember(const char *lock_dir, const char *user_name,
		     const char *job, const struct gm_lease *l, pid_t pid,
		     unsigned uid)
{
	char list[GM_MAX_DEVICES * 4];

	if (!gm__ev_enabled())
		return;
	if (!ex_path(lock_dir, user_name))
		return;
	gm_format_list(list, sizeof list, l->devices, l->ndevices);
	fmt(ex.job, sizeof ex.job, "%s", job);
	fmt(ex.fields, sizeof ex.fields, "lease=%016" PRIx64 " dev=%s",
		 l->lease_id, list);
	/* The line after "gm1 exit t=... mono=...", as ev_format makes it. */
	ex.ntail = fmt(ex.tail, sizeof ex.tail, " uid=%u pid=%d job=%s %s\n",
		       uid, (int)pid,
		       job && *job ? job : "-", ex.fields);
	if (ex.ntail <= 0 || ex.tail[ex.ntail - 1] != '\n')
		ex.ntail = 0; /* cut: never, the fields are short; by path then */
	ex.max = log_max();
	/* Touched now, so that the destructor takes no page fault on it. */
	memset(ex.line, 0, sizeof ex.line);
	ex.lease_id = l->lease_id;
	ex.pid = pid;
	ex.held = 1;
}

/* The lease's log descriptor from now on is `fd` (a claim's, untracked
 * like the lease's own descriptors): the previous one, if any, closed.
 * Exchanged atomically, so that two threads granted at once close each
 * descriptor once and never one that is no longer ours. */
static void ex_adopt(int fd)
{
	int old = __atomic_exchange_n(&ex.fd, fd, __ATOMIC_ACQ_REL);

	if (old >= 0 && old != fd)
		close(old);
}

/* Decimal digits of v at p; returns the end. */
static char *put_u64(char *p, uint64_t v)
{
	char d[20];
	int n = 0;

	do
		d[n++] = (char)('0' + v % 10);
	while ((v /= 10) && n < 20);
	while (n)
		*p++ = d[--n];
	return p;
}

/* The exit record through the lease's descriptor `fd`, with `why` (""
 * or " why=..."): 0 when written, -1 when it must go by path (the file
 * rotated away or full, or the record is not ready). */
static int ex_write(int fd, const char *why)
{
	static const char head[] = "gm1 exit t=";
	struct stat st;
	size_t nw = strlen(why);
	char *p = ex.line;
	int64_t t = gm__real_ns(), m = gm__mono_ns();

	if (fd < 0 || ex.ntail == 0 || getpid() != ex.pid ||
	    sizeof head + 2 * 20 + 6 + nw + (size_t)ex.ntail > sizeof ex.line)
		return -1;
	memcpy(p, head, sizeof head - 1);
	p = put_u64(p + sizeof head - 1, t < 0 ? 0 : (uint64_t)t);
	memcpy(p, " mono=", 6);
	p = put_u64(p + 6, m < 0 ? 0 : (uint64_t)m);
	memcpy(p, ex.tail, (size_t)ex.ntail - 1); /* its newline after why */
	p += ex.ntail - 1;
	memcpy(p, why, nw);
	p += nw;
	*p++ = '\n';
	/* As a claim's record (claim_write): rotated once, this is the
	 * events.log.1 a reader reads too; twice, unlinked; or full. */
	if (gm__fstat(fd, &st) != 0 || st.st_nlink != 1 ||
	    (uint64_t)st.st_size + (uint64_t)(p - ex.line) > ex.max)
		return -1;
	(void)!write(fd, ex.line, (size_t)(p - ex.line));
	return 0;
}

void gm__ev_gave_back(const struct gm_lease *l)
{
	char f[sizeof ex.fields + 32];
	int fd, saved = errno;

	/* Leaving the lease before exit is, for the lease, what exit() is:
	 * the same record, marked, and none again at exit (unless the
	 * process takes a lease again, gm__ev_remember). Another lease of
	 * this process than the one the record is about: nothing. */
	if (!ex.held || ex.lease_id != l->lease_id)
		return;
	fd = __atomic_exchange_n(&ex.fd, -1, __ATOMIC_ACQ_REL);
	if (ex.pid == getpid()) {
		if (ex_write(fd, " why=give-back") != 0) {
			fmt(f, sizeof f, "%s why=give-back", ex.fields);
			ev_append(-1, ex.path, "exit", ex.job, f);
		}
		ex.held = 0;
	}
	if (fd >= 0)
		close(fd); /* the lease's, given back with it */
	errno = saved;
}

__attribute__((destructor)) static void gm__ev_at_exit(void)
{
	int fd, saved = errno;

	/* Also in forked children, which share the lease: the last of the
	 * processes to go is what ends it. */
	if (!ex.held)
		return;
	fd = __atomic_exchange_n(&ex.fd, -1, __ATOMIC_ACQ_REL);
	if (ex_write(fd, "") != 0)
		ev_append(-1, ex.path, "exit", ex.job, ex.fields);
	/* Not closed here: a close would be one more system call before
	 * the lease's descriptors go; the exit closes it with them, as the
	 * lease's. (Unloading the library without exiting leaves it open
	 * with the lease's own descriptors, which stay too.) */
	(void)fd;
	errno = saved;
}

/* ---- A claim's records (called from lease.c and grant.c) ---------------
 * Not on the hand-off path: everything a record needs but the facts of
 * the grant is made ready before the claim may wait (gm__ev_prepare: the
 * log opened, checked and rotated if due; the buffers in struct acq,
 * touched by calloc; the exit record's path), so that between the grant
 * and gm_lease_acquire's return a record costs a few formatted numbers,
 * one fstat and one write (docs/benchmarks.md, "The event log's cost"). */

void gm__ev_prepare(struct acq *a)
{
	struct stat st;
	int saved = errno;

	if (!gm__ev_enabled() || a->d.user < 0 || a->ev.fd >= 0)
		return;
	a->ev.fd = gm__track(log_ready(a->d.user, NULL, 0, &st));
	a->ev.pid = getpid(); /* system calls both: not after the grant */
	a->ev.uid = geteuid();
	/* The exit record's path, now rather than after the grant (its
	 * pages are written here first); not while an earlier lease of
	 * this process still counts on it. */
	if (!ex.held) {
		(void)ex_path(a->cfg->lock_dir, a->d.user_name);
		ex.job[0] = ex.fields[0] = '\0';
	}
	errno = saved;
}

/* Append a->ev.fields as record `event`, through the prepared log when
 * there is one that still is ours and has room; else as gm__ev_write. */
static void claim_write(struct acq *a, const char *event)
{
	struct stat st;
	int n, saved = errno;

	if (!a->ev.pid) {
		a->ev.pid = getpid();
		a->ev.uid = geteuid();
	}
	n = ev_format(a->ev.line, event, a->ev.uid, a->ev.pid, a->jobname,
		      a->ev.fields);
	/* Rotated while we waited: once, the descriptor now is the
	 * events.log.1 a reader reads too; twice, it is gone (no link). */
	if (a->ev.fd >= 0 &&
	    (gm__fstat(a->ev.fd, &st) != 0 || st.st_nlink != 1 ||
	     (uint64_t)st.st_size + (uint64_t)n > log_max())) {
		gm__close(a->ev.fd);
		a->ev.fd = -1;
	}
	if (a->ev.fd < 0)
		a->ev.fd = gm__track(log_ready(a->d.user, NULL, (size_t)n, &st));
	if (a->ev.fd >= 0)
		(void)!write(a->ev.fd, a->ev.line, (size_t)n);
	errno = saved;
}

void gm__ev_waiting(struct acq *a, int ahead, int head)
{
	char list[GM_MAX_DEVICES * 4];

	if (a->ev.wrote_wait || a->cfg->timeout_s == 0)
		return;
	a->ev.wrote_wait = 1;
	a->ev.wait_mono = gm__mono_ns();
	a->ev.ahead = ahead;
	a->ev.head = head;
	if (!gm__ev_enabled() || a->d.user < 0)
		return;
	gm_format_list(list, sizeof list, a->cfg->devices, a->cfg->ndevices);
	/* Before sleeping, not on anyone's hand-off: whoever we wait for
	 * still holds what we want. */
	fmt(a->ev.fields, GM_EVLINE_MAX,
		 "ticket=%" PRIu64 " want=%d cand=%s ahead=%d head=%d arrived=%" PRId64 " cmd=%s",
		 a->tk.seq, a->cfg->want, list, ahead, head,
		 a->ev.arrived_mono, a->cmd);
	claim_write(a, "wait");
}

static void acquired(struct acq *a, int rc, const struct gm_lease *out)
{
	char *f = a->ev.fields;
	char dev[GM_MAX_DEVICES * 4], cand[GM_MAX_DEVICES * 4];
	char rang[GM_MAX_DEVICES * 4];
	int rv[GM_MAX_DEVICES], nr = 0;
	int64_t now = gm__mono_ns();

	if (!gm__ev_enabled())
		return;
	if (!a->ev.pid) {
		a->ev.pid = getpid();
		a->ev.uid = geteuid();
	}
	/* A failure before the ticket (bad directory, a job that does not
	 * fit its lease) is the caller's message, not an event in line. */
	if (rc != 0 && !a->tk.seq)
		return;
	if (a->d.user < 0)
		return;
	if (!a->cmd[0])
		gm__cmdline(getpid(), a->cmd, sizeof a->cmd);
	gm_format_list(cand, sizeof cand, a->cfg->devices, a->cfg->ndevices);
	if (rc == 0 && out->joined) {
		int usable[GM_MAX_DEVICES], nu = 0;
		char ul[GM_MAX_DEVICES * 4];

		gm_format_list(dev, sizeof dev, out->devices, out->ndevices);
		for (int i = 0; i < out->ndevices; i++)
			if (out->usable & (UINT64_C(1) << out->devices[i]))
				usable[nu++] = out->devices[i];
		gm_format_list(ul, sizeof ul, usable, nu);
		fmt(f, GM_EVLINE_MAX,
			 "lease=%016" PRIx64 " dev=%s usable=%s cmd=%s",
			 out->lease_id, dev, ul, a->cmd);
		claim_write(a, "join");
	} else if (rc == 0) {
		gm_format_list(dev, sizeof dev, out->devices, out->ndevices);
		for (int d = 0; d < GM_MAX_DEVICES; d++)
			if (a->ev.rang & (UINT64_C(1) << d))
				rv[nr++] = d;
		gm_format_list(rang, sizeof rang, rv, nr);
		/* The grant happened before the ticket went; `granted` is
		 * our best reading of it, taken as the claim returns. */
		fmt(f, GM_EVLINE_MAX,
			 "lease=%016" PRIx64 " dev=%s ticket=%" PRIu64
			 " want=%d cand=%s arrived=%" PRId64 " waited=%" PRId64
			 " place=%d queued=%d woke=%" PRId64 " rang=%s cmd=%s",
			 out->lease_id, dev, a->tk.seq, a->cfg->want, cand,
			 a->ev.arrived_mono, now - a->ev.arrived_mono,
			 a->ev.wait_mono ? a->ev.ahead : 0, a->ev.wait_mono != 0,
			 a->ev.woke_mono, nr ? rang : "-", a->cmd);
		claim_write(a, "grant");
	} else {
		fmt(f, GM_EVLINE_MAX,
			 "ticket=%" PRIu64 " want=%d cand=%s arrived=%" PRId64
			 " waited=%" PRId64 " why=%s errno=%d cmd=%s",
			 a->tk.seq, a->cfg->want, cand, a->ev.arrived_mono,
			 now - a->ev.arrived_mono,
			 rc == -ETIMEDOUT ? "timeout" : "error", -rc, a->cmd);
		claim_write(a, "giveup");
	}
}

void gm__ev_acquired(struct acq *a, int rc, const struct gm_lease *out)
{
	int saved = errno;

	acquired(a, rc, out);
	/* The exit record made ready after the grant's (or join's) own, so
	 * that this record is as close to the grant as it can be. */
	if (rc == 0 && gm__ev_enabled()) {
		if (!a->ev.pid) {
			a->ev.pid = getpid();
			a->ev.uid = geteuid();
		}
		gm__ev_remember(a->cfg->lock_dir, a->d.user_name, a->jobname,
				out, a->ev.pid, a->ev.uid);
	}
	if (rc == 0 && ex.held && ex.pid == a->ev.pid &&
	    ex.lease_id == out->lease_id) {
		/* Kept: the lease's from now on, for its exit record (none:
		 * that record goes by path; an earlier lease's is closed). */
		gm__untrack(a->ev.fd);
		ex_adopt(a->ev.fd);
		a->ev.fd = -1;
	}
	if (a->ev.fd >= 0) {
		gm__close(a->ev.fd);
		a->ev.fd = -1;
	}
	errno = saved;
}

/* ---- Records of others (the CLI's samples) ------------------------------ */

int gm_event_append(const char *lock_dir, const char *event,
		    const char *fields, char *err, size_t errlen)
{
	return gm_event_append_job(lock_dir, event, "-", fields, err, errlen);
}

int gm_event_append_job(const char *lock_dir, const char *event,
			const char *job, const char *fields, char *err,
			size_t errlen)
{
	struct gm__dir d;
	int rc;

	if (!gm__ev_enabled())
		return 0;
	rc = gm__dir_open(lock_dir, 1, &d, err, errlen);
	if (rc)
		return rc;
	rc = gm__user_dir(&d, gm__mono_ns() + 5 * (int64_t)1000000000, err,
			  errlen);
	if (rc == -ETIMEDOUT)
		rc = gm__fail(rc, err, errlen, "the lock directory's counter stayed locked");
	if (rc == 0)
		gm__ev_write(d.user, event, job, fields);
	gm__dir_close(&d);
	return rc;
}
