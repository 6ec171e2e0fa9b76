/*
 * records.c - lease records: parsing, liveness, removing dead jobs, and
 * the directory of each user's job files.
 *
 * A record is only a description. Whether a lease is alive is always
 * decided by the kernel's locks, never by what a record says.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

int gm__record_parse(const char *text, uint64_t *lease, int *devices,
		     int *ndevices)
{
	const char *l = strstr(text, "\nlease="), *d = strstr(text, "\ndevices=");
	char list[GM_MAX_DEVICES * 4];
	size_t len;
	const char *end;

	if (strncmp(text, "gpumutex-lease 1\n", 17) != 0 || !l || !d)
		return -EINVAL;
	/* A lease id names byte GM_LEASE_OFF + id of a device file: keep it
	 * clear of byte 0 and of off_t's limit, whatever the file says. */
	if (gm_scan_uint(l + 7, 16, GM_LEASE_MAX, lease, &end) || *end != '\n' ||
	    *lease == 0)
		return -EINVAL;
	d += 9;
	len = strcspn(d, "\n");
	if (len == 0 || len >= sizeof list || d[len] != '\n')
		return -EINVAL;
	memcpy(list, d, len);
	list[len] = '\0';
	return gm_parse_devices("devices", list, devices, ndevices, NULL, 0);
}

int gm__lease_alive(const struct gm__dir *d, uint64_t lease,
		    const int *devices, int ndevices)
{
	int unknown = 0;

	for (int i = 0; i < ndevices; i++) {
		char name[16];
		int fd, who;

		snprintf(name, sizeof name, "%d", devices[i]);
		fd = openat(d->dev, name,
			    O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			unknown |= errno != ENOENT;
			continue;
		}
		who = gm__probe(fd, F_WRLCK, GM_LEASE_OFF + (int64_t)lease);
		close(fd);
		if (who == F_RDLCK)
			return 1;
		unknown |= who < 0;
	}
	return unknown ? -1 : 0;
}

