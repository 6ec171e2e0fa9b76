/*
 * lease.c - take or join a job's lease: the job lock, the queue, the grant.
 *
 * The protocol is described in docs/design.md; the comments here say why
 * each step is in the order it is. In short:
 *   job/<uid>/             this user's job files (records.c, gm__user_dir):
 *   job/<uid>/<job>        FIFO; its write lock serialises the processes
 *                          of one job, so two arriving together make one
 *                          lease.
 *   job/<uid>/<job>.lease  the job's lease record (who, which devices).
 *   queue/seq              the ticket counter, under a short write lock.
 *   queue/<ticket name>    FIFO; write-locked by its waiter while it waits
 *                          (queue.c).
 *   dev/<index>            FIFO; byte 0 read-locked by every member of the
 *                          lease holding the device, byte 1+L by members
 *                          of lease L.
 * A waiter sleeps in poll() on the read end of the FIFO it waits for: the
 * kernel reports POLLHUP when the last writer closes it, and it drops a
 * description's locks before it drops its writer count, so the wake-up
 * comes only once the lock is really gone (docs/design.md, "Wake-ups").
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

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
};

static void notify_wait(struct acq *a, int ahead, int head, int job_busy)
{
	struct gm_wait_info info;

	if (a->waited)
		return;
	a->waited = 1;
	/* About to sleep anyway: tidy this user's dead jobs now rather than
	 * after the grant, where it would lengthen the hand-off. */
	if (!a->cleaned) {
		a->cleaned = 1;
		if (a->tk.seq % GM_CLEANUP_EVERY == 0)
			gm__cleanup_jobs(&a->d, a->jobname);
	}
	/* With no time to wait, the process gives up at once instead: "waits
	 * for" would be the wrong thing to tell (the timeout message follows
	 * right away). */
	if (!a->hooks || !a->hooks->on_wait || a->cfg->timeout_s == 0)
		return;
	info.ticket = a->tk.seq;
	info.ahead = ahead;
	info.head = head;
	info.job_busy = job_busy;
	a->hooks->on_wait(a->hooks->arg, &info);
}

static int timed_out(struct acq *a)
{
	const struct gm_config *c = a->cfg;
	char list[GM_MAX_DEVICES * 4] = "";
	size_t off = 0;

	for (int i = 0; i < c->ndevices; i++)
		off += (size_t)snprintf(list + off, sizeof list - off, "%s%d",
					i ? "," : "", c->devices[i]);
	if (c->timeout_s == 0)
		return gm__fail(-ETIMEDOUT, a->err, a->errlen,
				"could not get %d of GPUs %s at once, and GPUMUTEX_TIMEOUT=0 says not to wait",
				c->want, list);
	return gm__fail(-ETIMEDOUT, a->err, a->errlen,
			"gave up after GPUMUTEX_TIMEOUT=%g s waiting for %d of GPUs %s",
			c->timeout_s, c->want, list);
}

/* ---- The job lock ------------------------------------------------------ */

/*
 * Take the write lock on job/<uid>/<job>. While another process of the
 * job holds it (it is claiming, or checking the lease), sleep until its
 * holder closes the FIFO, then try again.
 */
static int job_lock(struct acq *a)
{
	char what[GM_JOB_MAX + 160];

	snprintf(what, sizeof what, "job file job/%s/%s", a->d.user_name,
		 a->jobname);
	for (;;) {
		int bell, fd, rc;
		struct pollfd p;

		/* The doorbell comes first: opened while the holder's writer is
		 * open, it reports the holder's last close. */
		bell = gm__open(a->d.user, what, a->jobname, O_RDONLY, 1, 0600,
				a->err, a->errlen);
		if (bell < 0)
			return bell;
		fd = gm__open(a->d.user, what, a->jobname, O_RDWR, 1, 0600,
			      a->err, a->errlen);
		if (fd < 0) {
			gm__close(bell);
			return fd;
		}
		rc = gm__lock(fd, F_OFD_SETLK, F_WRLCK, 0);
		if (rc == 0) {
			gm__close(bell);
			/* A same-user cleaner may have unlinked a dead job's
			 * FIFO between our open and our lock. */
			if (gm__still_linked(a->d.user, a->jobname, fd)) {
				a->jobfd = fd;
				GM_CRASHPOINT("job-locked");
				return 0;
			}
			gm__close(fd);
			continue;
		}
		gm__close(fd);
		if (rc != -EAGAIN) {
			gm__close(bell);
			return gm__fail(rc, a->err, a->errlen,
					"cannot lock %s: %s", what, strerror(-rc));
		}
		notify_wait(a, 0, 0, 1);
		p.fd = bell;
		rc = gm__wait(&p, 1, a->deadline, a->cfg->recheck_ms);
		gm__close(bell);
		if (rc == -ETIMEDOUT)
			return timed_out(a);
		if (rc)
			return gm__fail(rc, a->err, a->errlen, "poll: %s",
					strerror(-rc));
	}
}

