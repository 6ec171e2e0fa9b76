/*
 * join.c - who may join a job's lease, and what a job is doing now.
 *
 * A job is one lease: every process of the job shares the devices its
 * first process was granted, and the lease can neither grow nor move
 * while it lives. A process whose own settings (its candidate devices,
 * how many it needs) do not fit the lease of its job must not be handed
 * that lease silently: gm_join_check says whether it fits, and which of
 * the lease's devices the process may use. gm_job_probe tells a launcher
 * (gpumutex-run, the Python package) whether the job it was started in
 * holds a lease right now, so that a nested run joins it instead of
 * queueing behind its own caller (docs/design.md, "Jobs and joining").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"


int gm_join_check(const struct gm_config *cfg, const int *devices,
		  int ndevices, uint64_t *usable, char *err, size_t errlen)
{
	char held[GM_MAX_DEVICES * 4], mine[GM_MAX_DEVICES * 4];
	uint64_t cand = 0, use = 0;
	int n = 0;

	for (int i = 0; i < cfg->ndevices; i++)
		if (cfg->devices[i] >= 0 && cfg->devices[i] < GM_MAX_DEVICES)
			cand |= UINT64_C(1) << cfg->devices[i];
	for (int i = 0; i < ndevices; i++)
		if (devices[i] >= 0 && devices[i] < GM_MAX_DEVICES &&
		    (cand & (UINT64_C(1) << devices[i]))) {
			use |= UINT64_C(1) << devices[i];
			n++;
		}
	if (usable)
		*usable = use;
	if (n >= cfg->want && n > 0)
		return 0;
	gm_format_list(held, sizeof held, devices, ndevices);
	gm_format_list(mine, sizeof mine, cfg->devices, cfg->ndevices);
	if (n == 0)
		return gm__fail(-GM_EJOIN, err, errlen,
				"the lease of job %s holds GPU%s %s, %s among this process's GPUs (%s)",
				cfg->job, ndevices == 1 ? "" : "s", held,
				ndevices == 1 ? "which is not" : "none of which is",
				mine);
	if (n == ndevices)
		return gm__fail(-GM_EJOIN, err, errlen,
				"the lease of job %s holds %d GPU%s (%s), fewer than the %d this process needs, and a job's lease cannot grow",
				cfg->job, ndevices, ndevices == 1 ? "" : "s", held,
				cfg->want);
	return gm__fail(-GM_EJOIN, err, errlen,
			"only %d of the GPUs the lease of job %s holds (%s) %s among this process's GPUs (%s), fewer than the %d it needs, and a job's lease cannot grow or move",
			n, cfg->job, held, n == 1 ? "is" : "are", mine, cfg->want);
}

/* The record of job `name` (in our job directory) if it names a live lease:
 * 1 and *out filled, 0 if there is none (or it is not ours, not valid or
 * dead), -errno if that could not be told. */
static int live_record(const struct gm__dir *d, const char *name,
		       struct gm_job_state *out)
{
	char rec[GM_JOB_MAX + 48], *buf;
	uid_t owner;
	int rc, bad;

	snprintf(rec, sizeof rec, "%s.lease", name);
	rc = gm__read_record(d->user, rec, &buf, &owner);
	if (rc == -ENOENT || rc == -EINVAL)
		return 0;
	if (rc)
		return rc;
	bad = owner != geteuid() ||
	      gm__record_parse(buf, &out->lease_id, out->devices,
			       &out->ndevices) != 0;
	free(buf);
	if (bad)
		return 0;
	rc = gm__lease_alive(d, out->lease_id, out->devices, out->ndevices);
	return rc < 0 ? -EIO : rc;
}

int gm_job_probe(const char *lock_dir, const char *job,
		 struct gm_job_state *out, char *err, size_t errlen)
{
	struct gm__dir d;
	char name[GM_JOB_MAX + 32];
	int rc, fd, who;

	memset(out, 0, sizeof *out);
	rc = gm_job_check("GPUMUTEX_JOB", job, err, errlen);
	if (rc)
		return rc;
	rc = gm__dir_open(lock_dir, 0, &d, err, errlen);
	if (rc == -ENOENT)
		return 0; /* no lock directory yet: no job has a lease */
	if (rc)
		return rc;
	rc = gm__user_dir_find(&d, err, errlen);
	if (rc == -ENOENT) {
		rc = 0; /* no job of ours has been here */
		goto out;
	}
	if (rc)
		goto out;
	snprintf(name, sizeof name, "%s", job);
	rc = live_record(&d, name, out);
	if (rc != 0)
		goto out;
	/* No live lease. A process of the job that holds the job lock is
	 * taking one (or joining one that is just ending). Its grant may
	 * come between our two looks: so read the record once more after
	 * looking at the lock, and believe the lock only if that still
	 * finds no live lease. */
	fd = openat(d.user, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	who = fd < 0 ? (errno == ENOENT ? F_UNLCK : -errno) : F_UNLCK;
	if (fd >= 0) {
		/* Only our own job FIFO speaks for our job (our directory is
		 * ours, but be as strict as ever). */
		struct stat st;
		if (gm__fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) &&
		    st.st_uid == geteuid())
			who = gm__probe(fd, F_WRLCK, 0);
		close(fd);
	}
	rc = live_record(&d, name, out);
	if (rc == 0 && who < 0)
		rc = who;
	else if (rc == 0 && who != F_UNLCK)
		rc = 2;
out:
	gm__dir_close(&d);
	if (rc < 0)
		gm__fail(rc, err, errlen,
			 "cannot tell whether job %s holds a lease in %s: %s",
			 job, lock_dir, strerror(-rc));
	if (rc != 1) {
		out->lease_id = 0;
		out->ndevices = 0;
	}
	return rc;
}
