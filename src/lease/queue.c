/*
 * queue.c - the queue: the ticket counter, tickets, and who is ahead.
 *
 *   queue/seq     the next ticket number (line 1, "<seq:016x>\n"), and
 *                 the marks (line 2: "L" and 64 x <low:016x>, "\n"), under
 *                 a short write lock
 *   queue/<name>  a ticket: a FIFO, mode 0644, write-locked by its waiter
 *                 while it waits. Name: <seq:016x>.<uid>.<pid>.<want>.
 *                 <mask:016x>.<job> (fixed-width hex first, so that names
 *                 sort like the numbers; the rest lets `gpumutex status`
 *                 describe a waiter without any other file).
 *   queue/<seq:016x>
 *                 the ticket's index: a symbolic link to its name, so that
 *                 ticket N is found without listing the directory (never
 *                 followed: it is read with readlink).
 *
 * queue/ is shared by every user, so anyone can put anything in it. What
 * the protocol makes is recognisable: a ticket is a 0644 FIFO owned by
 * the user its name says, and it appears under its name only complete
 * (locked, with its mode), so anyone can open and probe it. Anything else
 * under a ticket's name is not a waiter and is passed over.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Ticket numbers stay below this, far from where 64 bits would wrap. */
#define GM_SEQ_MAX (UINT64_C(1) << 48)

/* queue/seq: the counter line, then the marks line. */
#define COUNTER_LEN 17
#define MARKS_OFF COUNTER_LEN
#define MARKS_LEN (2 + 16 * GM_MAX_DEVICES)
#define SEQ_FILE_LEN (COUNTER_LEN + MARKS_LEN)

void gm__index_name(char out[GM__INDEX_LEN], uint64_t seq)
{
	snprintf(out, GM__INDEX_LEN, "%016" PRIx64, seq);
}

/* The marks line -> m; 0, or -EINVAL (then m is all zero). */
static int marks_parse(const char *line, struct gm__marks *m)
{
	memset(m, 0, sizeof *m);
	if (line[0] != 'L' || line[MARKS_LEN - 1] != '\n')
		return -EINVAL;
	for (int i = 0; i < GM_MAX_DEVICES; i++) {
		char v[17];
		const char *end;

		memcpy(v, line + 1 + 16 * i, 16);
		v[16] = '\0';
		if (gm_scan_uint(v, 16, GM_SEQ_MAX, &m->low[i], &end) ||
		    end != v + 16) {
			memset(m, 0, sizeof *m);
			return -EINVAL;
		}
	}
	return 0;
}

static void marks_format(char *line, const struct gm__marks *m)
{
	line[0] = 'L';
	for (int i = 0; i < GM_MAX_DEVICES; i++) {
		char v[17];
		snprintf(v, sizeof v, "%016" PRIx64, m->low[i]);
		memcpy(line + 1 + 16 * i, v, 16);
	}
	line[MARKS_LEN - 1] = '\n';
}

/*
 * The marks are read without a lock: the successor a grant wakes reads
 * them on the hand-off path, where waiting for a ticket taker's lock (or
 * sleeping to retry) would cost more than the marks save. The writer
 * replaces the whole line with one pwrite under the counter lock; a read
 * that two consecutive preads agree on is taken, any other is "nothing
 * known", which is always safe.
 */
int gm__marks_read(int cfd, struct gm__marks *m)
{
	char *line = malloc(2 * MARKS_LEN); /* heap: CUDA threads' stacks */
	int rc = -EINVAL;

	memset(m, 0, sizeof *m);
	if (!line)
		return -ENOMEM;
	if (cfd >= 0 &&
	    pread(cfd, line, MARKS_LEN, MARKS_OFF) == MARKS_LEN &&
	    pread(cfd, line + MARKS_LEN, MARKS_LEN, MARKS_OFF) == MARKS_LEN &&
	    memcmp(line, line + MARKS_LEN, MARKS_LEN) == 0)
		rc = marks_parse(line, m);
	free(line);
	return rc;
}