/* ---- The lease record -------------------------------------------------- */

struct record {
	uint64_t lease;
	int devices[GM_MAX_DEVICES];
	int ndevices;
};

/* Our job's record, if there is one we can trust: a regular file of ours.
 * Returns 0, -ENOENT when there is none (or it is not ours or not valid:
 * then no lease of ours can be described by it), or another -errno when
 * it could not be read. */
static int record_read(struct acq *a, struct record *r)
{
	char name[GM_JOB_MAX + 48], *buf;
	uid_t owner;
	int rc;

	snprintf(name, sizeof name, "%s.lease", a->jobname);
	rc = gm__read_record(a->d.user, name, &buf, &owner);
	if (rc == -ENOENT || rc == -EINVAL)
		return -ENOENT;
	if (rc)
		return rc;
	rc = owner != geteuid() ||
	     gm__record_parse(buf, &r->lease, r->devices, &r->ndevices) != 0 ?
		-ENOENT : 0;
	free(buf);
	return rc;
}

/* Make the record's temporary file (empty, mode 0644) and return its
 * descriptor, or -1 with errno set. Needs the job lock. */
static int record_prepare(struct acq *a)
{
	char tmp[GM_JOB_MAX + 48];
	int fd;

	snprintf(tmp, sizeof tmp, "%s.lease.tmp", a->jobname);
	unlinkat(a->d.user, tmp, 0);
	fd = gm__track(openat(a->d.user, tmp,
			      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			      0644));
	if (fd >= 0 && fchmod(fd, 0644) < 0) {
		int e = errno;
		gm__close(fd);
		unlinkat(a->d.user, tmp, 0);
		errno = e;
		return -1;
	}
	return fd;
}

/* A written record's size limit (a full one is under 900 bytes). */
#define RECORD_WRITE_MAX 2048

static int record_write(struct acq *a, const struct gm_lease *l)
{
	char name[GM_JOB_MAX + 48], tmp[GM_JOB_MAX + 48];
	char list[GM_MAX_DEVICES * 4] = "";
	char cand[GM_MAX_DEVICES * 4] = "";
	/* On the heap: this runs on the caller's stack, which for cuInit can
	 * be a 16 KiB thread stack. */
	char *buf = malloc(RECORD_WRITE_MAX);
	size_t off = 0;
	int fd, len, rc = 0;
	pid_t pid = getpid();

	errno = 0;
	snprintf(name, sizeof name, "%s.lease", a->jobname);
	snprintf(tmp, sizeof tmp, "%s.lease.tmp", a->jobname);
	if (!buf) {
		errno = ENOMEM;
		goto fail;
	}
	for (int i = 0; i < l->ndevices; i++)
		off += (size_t)snprintf(list + off, sizeof list - off, "%s%d",
					i ? "," : "", l->devices[i]);
	off = 0;
	for (int i = 0; i < a->cfg->ndevices; i++)
		off += (size_t)snprintf(cand + off, sizeof cand - off, "%s%d",
					i ? "," : "", a->cfg->devices[i]);
	/* candidates= is for `gpumutex status` only (which GPUs this job
	 * manages); nothing that decides about the lease reads it. */
	len = snprintf(buf, RECORD_WRITE_MAX,
		       "gpumutex-lease 1\nlease=%" PRIx64 "\njob=%s\nuid=%u\n"
		       "devices=%s\ncandidates=%s\nstart=%" PRId64 "\npid=%d\n"
		       "cmd=%s\nmember=%d\n",
		       l->lease_id, a->cfg->job, (unsigned)geteuid(), list, cand,
		       gm__real_ns(), (int)pid, a->cmd, (int)pid);
	/* Written whole under a temporary name, then renamed, so a reader
	 * (gpumutex status) never sees half a record. We hold the job lock,
	 * so nobody else writes this job's temporary file. It was made before
	 * waiting (record_prepare): creating a file is slow on some
	 * filesystems, and this is the hand-off path. */
	fd = a->recfd;
	a->recfd = -1;
	if (fd < 0) {
		fd = record_prepare(a);
		if (fd < 0)
			goto fail;
	}
	if (write(fd, buf, (size_t)len) != len) {
		if (errno == 0)
			errno = EIO;
		gm__close(fd);
		goto fail;
	}
	gm__close(fd);
	if (renameat(a->d.user, tmp, a->d.user, name) < 0)
		goto fail;
	free(buf);
	return 0;
fail:
	rc = errno ? -errno : -EIO;
	free(buf);
	unlinkat(a->d.user, tmp, 0);
	return gm__fail(rc, a->err, a->errlen,
			"cannot write lease record job/%s/%s: %s",
			a->d.user_name, name, strerror(-rc));
}

