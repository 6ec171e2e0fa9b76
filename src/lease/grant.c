/*
 * grant.c - at the head of the line: the devices, all at once, and the
 * grant (docs/design.md, steps 4 to 6); then the holder files that let a
 * waiter's message name who holds its GPUs.
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

#include "acquire.h"

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
			gm__drop(held, nheld);
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
		gm__drop(held, nheld);
		for (int j = 0; j < *nbells; j++)
			gm__close(bells[j].fd);
		*nbells = 0;
		return bell;
	}
	if (nheld < c->want) {
		/* Never keep a partial set while waiting (docs/design.md). */
		gm__drop(held, nheld);
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
	rc = gm__record_write(a, l);
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
int gm__claim(struct acq *a, struct gm_lease *out)
{
	struct pollfd *bells = a->bells;
	int rc, nbells, ahead, *belldev = a->belldev;
	uint64_t rang = 0, suspect = 0, stale = 0;

	/* Prepare now what the record needs, not on the hand-off path. */
	gm__cmdline(getpid(), a->cmd, sizeof a->cmd);
	a->recfd = gm__record_prepare(a);
	if (a->recfd < 0)
		/* Now, not after waiting our turn: the record must be
		 * writable for the grant. (Only we can make files in our
		 * directory, so this takes an error like ENOSPC.) */
		return gm__fail(-errno, a->err, a->errlen,
				"cannot write lease record job/%s/%s.lease.tmp: %s",
				a->d.user_name, a->jobname, strerror(errno));
	gm__ev_prepare(a); /* the event log, also before waiting */
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
		return gm__timed_out(a);
	if (rc)
		return rc;
	GM_CRASHPOINT("ticketed");
	for (;;) {
		int pred = gm__ticket_ahead(&a->d, &a->tk, a->mask, &ahead,
					    a->err, a->errlen);
		struct pollfd p;

		if (pred < -1)
			return pred;
		if (pred >= 0) {
			gm__notify_wait(a, ahead, 0, 0);
			GM_CRASHPOINT("queued");
			p.fd = pred;
			rc = gm__wait(&p, 1, a->deadline, a->cfg->recheck_ms);
			gm__close(pred);
			if (rc == -ETIMEDOUT)
				return gm__timed_out(a);
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
			gm__notify_wait(a, 0, 1, 0);
			GM_CRASHPOINT("head-waiting");
			rc = gm__wait(bells, n, a->deadline, timer);
			rang = 0;
			for (int j = 0; j < n; j++) {
				if (bells[j].revents & POLLHUP)
					rang |= UINT64_C(1) << belldev[j];
				gm__close(bells[j].fd);
			}
			if (rang) { /* event log: when a holder let go */
				a->ev.woke_mono = gm__mono_ns();
				a->ev.rang = rang;
			}
			if (rc == -ETIMEDOUT)
				return gm__timed_out(a);
			if (rc)
				return rc;
		}
		rc = grant(a, out);
		if (rc) {
			gm__drop(out->fds, out->ndevices);
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
void gm__holder_files(struct acq *a, const struct gm_lease *l)
{
	char text[GM_JOB_MAX + 16], name[32];
	/* A shorter name over a longer one leaves a tail after the newline,
	 * which readers ignore: no truncation needed. */
	int len = snprintf(text, sizeof text, "%s.lease\n", a->jobname);

	for (int i = 0; i < l->ndevices; i++) {
		int fd;

		snprintf(name, sizeof name, GM_HELD_FILE "%d", l->devices[i]);
		fd = openat(a->d.user, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK |
			    O_CLOEXEC);
		if (fd < 0 && errno == ENOENT) {
			/* The first time: readable by all whatever the umask
			 * (other users' waiting lines read it). */
			fd = openat(a->d.user, name, O_WRONLY | O_CREAT |
				    O_EXCL | O_NOFOLLOW | O_NONBLOCK |
				    O_CLOEXEC, 0644);
			if (fd >= 0 && fchmod(fd, 0644) != 0) {
				close(fd);
				fd = -1;
			}
		}
		if (fd < 0)
			continue;
		/* Say nothing rather than half (a failed truncate leaves a
		 * name that no record matches, which says nothing either). */
		if (pwrite(fd, text, (size_t)len, 0) != len)
			(void)!ftruncate(fd, 0);
		close(fd);
	}
}