int gm__read_record(int dirfd, const char *name, char **text, uid_t *owner)
{
	/* O_NONBLOCK and a type check: anyone can put a FIFO (or worse)
	 * under a record's name in the shared directory, and a plain open of
	 * a FIFO would block for ever. */
	int fd = openat(dirfd, name,
			O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK), rc = 0;
	struct stat st;
	ssize_t n;
	char *buf;

	*text = NULL;
	if (fd < 0)
		return -errno;
	if (gm__fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	buf = malloc(GM_RECORD_MAX);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	n = read(fd, buf, GM_RECORD_MAX - 1);
	if (n < 0) {
		rc = -errno;
		free(buf);
	} else {
		buf[n] = '\0';
		*text = buf;
	}
	close(fd);
	if (owner)
		*owner = st.st_uid;
	return rc;
}

/* Remove job `name` (the FIFO job/<uid>/<job>) if it is dead. We take
 * its job lock first, so no process of that job is claiming or joining,
 * and we unlink while holding it: a process that opened the FIFO before
 * the unlink finds, once it gets the lock, that its FIFO is no longer
 * linked, and starts over (lease.c, job_lock). */
static void cleanup_one(const struct gm__dir *d, const char *name)
{
	char rec[GM_JOB_MAX + 48], tmp[GM_JOB_MAX + 48], *buf;
	uint64_t lease;
	int devices[GM_MAX_DEVICES], n = 0, rc;
	int fd = gm__track(openat(d->user, name,
				  O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));

	if (fd < 0)
		return;
	if (gm__lock(fd, F_OFD_SETLK, F_WRLCK, 0) < 0 ||
	    !gm__still_linked(d->user, name, fd))
		goto out;
	/* Members suspended (their marks on this file): the job lives on,
	 * and its next claim must find their marks (lease.c). */
	if (gm__probe_range(fd, F_WRLCK, GM_SUSP_OFF, GM_MAX_DEVICES) != F_UNLCK)
		goto out;
	snprintf(rec, sizeof rec, "%s.lease", name);
	snprintf(tmp, sizeof tmp, "%s.lease.tmp", name);
	/* Remove only what is known dead: no record, or a record whose
	 * lease no device names any more. Any error keeps the job. */
	rc = gm__read_record(d->user, rec, &buf, NULL);
	if (rc == 0) {
		int keep = gm__record_parse(buf, &lease, devices, &n) != 0 ||
			   gm__lease_alive(d, lease, devices, n) != 0;
		free(buf);
		if (keep)
			goto out;
	} else if (rc != -ENOENT) {
		goto out;
	}
	unlinkat(d->user, rec, 0);
	unlinkat(d->user, tmp, 0);
	unlinkat(d->user, name, 0);
out:
	gm__unlock_all(fd);
	gm__close(fd);
}

/* Temporary files (lockdir.c, queue.c) and empty directories (the user
 * directory below) of ours left by a process killed while making them. A
 * maker needs its temporary name for a few system calls, so only ones
 * older than a minute are removed (and a maker whose file went away
 * anyway makes another). */
static void cleanup_tmp(int dirfd)
{
	DIR *dir = gm__listdir(dirfd);
	struct dirent *de;
	uid_t me = geteuid();

	if (!dir)
		return;
	while ((de = readdir(dir)) != NULL) {
		struct stat st;
		if (strncmp(de->d_name, ".tmp.", 5) != 0 ||
		    gm__fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    st.st_uid != me ||
		    (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec >
			    gm__real_ns() - INT64_C(60000000000))
			continue;
		unlinkat(dirfd, de->d_name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
	}
	closedir(dir);
}

void gm__cleanup_jobs(const struct gm__dir *d, const char *keep)
{
	DIR *dir = gm__listdir(d->user);
	struct dirent *de;

	if (!dir)
		return;
	while ((de = readdir(dir)) != NULL) {
		/* The job FIFOs: the names without a dot (job ids have none;
		 * records end in ".lease" or ".lease.tmp", temporary names
		 * start with a dot). All of them are ours: nobody else can
		 * make files in our directory. */
		const char *nm = de->d_name;

		if (strchr(nm, '.') || strcmp(nm, keep) == 0)
			continue;
		if (de->d_type != DT_FIFO && de->d_type != DT_UNKNOWN)
			continue;
		cleanup_one(d, nm);
	}
	closedir(dir);
	cleanup_tmp(d->user);
	cleanup_tmp(d->root);
	cleanup_tmp(d->job);
	cleanup_tmp(d->dev);
	cleanup_tmp(d->queue);
}

/* ---- This user's directory of job files ------------------------------- */

/* Open `name` in job/ if it is a directory of ours that nobody else can
 * write to: the descriptor, GM__FOREIGN if it is anything else, or
 * -errno (-ENOENT: nothing there). */
static int user_dir_try(const struct gm__dir *d, const char *name)
{
	struct stat st;
	int fd = openat(d->job, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			O_CLOEXEC);

	if (fd < 0)
		return errno == ENOTDIR || errno == ELOOP || errno == EACCES ?
			GM__FOREIGN : -errno;
	if (gm__fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) &&
	    st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH)))
		return fd;
	close(fd);
	return GM__FOREIGN;
}

/* "<uid>.<16 hex digits>": a second choice of user directory. */
static int is_alt_name(const char *nm, const char *primary)
{
	size_t plen = strlen(primary);
	uint64_t v;

	return strncmp(nm, primary, plen) == 0 && nm[plen] == '.' &&
	       strlen(nm + plen + 1) == 16 &&
	       gm_parse_uint(nm + plen + 1, 16, UINT64_MAX, &v) == 0;
}

/* Make our directory under `name`: 0755 under a private temporary name
 * first, then renamed into place. 0, or -errno (-EEXIST: name taken). */