void gm__marks_raise(int cfd, const struct gm__marks *to)
{
	struct { char line[MARKS_LEN]; struct gm__marks m; } *w;
	int locked = 0, change = 0;

	if (cfd < 0)
		return;
	/* Ticket takers hold the lock for a few system calls: a few tries,
	 * yielding in between, never a sleep and never a blocking wait. */
	for (int i = 0; i < 4 && !locked; i++) {
		locked = gm__lock(cfd, F_OFD_SETLK, F_WRLCK, 0) == 0;
		if (!locked)
			sched_yield();
	}
	w = locked ? malloc(sizeof *w) : NULL; /* heap: small stacks */
	if (w && pread(cfd, w->line, MARKS_LEN, MARKS_OFF) == MARKS_LEN &&
	    marks_parse(w->line, &w->m) == 0) {
		for (int i = 0; i < GM_MAX_DEVICES; i++)
			if (to->low[i] > w->m.low[i] && to->low[i] < GM_SEQ_MAX) {
				w->m.low[i] = to->low[i];
				change = 1;
			}
		marks_format(w->line, &w->m);
		/* A failed write changes nothing: the marks only save work. */
		if (change)
			(void)!pwrite(cfd, w->line, MARKS_LEN, MARKS_OFF);
	}
	free(w);
	if (locked)
		gm__lock(cfd, F_OFD_SETLK, F_UNLCK, 0);
}

/*
 * After a grant at the head: low[d] = seq + 1 for each candidate d, by
 * writing just those slots, without the lock (this is the hand-off path).
 * That is safe because the writers of slot d are exactly the granted
 * heads whose candidates include d, and those are granted one after the
 * other in ticket order (first come, first served among intersecting
 * tickets), each writing before it lets go of its ticket: nobody writes a
 * larger value first. (The listing's raise, gm__marks_raise, writes an
 * older live ticket's number, never more than ours.) Readers take only
 * what two reads agree on.
 */
static void marks_passed(int cfd, uint64_t mask, uint64_t seq)
{
	char run[16 * 8 + 1], v[17];

	snprintf(v, sizeof v, "%016" PRIx64, seq + 1);
	for (int i = 0; i < GM_MAX_DEVICES;) {
		int n = 0;

		while (i + n < GM_MAX_DEVICES && n < 8 &&
		       (mask & (UINT64_C(1) << (i + n)))) {
			memcpy(run + 16 * n, v, 16);
			n++;
		}
		if (n && pwrite(cfd, run, (size_t)(16 * n),
				MARKS_OFF + 1 + 16 * i) < 0)
			return; /* the marks only save work */
		i += n ? n : 1;
	}
}

int gm__ticket_parse(const char *name, uint64_t *seq, unsigned *uid,
		     int *pid, int *want, uint64_t *mask, char *job,
		     size_t joblen)
{
	/* Field by field: each is digits only, followed by its dot. The two
	 * hex fields are exactly 16 digits wide. */
	static const struct { int base; uint64_t max; int width; } f[5] = {
		{ 16, UINT64_MAX, 16 }, { 10, UINT32_MAX, 0 },
		{ 10, INT32_MAX, 0 }, { 10, INT32_MAX, 0 },
		{ 16, UINT64_MAX, 16 },
	};
	uint64_t v[5];
	const char *p = name, *end;

	for (int i = 0; i < 5; i++) {
		if (gm_scan_uint(p, f[i].base, f[i].max, &v[i], &end) ||
		    *end != '.' || (f[i].width && end - p != f[i].width))
			return -EINVAL;
		p = end + 1;
	}
	*seq = v[0];
	*uid = (unsigned)v[1];
	*pid = (int)v[2];
	*want = (int)v[3];
	*mask = v[4];
	if (job)
		snprintf(job, joblen, "%s", p);
	return 0;
}