static void record_add_member(struct acq *a)
{
	char name[GM_JOB_MAX + 48], line[32];
	int fd, len;

	snprintf(name, sizeof name, "%s.lease", a->jobname);
	fd = openat(a->d.user, name,
		    O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return; /* the record is for display; the locks are the lease */
	{
		/* Bounded: past half the readable size, members go unlisted. */
		struct stat st;
		if (gm__fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		    st.st_size > GM_RECORD_MAX * 3 / 8) {
			gm__close(fd);
			return;
		}
	}
	len = snprintf(line, sizeof line, "member=%d\n", (int)getpid());
	if (write(fd, line, (size_t)len) < 0) {
		/* nothing to do: status just will not list this member */
	}
	gm__close(fd);
}

/* ---- Joining ----------------------------------------------------------- */

static void drop(int *fds, int n)
{
	for (int i = 0; i < n; i++) {
		if (fds[i] < 0)
			continue;
		/* Unlock every byte first: a child forked meanwhile by
		 * another thread would share the description, and must not
		 * keep a lease's name byte without its device byte. */
		gm__unlock_all(fds[i]);
		gm__close(fds[i]);
		fds[i] = -1;
	}
}

/*
 * Become a member of lease r->lease if it is still alive. For each device:
 * take a read lock on byte 0 (this keeps any new claimant out from now
 * on), then ask whether another description holds byte 1+L. If one does,
 * a member of L held the device at a moment when we already held byte 0,
 * so the device has belonged to L without a break, and taking byte 1+L
 * ourselves makes us a member. If any device fails, the lease has ended
 * (or is ending) and we let go of everything.
 * Returns 1 when joined, 0 when the lease is gone, -errno on error.
 */
static int join(struct acq *a, const struct record *r, struct gm_lease *out)
{
	int fds[GM_MAX_DEVICES], n = 0, alive = r->ndevices > 0;
	const int64_t off = GM_LEASE_OFF + (int64_t)r->lease;

	for (int i = 0; i < r->ndevices && alive; i++) {
		int fd = gm__dev_open(&a->d, r->devices[i], O_RDWR, a->err,
				      a->errlen);
		if (fd < 0) {
			drop(fds, n);
			return fd;
		}
		fds[n++] = fd;
		alive = gm__lock(fd, F_OFD_SETLK, F_RDLCK, 0) == 0;
		GM_CRASHPOINT("join-device-locked");
		alive = alive && gm__probe(fd, F_WRLCK, off) == F_RDLCK;
		GM_CRASHPOINT("join-checked");
		alive = alive && gm__lock(fd, F_OFD_SETLK, F_RDLCK, off) == 0;
	}
	if (!alive) {
		drop(fds, n);
		return 0;
	}
	memset(out, 0, sizeof *out);
	out->ndevices = n;
	for (int i = 0; i < n; i++) {
		out->devices[i] = r->devices[i];
		out->fds[i] = fds[i];
	}
	out->lease_id = r->lease;
	out->joined = 1;
	return 1;
}

/* ---- Devices ----------------------------------------------------------- */

/*
 * At the head of the line: try to write-lock cfg->want candidate devices
 * without blocking. Returns 1 with the lease's descriptors in out->fds,
 * 0 when too few are free (with doorbells of the busy ones in bells[]),
 * or -errno.
 */
static int try_devices(struct acq *a, struct gm_lease *out,
		       struct pollfd *bells, int *belldev, int *nbells,
		       int with_bells)
{
	const struct gm_config *c = a->cfg;
	int held[GM_MAX_DEVICES], nheld = 0, heldidx[GM_MAX_DEVICES];

	*nbells = 0;
	for (int i = 0; i < c->ndevices && nheld < c->want; i++) {
		int bell = -1, fd, rc;

		/* Doorbell before the attempt, so a release between the
		 * attempt and the poll still rings. Only an attempt we may
		 * sleep after needs one. */
		if (with_bells) {
			bell = gm__dev_open(&a->d, c->devices[i], O_RDONLY,
					    a->err, a->errlen);
			if (bell < 0)
				goto fail_bell;
		}
		fd = gm__dev_open(&a->d, c->devices[i], O_RDWR, a->err,
				  a->errlen);
		if (fd < 0) {
			if (bell >= 0)
				gm__close(bell);
			bell = fd;
			goto fail_bell;
		}
		rc = gm__lock(fd, F_OFD_SETLK, F_WRLCK, 0);
		if (rc == 0) {
			if (bell >= 0)
				gm__close(bell);
			heldidx[nheld] = c->devices[i];
			held[nheld++] = fd;
			if (nheld < c->want)
				GM_CRASHPOINT("partial-devices");
			continue;
		}
		gm__close(fd);
		if (rc != -EAGAIN) {
			if (bell >= 0)
				gm__close(bell);
			drop(held, nheld);
			for (int j = 0; j < *nbells; j++)
				gm__close(bells[j].fd);
			*nbells = 0;
			return gm__fail(rc, a->err, a->errlen,
					"cannot lock device file dev/%d: %s",
					c->devices[i], strerror(-rc));
		}
		if (bell >= 0) {
			belldev[*nbells] = c->devices[i];
			bells[(*nbells)++].fd = bell;
		}
		continue;
fail_bell:
		drop(held, nheld);
		for (int j = 0; j < *nbells; j++)
			gm__close(bells[j].fd);
		*nbells = 0;
		return bell;
	}
	if (nheld < c->want) {
		/* Never keep a partial set while waiting (docs/design.md). */
		drop(held, nheld);
		return 0;
	}
	for (int j = 0; j < *nbells; j++)
		gm__close(bells[j].fd);
	*nbells = 0;
	memset(out, 0, sizeof *out);
	out->ndevices = nheld;
	for (int i = 0; i < nheld; i++) {
		out->devices[i] = heldidx[i];
		out->fds[i] = held[i];
	}
	return 1;
}

/*
 * Turn the write-locked devices into lease L: take byte 1+L on each (the
 * lease's name, for joiners), write the record, then convert byte 0 from
 * write to read (atomic for OFD locks: no moment with the device unlocked).
 */
static int grant(struct acq *a, struct gm_lease *l)
{
	int rc;

	/* Random, not the ticket number: the counter is a shared file that a
	 * rewind (or damage) could make repeat, and a repeated lease id would
	 * let a late process of an old lease pass for a member of a new one. */
	l->lease_id = gm__random_u64() & GM_LEASE_MAX;
	if (l->lease_id == 0)
		l->lease_id = 1;
	l->ticket = a->tk.seq;
	/* Sort devices and descriptors together, for stable output. */
	for (int i = 1; i < l->ndevices; i++)
		for (int j = i; j > 0 && l->devices[j - 1] > l->devices[j]; j--) {
			int t = l->devices[j];
			l->devices[j] = l->devices[j - 1];
			l->devices[j - 1] = t;
			t = l->fds[j];
			l->fds[j] = l->fds[j - 1];
			l->fds[j - 1] = t;
		}
	for (int i = 0; i < l->ndevices; i++) {
		rc = gm__lock(l->fds[i], F_OFD_SETLK, F_RDLCK,
			      GM_LEASE_OFF + (int64_t)l->lease_id);
		if (rc)
			return gm__fail(rc, a->err, a->errlen,
					"cannot lock dev/%d: %s", l->devices[i],
					strerror(-rc));
	}
	GM_CRASHPOINT("before-record");
	rc = record_write(a, l);
	if (rc)
		return rc;
	GM_CRASHPOINT("after-record");
	for (int i = 0; i < l->ndevices; i++) {
		rc = gm__lock(l->fds[i], F_OFD_SETLK, F_RDLCK, 0);
		if (rc)
			return gm__fail(rc, a->err, a->errlen,
					"cannot convert the lock on dev/%d: %s",
					l->devices[i], strerror(-rc));
	}
	return 0;
}

/*
 * Wait in line, then for devices. Returns 0 with `out` filled, or -errno.
 */
static int claim(struct acq *a, struct gm_lease *out)
{
	struct pollfd *bells = a->bells;
	int rc, nbells, ahead, *belldev = a->belldev;
	uint64_t rang = 0, suspect = 0, stale = 0;

	/* Prepare now what the record needs, not on the hand-off path. */
	gm__cmdline(getpid(), a->cmd, sizeof a->cmd);
	a->recfd = record_prepare(a);
	if (a->recfd < 0)
		/* Now, not after waiting our turn: the record must be
		 * writable for the grant. (Only we can make files in our
		 * directory, so this takes an error like ENOSPC.) */
		return gm__fail(-errno, a->err, a->errlen,
				"cannot write lease record job/%s/%s.lease.tmp: %s",
				a->d.user_name, a->jobname, strerror(errno));
	/* Make every candidate's device file now, not only the ones tried,
	 * so `gpumutex status` lists the whole managed set from the start. */
	for (int i = 0; i < a->cfg->ndevices; i++) {
		int fd = gm__dev_open(&a->d, a->cfg->devices[i], O_RDONLY,
				      a->err, a->errlen);
		if (fd < 0)
			return fd;
		gm__close(fd);
	}
	rc = gm__ticket_take(&a->d, a->cfg, a->mask, a->deadline, &a->tk,
			     a->err, a->errlen);
	if (rc == -ETIMEDOUT)
		return timed_out(a);
	if (rc)
		return rc;
	for (;;) {
		int pred = gm__ticket_ahead(&a->d, &a->tk, a->mask, &ahead,
					    a->err, a->errlen);
		struct pollfd p;

		if (pred < -1)
			return pred;
		if (pred >= 0) {
			notify_wait(a, ahead, 0, 0);
			GM_CRASHPOINT("queued");
			p.fd = pred;
			rc = gm__wait(&p, 1, a->deadline, a->cfg->recheck_ms);
			gm__close(pred);
			if (rc == -ETIMEDOUT)
				return timed_out(a);
			if (rc)
				return rc;
			continue;
		}
		/* At the head: nobody conflicting is older, and nobody can
		 * become older later, since tickets only grow. */
		for (;;) {
			int n = 0, timer = a->cfg->recheck_ms;

			/* First without doorbells: just after a wake-up (or
			 * on arrival) the devices are usually free, and the
			 * doorbells would cost two system calls per device on
			 * the hand-off path. Only if that fails, again with
			 * doorbells, before sleeping. */
			rc = try_devices(a, out, bells, belldev, &nbells, 0);
			if (rc == 0)
				rc = try_devices(a, out, bells, belldev, &nbells, 1);
			if (rc < 0)
				return rc;
			if (rc == 1)
				break;
			/* A doorbell that rang while its device is still locked
			 * means a lock without a writer (someone locked the
			 * device through a read-only descriptor): its doorbell
			 * would ring for ever. Watch such a device by timer. */
			/* Twice in a row, so that a transient reader racing
			 * with the hand-off (a late joiner of a dead lease)
			 * is not mistaken for one. */
			suspect &= rang;
			for (int j = 0; j < nbells; j++) {
				uint64_t bit = UINT64_C(1) << belldev[j];
				if (rang & bit & suspect)
					stale |= bit;
				else if (rang & bit)
					suspect |= bit;
				if (stale & bit)
					gm__close(bells[j].fd);
				else
					bells[n++] = bells[j], belldev[n - 1] = belldev[j];
			}
			if (stale && (timer <= 0 || timer > 1000))
				timer = 1000;
			notify_wait(a, 0, 1, 0);
			GM_CRASHPOINT("head-waiting");
			rc = gm__wait(bells, n, a->deadline, timer);
			rang = 0;
			for (int j = 0; j < n; j++) {
				if (bells[j].revents & POLLHUP)
					rang |= UINT64_C(1) << belldev[j];
				gm__close(bells[j].fd);
			}
			if (rc == -ETIMEDOUT)
				return timed_out(a);
			if (rc)
				return rc;
		}
		rc = grant(a, out);
		if (rc) {
			drop(out->fds, out->ndevices);
			return rc;
		}
		return 0;
	}
}

/*
 * After a grant: job/<user>/held.<d> holds "<job>.lease\n" for each device,
 * so that a waiter's message finds who holds its GPUs without listing
 * every job (state.c, gm_state_read_holders). Only a description: it is
 * believed only where the record's lease holds the device. A regular file
 * rewritten in place rather than a link renamed into place: this is the
 * hand-off path, and changing a directory costs far more than a write.
 * Written while we hold the devices, so the holders of one device write
 * one after the other; a reader that meets a half-written name finds no
 * such record and says less.
 */
static void holder_files(struct acq *a, const struct gm_lease *l)
{
	char text[GM_JOB_MAX + 16], name[32];
	/* A shorter name over a longer one leaves a tail after the newline,
	 * which readers ignore: no truncation needed. */
	int len = snprintf(text, sizeof text, "%s.lease\n", a->jobname);

	for (int i = 0; i < l->ndevices; i++) {
		int fd;

		snprintf(name, sizeof name, GM_HELD_FILE "%d", l->devices[i]);
		fd = openat(a->d.user, name, O_WRONLY | O_CREAT | O_NOFOLLOW |
			    O_NONBLOCK | O_CLOEXEC, 0644);
		if (fd < 0)
			continue;
		/* Say nothing rather than half (a failed truncate leaves a
		 * name that no record matches, which says nothing either). */
		if (pwrite(fd, text, (size_t)len, 0) != len)
			(void)!ftruncate(fd, 0);
		close(fd);
	}
}

int gm_lease_acquire(const struct gm_config *cfg,
		     const struct gm_acquire_hooks *hooks,
		     struct gm_lease *out, char *err, size_t errlen)
{
	struct acq *a;
	struct record r;
	uint64_t mask = 0;
	int rc, dead = 0;

	memset(out, 0, sizeof *out);
	if (err && errlen)
		err[0] = '\0';

	if (cfg->ndevices < 1 || cfg->ndevices > GM_MAX_DEVICES ||
	    cfg->want < 1 || cfg->want > cfg->ndevices)
		return gm__fail(-EINVAL, err, errlen,
				"asked for %d of %d GPUs", cfg->want,
				cfg->ndevices);
	for (int i = 0; i < cfg->ndevices; i++) {
		if (cfg->devices[i] < 0 || cfg->devices[i] >= GM_MAX_DEVICES ||
		    (mask & (UINT64_C(1) << cfg->devices[i])))
			return gm__fail(-EINVAL, err, errlen,
					"bad device list (index %d)",
					cfg->devices[i]);
		mask |= UINT64_C(1) << cfg->devices[i];
	}
	rc = gm_job_check("GPUMUTEX_JOB", cfg->job, err, errlen);
	if (rc)
		return rc;
	a = calloc(1, sizeof *a);
	if (!a)
		return gm__fail(-ENOMEM, err, errlen, "out of memory");
	a->cfg = cfg;
	a->hooks = hooks;
	a->mask = mask;
	a->jobfd = a->tk.fd = a->tk.cfd = a->recfd = -1;
	a->err = err;
	a->errlen = errlen;
	a->deadline = cfg->timeout_s < 0 ? -1 :
		gm__mono_ns() + (int64_t)(cfg->timeout_s * 1e9);
	snprintf(a->jobname, sizeof a->jobname, "%s", cfg->job);

	rc = gm__dir_open(cfg->lock_dir, 1, &a->d, err, errlen);
	if (rc) {
		free(a);
		return rc;
	}
	rc = gm__user_dir(&a->d, a->deadline, err, errlen);
	if (rc == -ETIMEDOUT)
		rc = timed_out(a);
	if (rc)
		goto out;
	rc = job_lock(a);
	if (rc)
		goto out;
	rc = record_read(a, &r);
	if (rc == 0) {
		rc = join(a, &r, out);
		if (rc == 1) {
			/* The lease is alive, so it is the job's and cannot
			 * change: a process it does not fit gets nothing (a
			 * claim would wait for its own job's GPUs). */
			rc = gm_join_check(cfg, out->devices, out->ndevices,
					   &out->usable, err, errlen);
			if (rc) {
				drop(out->fds, out->ndevices);
				goto out;
			}
			record_add_member(a);
			goto out;
		}
		if (rc < 0)
			goto out; /* not known to be dead: touch nothing */
	} else if (rc != -ENOENT) {
		rc = gm__fail(rc, err, errlen, "cannot read the lease record of job %s: %s",
			      cfg->job, strerror(-rc));
		goto out;
	}
	/* Known now: the job has no live lease, and none can appear while we
	 * hold its job lock. */
	dead = 1;
	rc = claim(a, out);
	for (int i = 0; rc == 0 && i < out->ndevices; i++)
		out->usable |= UINT64_C(1) << out->devices[i];
	if (rc == 0 && hooks && hooks->on_granted)
		hooks->on_granted(hooks->arg, out);
	if (rc == 0)
		GM_CRASHPOINT("granted");
out:
	/* Order matters: the ticket goes first (our successor may start),
	 * then the job lock (our job's other processes may join). A granted
	 * claim was at the head: it tells the queue's marks so. */
	gm__ticket_release(&a->d, &a->tk,
			   rc == 0 && !out->joined ? a->mask : 0);
	if (rc == 0 && !out->joined)
		holder_files(a, out);
	if (a->recfd >= 0) {
		/* Not used (we gave up, or the grant failed before writing). */
		char tmp[GM_JOB_MAX + 48];
		gm__close(a->recfd);
		snprintf(tmp, sizeof tmp, "%s.lease.tmp", a->jobname);
		unlinkat(a->d.user, tmp, 0);
	}
	if (rc && a->jobfd >= 0 && dead) {
		/* Giving up leaves nothing behind. We hold the job lock and
		 * found no live lease, so none can exist: the job's files
		 * describe nothing (same-job waiters start over, as after a
		 * cleanup). After an error before that was known, nothing is
		 * removed. */
		char name[GM_JOB_MAX + 48];
		snprintf(name, sizeof name, "%s.lease", a->jobname);
		unlinkat(a->d.user, name, 0);
		snprintf(name, sizeof name, "%s.lease.tmp", a->jobname);
		unlinkat(a->d.user, name, 0);
		unlinkat(a->d.user, a->jobname, 0);
	}
	if (a->jobfd >= 0) {
		gm__unlock_all(a->jobfd);
		gm__close(a->jobfd);
	}
	/* Every GM_CLEANUP_EVERY-th ticket tidies up: a scan costs a few
	 * system calls per job file, too much to pay on every claim when
	 * hundreds of jobs are live, and dead files stay bounded anyway. */
	if (rc == 0 && !out->joined && !a->cleaned &&
	    a->tk.seq % GM_CLEANUP_EVERY == 0)
		gm__cleanup_jobs(&a->d, a->jobname);
	gm__dir_close(&a->d);
	if (rc)
		memset(out, 0, sizeof *out);
	for (int i = 0; i < out->ndevices; i++)
		gm__untrack(out->fds[i]); /* the lease: kept for life */
	free(a);
	return rc;
}
