/*
 * records.c - lease records: parsing, liveness, and removing dead jobs.
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

int gm__read_record(int dirfd, const char *name, char *buf, size_t len,
		    uid_t *owner)
{
	/* O_NONBLOCK and a type check: anyone can put a FIFO (or worse)
	 * under a record's name in the shared directory, and a plain open of
	 * a FIFO would block for ever. */
	int fd = openat(dirfd, name,
			O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK), rc = 0;
	struct stat st;
	ssize_t n;

	if (fd < 0)
		return -errno;
	if (gm__fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	n = read(fd, buf, len - 1);
	if (n < 0)
		rc = -errno;
	else
		buf[n] = '\0';
	close(fd);
	if (owner)
		*owner = st.st_uid;
	return rc;
}

/* Remove job `name` (a FIFO called <uid>-<job>) if it is dead. We take
 * its job lock first, so no process of that job is claiming or joining,
 * and we unlink while holding it: a process that opened the FIFO before
 * the unlink finds, once it gets the lock, that its FIFO is no longer
 * linked, and starts over (lease.c, job_lock). */
static void cleanup_one(const struct gm__dir *d, const char *name)
{
	char rec[GM_JOB_MAX + 48], tmp[GM_JOB_MAX + 48], buf[GM_RECORD_MAX];
	uint64_t lease;
	int devices[GM_MAX_DEVICES], n = 0, rc;
	int fd = gm__track(openat(d->job, name,
				  O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));

	if (fd < 0)
		return;
	if (gm__lock(fd, F_OFD_SETLK, F_WRLCK, 0) < 0 ||
	    !gm__still_linked(d->job, name, fd))
		goto out;
	snprintf(rec, sizeof rec, "%s.lease", name);
	snprintf(tmp, sizeof tmp, "%s.lease.tmp", name);
	/* Remove only what is known dead: no record, or a record whose
	 * lease no device names any more. Any error keeps the job. */
	rc = gm__read_record(d->job, rec, buf, sizeof buf, NULL);
	if (rc == 0) {
		if (gm__record_parse(buf, &lease, devices, &n) != 0 ||
		    gm__lease_alive(d, lease, devices, n) != 0)
			goto out;
	} else if (rc != -ENOENT) {
		goto out;
	}
	unlinkat(d->job, rec, 0);
	unlinkat(d->job, tmp, 0);
	unlinkat(d->job, name, 0);
out:
	gm__unlock_all(fd);
	gm__close(fd);
}

/* Temporary files (create_file in lockdir.c) of ours left by a process
 * killed while making a file. A maker needs its temporary file for a few
 * system calls, so only ones older than a minute are removed (and a maker
 * whose file went away anyway makes another). */
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
		unlinkat(dirfd, de->d_name, 0);
	}
	closedir(dir);
}

void gm__cleanup_jobs(const struct gm__dir *d, const char *keep)
{
	char prefix[32];
	size_t plen;
	DIR *dir = gm__listdir(d->job);
	struct dirent *de;

	if (!dir)
		return;
	plen = (size_t)snprintf(prefix, sizeof prefix, "%u-",
				(unsigned)geteuid());
	while ((de = readdir(dir)) != NULL) {
		/* Our own user's job FIFOs only: the names without a dot
		 * after the prefix (a job id may contain dots, but the
		 * record names end in ".lease" or ".lease.tmp"). */
		const char *nm = de->d_name;
		size_t len = strlen(nm);

		if (strncmp(nm, prefix, plen) != 0 || strcmp(nm, keep) == 0)
			continue;
		if ((len > 6 && strcmp(nm + len - 6, ".lease") == 0) ||
		    (len > 10 && strcmp(nm + len - 10, ".lease.tmp") == 0))
			continue;
		if (de->d_type != DT_FIFO && de->d_type != DT_UNKNOWN)
			continue;
		cleanup_one(d, nm);
	}
	closedir(dir);
	cleanup_tmp(d->job);
	cleanup_tmp(d->dev);
}