/* What a ticket of `uid` made by the protocol looks like. Our own are
 * also recognised in another mode, so that ones left 0600 by an older
 * version (killed between making and widening them) get removed. */
static int is_ticket(const struct stat *st, unsigned uid)
{
	return S_ISFIFO(st->st_mode) && st->st_uid == uid &&
	       ((st->st_mode & 07777) == 0644 || st->st_uid == geteuid());
}

int gm__ticket_open(int qfd, const char *name, unsigned uid, char *err,
		    size_t errlen)
{
	struct stat st;
	int fd = openat(qfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	int rc;

	if (fd >= 0) {
		if (gm__fstat(fd, &st) < 0) {
			rc = -errno;
			close(fd);
			return gm__fail(rc, err, errlen,
					"cannot stat the ticket queue/%s: %s",
					name, strerror(-rc));
		}
		if (is_ticket(&st, uid))
			return fd;
		close(fd);
		return GM__FOREIGN;
	}
	rc = -errno;
	if (rc == -ENOENT)
		return rc;
	if (gm__fstatat(qfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? -ENOENT :
			gm__fail(rc, err, errlen,
				 "cannot open the ticket queue/%s: %s", name,
				 strerror(-rc));
	/* A real ticket can be opened by anyone (a symlink, a 0600 FIFO or
	 * a 0700 directory cannot). One that looks real but cannot be opened
	 * may be a live waiter: not knowing, we must not pass it. */
	if (!is_ticket(&st, uid) || (st.st_mode & 07777) != 0644)
		return GM__FOREIGN;
	return gm__fail(rc, err, errlen,
			"cannot open the ticket queue/%s (owned by uid %u): %s",
			name, (unsigned)st.st_uid, strerror(-rc));
}

int gm__counter_lock(const struct gm__dir *d, int64_t deadline, char *err,
		     size_t errlen)
{
	int cfd, rc;

	cfd = gm__open(d->queue, "ticket counter queue/seq", "seq", O_RDWR,
		       0, 0666, err, errlen);
	if (cfd < 0)
		return cfd;
	/* Held for a few system calls only, by processes that never wait for
	 * anything while holding it. Without a deadline, block in the kernel,
	 * which queues the waiters. With one, the wait must honour it (anyone
	 * can lock the file, and a holder can be stopped): try, and back off
	 * from 20 us up to 50 ms between tries. This is the one wait that is
	 * not a doorbell: it guards a few system calls. */
	for (long us = 20;; us = us < 50000 ? us * 2 : 50000) {
		struct timespec ts;

		rc = gm__lock(cfd, deadline < 0 ? F_OFD_SETLKW : F_OFD_SETLK,
			      F_WRLCK, 0);
		if (rc != -EAGAIN)
			break;
		if (deadline >= 0 && gm__mono_ns() + us * 1000 > deadline) {
			gm__close(cfd);
			return -ETIMEDOUT; /* the caller says what it waited for */
		}
		ts.tv_sec = 0;
		ts.tv_nsec = us * 1000;
		nanosleep(&ts, NULL);
	}
	if (rc) {
		gm__close(cfd);
		return gm__fail(rc, err, errlen, "cannot lock queue/seq: %s",
				strerror(-rc));
	}
	return cfd;
}

/*
 * The counter is damaged (not a number, out of range, empty): number on
 * from the live tickets instead. A new ticket must come after every live
 * one (dead ones are passed over by everyone anyway), and while we hold
 * the counter lock no honest process makes one. Returns 0 with *seq set,
 * or -errno.
 */
static int counter_recover(const struct gm__dir *d, uint64_t *seq, char *err,
			   size_t errlen)
{
	DIR *dir = gm__listdir(d->queue);
	struct dirent *de;
	uint64_t max = 0;
	char top[256] = "";

	if (!dir)
		return gm__fail(-errno, err, errlen, "cannot read queue/: %s",
				strerror(errno));
	while ((de = readdir(dir)) != NULL) {
		uint64_t s, mask;
		unsigned uid;
		int pid, want, fd, live;

		if (gm__ticket_parse(de->d_name, &s, &uid, &pid, &want, &mask,
				     NULL, 0) < 0 || s >= GM_SEQ_MAX || s <= max)
			continue;
		fd = gm__ticket_open(d->queue, de->d_name, uid, err, errlen);
		if (fd == -ENOENT || fd == GM__FOREIGN)
			continue;
		if (fd < 0) {
			closedir(dir);
			return fd;
		}
		live = gm__probe(fd, F_WRLCK, 0) != F_UNLCK;
		close(fd);
		if (live) {
			max = s;
			snprintf(top, sizeof top, "%s", de->d_name);
		}
	}
	closedir(dir);
	if (max + 1 >= GM_SEQ_MAX)
		return gm__fail(-EOVERFLOW, err, errlen,
				"no ticket number is left after the live ticket queue/%s (someone set its number near the limit); it must end first",
				top);
	*seq = max + 1;
	return 0;
}

/* Read the counter and the marks (we hold the lock). *rewrite is set when
 * the file must be rewritten whole, not only its number updated: marks
 * that are missing (a new file, or one an older version rewrote) or
 * damaged start again from nothing known, which is always safe. */
static int counter_read(const struct gm__dir *d, int cfd, uint64_t *seq,
			struct gm__marks *m, char *buf, int *rewrite,
			char *err, size_t errlen)
{
	ssize_t n = pread(cfd, buf, SEQ_FILE_LEN + 1, 0);

	memset(m, 0, sizeof *m);
	if (n < 0)
		return gm__fail(-errno, err, errlen, "cannot read queue/seq: %s",
				strerror(errno));
	*rewrite = n != SEQ_FILE_LEN ||
		   marks_parse(buf + MARKS_OFF, m) != 0;
	if (n >= COUNTER_LEN && buf[16] == '\n') {
		buf[16] = '\0';
		if (gm_parse_uint(buf, 16, GM_SEQ_MAX - 1, seq) == 0 &&
		    strlen(buf) == 16 && *seq > 0)
			return 0;
	}
	/* Empty (new) or damaged: any user can write to it. */
	*rewrite = 1;
	memset(m, 0, sizeof *m);
	return counter_recover(d, seq, err, errlen);
}

/* Make a ticket FIFO complete under a temporary name: 0644 and
 * write-locked. Returns its descriptor, or -errno. */
static int ticket_fifo(int qfd, char *tmp, size_t tmplen)
{
	int fd, rc;

	for (int tries = 0;; tries++) {
		gm__tmp_name(tmp, tmplen);
		if (mkfifoat(qfd, tmp, 0600) == 0)
			break;
		if (errno != EEXIST || tries >= 8)
			return -errno;
	}
	fd = gm__track(openat(qfd, tmp, O_RDWR | O_NONBLOCK | O_NOFOLLOW |
			      O_CLOEXEC));
	if (fd < 0) {
		rc = -errno;
		unlinkat(qfd, tmp, 0);
		return rc;
	}
	rc = fchmod(fd, 0644) < 0 ? -errno : gm__lock(fd, F_OFD_SETLK, F_WRLCK, 0);
	if (rc) {
		gm__close(fd);
		unlinkat(qfd, tmp, 0);
		return rc;
	}
	return fd;
}

/* Give the ticket (its FIFO `*fd`, under temporary name `tmp`) its name,
 * numbered from *seq on: the first number whose name is free. 0 or -errno. */
static int ticket_link(const struct gm__dir *d, const struct gm_config *cfg,
		       uint64_t mask, int *fd, char *tmp, size_t tmplen,
		       uint64_t *seq, struct gm__ticket *t)
{
	for (int tries = 0, lost = 0;;) {
		snprintf(t->name, sizeof t->name,
			 "%016" PRIx64 ".%u.%d.%d.%016" PRIx64 ".%s", *seq,
			 (unsigned)geteuid(), (int)getpid(), cfg->want, mask,
			 cfg->job);
		if (linkat(d->queue, tmp, d->queue, t->name, 0) == 0) {
			/* The index makes ticket N findable without a listing
			 * (ahead.c). Its number must be free too: a name left
			 * there (planted, or by a rewound counter) means the
			 * number is taken. */
			char index[GM__INDEX_LEN];

			gm__index_name(index, *seq);
			if (symlinkat(t->name, d->queue, index) == 0)
				return 0;
			unlinkat(d->queue, t->name, 0);
		}
		if (errno == EEXIST && ++tries < 1000) {
			++*seq; /* ours from before: the counter was rewound */
			continue;
		}
		if (errno != ENOENT || ++lost > 3)
			return -errno;
		/* Our temporary name was tidied away while we waited for the
		 * counter (records.c, cleanup_tmp): make the FIFO again. */
		gm__close(*fd);
		*fd = ticket_fifo(d->queue, tmp, tmplen);
		if (*fd < 0)
			return *fd;
	}
}

int gm__ticket_take(const struct gm__dir *d, const struct gm_config *cfg,
		    uint64_t mask, int64_t deadline, struct gm__ticket *t,
		    char *err, size_t errlen)
{
	char tmp[64], *buf;
	int cfd, fd, rc, rewrite = 0;
	uint64_t seq = 1;
	/* On the heap: CUDA threads' small stacks. */
	struct gm__marks *m = malloc(sizeof *m + SEQ_FILE_LEN + 1);
	ssize_t n;

	if (!m)
		return gm__fail(-ENOMEM, err, errlen, "out of memory");
	buf = (char *)(m + 1);

	t->fd = t->cfd = -1;
	t->seq = 0;
	t->marks_ok = 0;
	/* The ticket is made whole (mode, lock) before it has a name, and
	 * before the counter lock, which is then held only to number it:
	 * whoever finds it under its name can open it, and no crash leaves
	 * a ticket that others cannot read. */
	fd = ticket_fifo(d->queue, tmp, sizeof tmp);
	if (fd < 0) {
		free(m);
		return gm__fail(fd, err, errlen,
				"cannot make a ticket in queue/: %s",
				strerror(-fd));
	}
	cfd = gm__counter_lock(d, deadline, err, errlen);
	if (cfd < 0) {
		free(m);
		gm__close(fd);
		unlinkat(d->queue, tmp, 0);
		return cfd;
	}
	GM_CRASHPOINT("counter-locked");
	rc = counter_read(d, cfd, &seq, m, buf, &rewrite, err, errlen);
	if (rc == 0) {
		rc = ticket_link(d, cfg, mask, &fd, tmp, sizeof tmp, &seq, t);
		if (rc)
			gm__fail(rc, err, errlen,
				 "cannot make a ticket in queue/: %s",
				 strerror(-rc));
	}
	if (rc == 0) {
		t->fd = fd;
		t->seq = seq;
		fd = -1;
		GM_CRASHPOINT("ticket-made");
		n = snprintf(buf, SEQ_FILE_LEN + 1, "%016" PRIx64 "\n", seq + 1);
		if (rewrite) {
			marks_format(buf + MARKS_OFF, m);
			n = SEQ_FILE_LEN;
		}
		errno = 0;
		if (pwrite(cfd, buf, (size_t)n, 0) != n ||
		    (rewrite && ftruncate(cfd, n) < 0)) {
			/* Without the new value the next taker would get our
			 * number too: give the ticket back and fail. */
			rc = errno ? -errno : -EIO;
			gm__ticket_release(d, t, 0);
			gm__fail(rc, err, errlen, "cannot update queue/seq: %s",
				 strerror(-rc));
		}
	}
	if (rc == 0) {
		/* Kept (unlocked) while we wait: the marks are read and raised
		 * through it, without opening the file each time. */
		gm__lock(cfd, F_OFD_SETLK, F_UNLCK, 0);
		t->cfd = cfd;
		t->marks_ok = 1; /* the file has its marks line now */
	} else {
		gm__close(cfd); /* also releases the counter lock */
	}
	free(m);
	if (fd >= 0)
		gm__close(fd);
	unlinkat(d->queue, tmp, 0);
	return rc;
}

/*
 * One number can belong to two tickets: a claim killed between its
 * ticket's name and its index link leaves a dead ticket N without an
 * index and the counter still at N, so the next claim's ticket is
 * numbered N too and gets the index queue/<N>. Whoever removes the dead
 * one must leave the live one's index, or every walk passes that waiter
 * as gone. So an index is removed only while it names the ticket being
 * removed. The link cannot be replaced between the readlink and the
 * unlink: every caller knows that the counter has passed `seq` (it is
 * below the caller's own ticket, or below the counter it read), so no
 * claim makes queue/<seq> again.
 */
void gm__index_unlink(const struct gm__dir *d, const char *name, uint64_t seq)
{
	char index[GM__INDEX_LEN], link[256];
	size_t len = strlen(name);
	ssize_t n;

	gm__index_name(index, seq);
	n = readlinkat(d->queue, index, link, sizeof link);
	if (n >= 0 && (size_t)n == len && len < sizeof link &&
	    memcmp(link, name, len) == 0)
		unlinkat(d->queue, index, 0);
}

void gm__ticket_unlink(const struct gm__dir *d, const char *name,
		       uint64_t seq)
{
	/* The name first: an index whose ticket is gone reads as gone. */
	unlinkat(d->queue, name, 0);
	gm__index_unlink(d, name, seq);
}

void gm__ticket_release(const struct gm__dir *d, struct gm__ticket *t,
			uint64_t granted)
{
	if (t->fd < 0) {
		if (t->cfd >= 0)
			gm__close(t->cfd);
		t->cfd = -1;
		return;
	}
	if (granted && t->cfd >= 0 && t->marks_ok)
		marks_passed(t->cfd, granted, t->seq);
	/* Unlink first: whoever wakes up at our close rescans the queue and
	 * must not find us there. The index is ours (ticket_link made it,
	 * and others remove only an index naming the ticket they remove):
	 * no readlink on the hand-off path. */
	unlinkat(d->queue, t->name, 0);
	{
		char index[GM__INDEX_LEN];
		gm__index_name(index, t->seq);
		unlinkat(d->queue, index, 0);
	}
	gm__unlock_all(t->fd);
	gm__close(t->fd);
	t->fd = -1;
	if (t->cfd >= 0)
		gm__close(t->cfd);
	t->cfd = -1;
}

/* Under the lock tried a few times, never waited for: a sweep is best
 * effort, and is skipped when this says 0. */
uint64_t gm__counter_now(const struct gm__dir *d)
{
	char buf[COUNTER_LEN + 1];
	uint64_t seq = 0;
	int cfd, locked = 0;

	cfd = gm__open(d->queue, "ticket counter queue/seq", "seq", O_RDWR, 0,
		       0, NULL, 0);
	if (cfd < 0)
		return 0;
	for (int i = 0; i < 4 && !locked; i++) {
		locked = gm__lock(cfd, F_OFD_SETLK, F_WRLCK, 0) == 0;
		if (!locked)
			sched_yield();
	}
	if (locked && pread(cfd, buf, COUNTER_LEN, 0) == COUNTER_LEN &&
	    buf[16] == '\n') {
		buf[16] = '\0';
		if (gm_parse_uint(buf, 16, GM_SEQ_MAX - 1, &seq) != 0)
			seq = 0;
	}
	gm__close(cfd); /* also releases the lock */
	return seq;
}
