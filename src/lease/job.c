/*
 * job.c - a job's own files: the job lock (job/<uid>/<job>, whose write
 * lock serialises the processes of one job, so two arriving together end
 * up in one lease), the lease record (job/<uid>/<job>.lease), and joining
 * the job's live lease (docs/design.md, steps 1 and 2).
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

/* ---- The job lock ------------------------------------------------------ */

/*
 * Take the write lock on job/<uid>/<job>. While another process of the
 * job holds it (it is claiming, or checking the lease), sleep until its
 * holder closes the FIFO, then try again.
 */
int gm_lease_suspended_mark(const char *lock_dir, const char *job,
			    const struct gm_lease *l, int *fd, char *err,
			    size_t errlen)
{
	char what[GM_JOB_MAX + 160];
	struct gm__dir d;
	int rc, f;

	*fd = -1;
	rc = gm_job_check("GPUMUTEX_JOB", job, err, errlen);
	if (rc == 0)
		rc = gm__dir_open(lock_dir, 0, &d, err, errlen);
	if (rc)
		return rc;
	rc = gm__user_dir_find(&d, err, errlen);
	if (rc == 0) {
		snprintf(what, sizeof what, "job file job/%s/%s", d.user_name,
			 job);
		f = gm__open(d.user, what, job, O_RDONLY, 1, 0, err, errlen);
		rc = f < 0 ? f : 0;
		/* The devices it may use (a joiner of a bigger lease: its
		 * part), which it resumes on. */
		for (int i = 0; rc == 0 && i < l->ndevices; i++)
			if (!l->usable ||
			    (l->usable & (UINT64_C(1) << l->devices[i])))
				rc = gm__lock(f, F_OFD_SETLK, F_RDLCK,
					      GM_SUSP_OFF + l->devices[i]);
		/* The lease is held, so no cleaner removes the file (it
		 * removes dead jobs only); checked all the same. */
		if (rc == 0 && !gm__still_linked(d.user, job, f))
			rc = -ESTALE;
		if (rc == 0) {
			gm__untrack(f);
			*fd = f;
		} else {
			if (f >= 0)
				gm__close(f);
			rc = gm__fail(rc, err, errlen, "cannot mark %s: %s",
				      what, strerror(-rc));
		}
	}
	gm__dir_close(&d);
	return rc;
}

int gm__job_lock(struct acq *a)
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
		gm__notify_wait(a, 0, 0, 1);
		p.fd = bell;
		rc = gm__wait(&p, 1, a->deadline, a->cfg->recheck_ms);
		gm__close(bell);
		if (rc == -ETIMEDOUT)
			return gm__timed_out(a);
		if (rc)
			return gm__fail(rc, a->err, a->errlen, "poll: %s",
					strerror(-rc));
	}
}

/* ---- The lease record -------------------------------------------------- */


/* Our job's record, if there is one we can trust: a regular file of ours.
 * Returns 0, -ENOENT when there is none (or it is not ours or not valid:
 * then no lease of ours can be described by it), or another -errno when
 * it could not be read. */
int gm__record_read(struct acq *a, struct record *r)
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
int gm__record_prepare(struct acq *a)
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

int gm__record_write(struct acq *a, const struct gm_lease *l)
{
	char name[GM_JOB_MAX + 48], tmp[GM_JOB_MAX + 48];
	char list[GM_MAX_DEVICES * 4] = "";
	char cand[GM_MAX_DEVICES * 4] = "";
	/* On the heap: this runs on the caller's stack, which for cuInit can
	 * be a 16 KiB thread stack. */
	char *buf = malloc(RECORD_WRITE_MAX);
	int fd, len, rc = 0;
	pid_t pid = getpid();

	errno = 0;
	snprintf(name, sizeof name, "%s.lease", a->jobname);
	snprintf(tmp, sizeof tmp, "%s.lease.tmp", a->jobname);
	if (!buf) {
		errno = ENOMEM;
		goto fail;
	}
	gm_format_list(list, sizeof list, l->devices, l->ndevices);
	gm_format_list(cand, sizeof cand, a->cfg->devices, a->cfg->ndevices);
	/* candidates= is for `gpumutex status` only (which GPUs this job
	 * manages); nothing that decides about the lease reads it. */
	len = snprintf(buf, RECORD_WRITE_MAX,
		       "gpumutex-lease 1\nlease=%" PRIx64 "\njob=%s\nuid=%u\n"
		       "devices=%s\ncandidates=%s\nstart=%" PRId64 "\npid=%d\n"
		       "cmd=%s\npidns=%llu\nmember=%d\n",
		       l->lease_id, a->cfg->job, (unsigned)geteuid(), list, cand,
		       gm__real_ns(), (int)pid, a->cmd, gm__pidns(), (int)pid);
	/* Written whole under a temporary name, then renamed, so a reader
	 * (gpumutex status) never sees half a record. We hold the job lock,
	 * so nobody else writes this job's temporary file. It was made before
	 * waiting (record_prepare): creating a file is slow on some
	 * filesystems, and this is the hand-off path. */
	fd = a->recfd;
	a->recfd = -1;
	if (fd < 0) {
		fd = gm__record_prepare(a);
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

void gm__record_add_member(struct acq *a)
{
	char name[GM_JOB_MAX + 48], line[64];
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
	/* " ns=": a member in another PID namespace than the record's
	 * writer (older readers take the number and ignore the rest). */
	len = snprintf(line, sizeof line, "member=%d ns=%llu\n", (int)getpid(),
		       gm__pidns());
	if (write(fd, line, (size_t)len) < 0) {
		/* nothing to do: status just will not list this member */
	}
	gm__close(fd);
}

/* ---- Joining ----------------------------------------------------------- */

void gm__drop(int *fds, int n)
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
int gm__join(struct acq *a, const struct record *r, struct gm_lease *out)
{
	int fds[GM_MAX_DEVICES], n = 0, alive = r->ndevices > 0;
	const int64_t off = GM_LEASE_OFF + (int64_t)r->lease;

	for (int i = 0; i < r->ndevices && alive; i++) {
		int fd = gm__dev_open(&a->d, r->devices[i], O_RDWR, a->err,
				      a->errlen);
		if (fd < 0) {
			gm__drop(fds, n);
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
		gm__drop(fds, n);
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