static int user_dir_make(const struct gm__dir *d, const char *name)
{
	char tmp[64];
	int fd, rc = 0;

	for (int tries = 0;; tries++) {
		gm__tmp_name(tmp, sizeof tmp);
		if (mkdirat(d->job, tmp, 0700) == 0)
			break;
		if (errno != EEXIST || tries >= 8)
			return -errno;
	}
	fd = openat(d->job, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchmod(fd, 0755) < 0 ||
	    gm__rename_noreplace(d->job, tmp, name) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	if (rc) {
		unlinkat(d->job, tmp, AT_REMOVEDIR);
		if (rc == -ENOTEMPTY || rc == -EPERM)
			rc = -EEXIST; /* renamed onto someone else's directory */
	}
	return rc;
}

/* Our directory if one exists: job/<uid> first, else the lowest-named
 * job/<uid>.<hex>. Its name goes into `best`; 0, -ENOENT, or -errno. */
static int user_dir_find(struct gm__dir *d, const char *primary, char *best,
			 size_t bestlen)
{
	DIR *dir;
	struct dirent *de;
	int fd = user_dir_try(d, primary);

	best[0] = '\0';
	if (fd >= 0) {
		snprintf(best, bestlen, "%s", primary);
		close(fd);
		return 0;
	}
	dir = gm__listdir(d->job);
	if (!dir)
		return -errno;
	while ((de = readdir(dir)) != NULL) {
		if (!is_alt_name(de->d_name, primary) ||
		    (best[0] && strcmp(de->d_name, best) >= 0))
			continue;
		fd = user_dir_try(d, de->d_name);
		if (fd >= 0) {
			close(fd);
			snprintf(best, bestlen, "%.39s", de->d_name);
		}
	}
	closedir(dir);
	return best[0] ? 0 : -ENOENT;
}

/* Open `name`, found or made by us, into d->user. */
static int user_dir_use(struct gm__dir *d, const char *name, char *err,
			size_t errlen)
{
	int fd = user_dir_try(d, name);

	if (fd < 0) {
		char note[64];
		gm__owner_note(d->job, name, note, sizeof note);
		return gm__fail(fd == GM__FOREIGN ? -EPERM : fd, err, errlen,
				"cannot use job/%s for this user's job files%s",
				name, note);
	}
	snprintf(d->user_name, sizeof d->user_name, "%s", name);
	d->user = gm__track(fd);
	return 0;
}

/* Under the counter lock: our directory, or a new one. Only we make
 * directories of ours, and only here, so there is never more than one. */
static int user_dir_locked(struct gm__dir *d, const char *primary,
			   char *err, size_t errlen)
{
	char best[40];
	int rc = user_dir_find(d, primary, best, sizeof best);

	if (rc == 0)
		return user_dir_use(d, best, err, errlen);
	if (rc != -ENOENT)
		return gm__fail(rc, err, errlen, "cannot read job/: %s",
				strerror(-rc));
	for (int tries = 0; tries < 8; tries++) {
		struct stat st;

		if (gm__fstatat(d->job, primary, &st, AT_SYMLINK_NOFOLLOW) < 0 &&
		    errno == ENOENT)
			snprintf(best, sizeof best, "%s", primary);
		else
			snprintf(best, sizeof best, "%s.%016" PRIx64, primary,
				 gm__random_u64());
		rc = user_dir_make(d, best);
		if (rc == 0)
			return user_dir_use(d, best, err, errlen);
		if (rc != -EEXIST)
			return gm__fail(rc, err, errlen,
					"cannot create job/%s: %s", best,
					strerror(-rc));
	}
	return gm__fail(-EEXIST, err, errlen,
			"cannot create a directory for this user's job files in job/: every name tried was taken");
}

int gm__user_dir_find(struct gm__dir *d, char *err, size_t errlen)
{
	char primary[16], best[40];
	int rc;

	snprintf(primary, sizeof primary, "%u", (unsigned)geteuid());
	rc = user_dir_find(d, primary, best, sizeof best);
	if (rc == -ENOENT)
		return rc;
	if (rc)
		return gm__fail(rc, err, errlen, "cannot read job/: %s",
				strerror(-rc));
	return user_dir_use(d, best, err, errlen);
}

int gm__user_dir(struct gm__dir *d, int64_t deadline, char *err,
		 size_t errlen)
{
	char primary[16];
	int fd, rc;

	snprintf(primary, sizeof primary, "%u", (unsigned)geteuid());
	fd = user_dir_try(d, primary);
	if (fd >= 0) {
		snprintf(d->user_name, sizeof d->user_name, "%s", primary);
		d->user = gm__track(fd);
		return 0;
	}
	if (fd != -ENOENT && fd != GM__FOREIGN)
		return gm__fail(fd, err, errlen, "cannot open job/%s: %s",
				primary, strerror(-fd));
	/* Missing (our first job here), or someone else's file has the
	 * name: settle it under the counter lock, which serialises us with
	 * every other process of ours that might be doing the same. */
	fd = gm__counter_lock(d, deadline, err, errlen);
	if (fd < 0)
		return fd;
	rc = user_dir_locked(d, primary, err, errlen);
	gm__close(fd);
	return rc;
}
