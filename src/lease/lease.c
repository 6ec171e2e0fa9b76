/*
 * lease.c - take or join a job's lease: the protocol's steps, in order
 * (the steps themselves: job.c, queue.c, ahead.c, grant.c; acquire.h).
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

#include "acquire.h"

void gm__notify_wait(struct acq *a, int ahead, int head, int job_busy)
{
	struct gm_wait_info info;

	if (!job_busy && a->tk.seq)
		gm__ev_waiting(a, ahead, head); /* event log: once */
	if (a->waited)
		return;
	a->waited = 1;
	/* About to sleep anyway: tidy this user's dead jobs now rather than
	 * after the grant, where it would lengthen the hand-off. */
	if (!a->cleaned) {
		a->cleaned = 1;
		if (a->tk.seq % GM_CLEANUP_EVERY == 0) {
			gm__cleanup_jobs(&a->d, a->jobname);
			gm__queue_sweep(&a->d, geteuid(), a->tk.seq);
		}
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
	info.narrowed = a->cfg == &a->narrow ? a->mask : 0;
	a->hooks->on_wait(a->hooks->arg, &info);
}

int gm__timed_out(struct acq *a)
{
	const struct gm_config *c = a->cfg;
	char list[GM_MAX_DEVICES * 4];

	gm_format_list(list, sizeof list, c->devices, c->ndevices);
	if (c->timeout_s == 0)
		return gm__fail(-ETIMEDOUT, a->err, a->errlen,
				"could not get %d of GPUs %s at once, and GPUMUTEX_TIMEOUT=0 says not to wait",
				c->want, list);
	return gm__fail(-ETIMEDOUT, a->err, a->errlen,
			"gave up after GPUMUTEX_TIMEOUT=%g s waiting for %d of GPUs %s",
			c->timeout_s, c->want, list);
}

/*
 * Members of the job that are suspended (docs/suspend.md) hold no lease,
 * but resume on their own GPUs and then join the job's lease: a new lease
 * of the job must be on those GPUs, or they could never join it. So when
 * exactly as many of the claim's candidates are theirs as it wants, the
 * claim's candidates are narrowed to them (it waits for them if
 * another job holds them now). Otherwise (fewer or more of its candidates
 * are theirs than it wants: other settings than theirs) the claim is left
 * as it is: the lease it gets may be one they cannot join, and their next call
 * then fails as any process's whose settings do not fit its job's lease.
 */
static void narrow_to_suspended(struct acq *a)
{
	uint64_t s = 0;
	int n = 0;

	/* Their marks on the job file (gm_lease_suspended_mark), which we
	 * hold locked: one probe per candidate, whatever the queue. */
	for (int i = 0; i < a->cfg->ndevices; i++)
		if (gm__probe(a->jobfd, F_WRLCK,
			      GM_SUSP_OFF + a->cfg->devices[i]) == F_RDLCK)
			s |= UINT64_C(1) << a->cfg->devices[i];
	/* (s is among the candidates: only theirs were probed) */
	if (!s || __builtin_popcountll(s) != a->cfg->want || s == a->mask)
		return;
	a->narrow = *a->cfg;
	for (int i = 0; i < a->cfg->ndevices; i++)
		if (s & (UINT64_C(1) << a->cfg->devices[i]))
			a->narrow.devices[n++] = a->cfg->devices[i];
	a->narrow.ndevices = n;
	a->cfg = &a->narrow;
	a->mask = s;
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
	a->jobfd = a->tk.fd = a->tk.cfd = a->recfd = a->ev.fd = -1;
	a->err = err;
	a->errlen = errlen;
	a->deadline = cfg->timeout_s < 0 ? -1 :
		gm__mono_ns() + (int64_t)(cfg->timeout_s * 1e9);
	snprintf(a->jobname, sizeof a->jobname, "%s", cfg->job);
	a->ev.arrived_mono = gm__mono_ns(); /* event log */
	a->ev.arrived_real = gm__real_ns();

	rc = gm__dir_open(cfg->lock_dir, 1, &a->d, err, errlen);
	if (rc) {
		free(a);
		return rc;
	}
	rc = gm__user_dir(&a->d, a->deadline, err, errlen);
	if (rc == -ETIMEDOUT)
		rc = gm__timed_out(a);
	if (rc)
		goto out;
	rc = gm__job_lock(a);
	if (rc)
		goto out;
	rc = gm__record_read(a, &r);
	if (rc == 0) {
		rc = gm__join(a, &r, out);
		if (rc == 1) {
			/* The lease is alive, so it is the job's and cannot
			 * change: a process it does not fit gets nothing (a
			 * claim would wait for its own job's GPUs). */
			rc = gm_join_check(cfg, out->devices, out->ndevices,
					   &out->usable, err, errlen);
			if (rc) {
				gm__drop(out->fds, out->ndevices);
				goto out;
			}
			gm__record_add_member(a);
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
	narrow_to_suspended(a);
	rc = gm__claim(a, out);
	for (int i = 0; rc == 0 && i < out->ndevices; i++)
		out->usable |= UINT64_C(1) << out->devices[i];
	if (rc == 0 && hooks && hooks->on_granted)
		hooks->on_granted(hooks->arg, out);
	/* Before the ticket goes: the waiters it lets go on to look for the
	 * holder of these GPUs find us (a write in place, no directory
	 * change, so the hand-off hardly notices). */
	if (rc == 0)
		gm__holder_files(a, out);
	if (rc == 0)
		GM_CRASHPOINT("granted");
out:
	/* Order matters: the ticket goes first (our successor may start),
	 * then the job lock (our job's other processes may join). A granted
	 * claim was at the head: it tells the queue's marks so. */
	gm__ticket_release(&a->d, &a->tk,
			   rc == 0 && !out->joined ? a->mask : 0);
	if (a->recfd >= 0) {
		/* Not used (we gave up, or the grant failed before writing). */
		char tmp[GM_JOB_MAX + 48];
		gm__close(a->recfd);
		snprintf(tmp, sizeof tmp, "%s.lease.tmp", a->jobname);
		unlinkat(a->d.user, tmp, 0);
	}
	if (rc && a->jobfd >= 0 && dead) {
		/* Giving up leaves nothing behind (but a job file that
		 * suspended members mark, below). We hold the job lock and
		 * found no live lease, so none can exist: the job's files
		 * describe nothing (same-job waiters start over, as after a
		 * cleanup). After an error before that was known, nothing is
		 * removed. */
		char name[GM_JOB_MAX + 48];
		snprintf(name, sizeof name, "%s.lease", a->jobname);
		unlinkat(a->d.user, name, 0);
		snprintf(name, sizeof name, "%s.lease.tmp", a->jobname);
		unlinkat(a->d.user, name, 0);
		/* Not the job file its suspended members mark: the job's next
		 * claim must find their marks there. */
		if (gm__probe_range(a->jobfd, F_WRLCK, GM_SUSP_OFF,
				    GM_MAX_DEVICES) == F_UNLCK)
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
	    a->tk.seq % GM_CLEANUP_EVERY == 0) {
		gm__cleanup_jobs(&a->d, a->jobname);
		gm__queue_sweep(&a->d, geteuid(), a->tk.seq);
	}
	/* Event log: after the ticket and the job lock, so nobody waits
	 * for it (a kill before this line loses this record only). */
	gm__ev_acquired(a, rc, out);
	gm__dir_close(&a->d);
	if (rc)
		memset(out, 0, sizeof *out);
	for (int i = 0; i < out->ndevices; i++)
		gm__untrack(out->fds[i]); /* the lease: kept for life */
	free(a);
	return rc;
}

