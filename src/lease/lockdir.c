/*
 * lockdir.c - the lock directory and opening the files in it.
 *
 * Everything below the lock directory is reached through directory
 * descriptors with O_NOFOLLOW, so no path component we create can be
 * swapped for a symlink between a check and a use.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"


/* Refuse a directory that lets others delete or replace our files: one
 * that is writable by group or others without the sticky bit, or one that
 * belongs to another user who did not make it a shared sticky directory.
 * The owner of a sticky directory can still remove files in it, so the
 * owner is trusted; `gpumutex init` run as root makes root that owner. */
static int check_dir(int fd, const char *path, char *err, size_t errlen)
{
	struct stat st;
	uid_t me = geteuid();

	if (gm__fstat(fd, &st) < 0)
		return gm__fail(-errno, err, errlen, "cannot stat %s: %s",
				path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return gm__fail(-ENOTDIR, err, errlen,
				"%s is not a directory", path);
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
		return gm__fail(-EPERM, err, errlen,
				"%s has unsafe permissions %04o (writable by others but not sticky, so anyone could delete lease files); use mode 1777 or 0755",
				path, (unsigned)(st.st_mode & 07777));
	if (st.st_uid != me && st.st_uid != 0 &&
	    (st.st_mode & 01777) != 01777)
		return gm__fail(-EPERM, err, errlen,
				"%s belongs to uid %u with mode %04o; a lock directory must be yours, root's, or a shared directory with mode 1777",
				path, (unsigned)st.st_uid,
				(unsigned)(st.st_mode & 07777));
	return 0;
}

/* Open directory `name` below `parent` (or the absolute `path` when
 * parent < 0), making it with mode 1777 when missing and `create`. */
static int open_dir(int parent, const char *name, const char *path,
		    int create, char *err, size_t errlen)
{
	const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	int fd, rc, made = 0;

	for (int tries = 0;; tries++) {
		fd = parent < 0 ? open(name, flags) : openat(parent, name, flags);
		if (fd >= 0)
			break;
		if (errno == ENOTDIR || errno == ELOOP) {
			/* O_DIRECTORY|O_NOFOLLOW says ENOTDIR for a symlink. */
			struct stat st;
			int r = gm__fstatat(parent < 0 ? AT_FDCWD : parent,
					    name, &st, AT_SYMLINK_NOFOLLOW);
			if (r == 0 && S_ISLNK(st.st_mode))
				return gm__fail(-ELOOP, err, errlen,
						"%s is a symbolic link; gpumutex refuses to follow it (set GPUMUTEX_LOCK_DIR to a real directory)",
						path);
			return gm__fail(-ENOTDIR, err, errlen,
					"%s exists but is not a directory", path);
		}
		if (errno != ENOENT || !create || tries > 2)
			return gm__fail(-errno, err, errlen,
					"cannot open lock directory %s: %s",
					path, strerror(errno));
		/* 0700 first: the mode is widened below, on the descriptor,
		 * whatever the umask; until then nobody else can get in. */
		rc = parent < 0 ? mkdir(name, 0700) : mkdirat(parent, name, 0700);
		if (rc < 0 && errno != EEXIST)
			return gm__fail(-errno, err, errlen,
					"cannot create lock directory %s: %s",
					path, strerror(errno));
		made = rc == 0;
	}
	if (made && fchmod(fd, 01777) < 0) {
		rc = -errno;
		close(fd);
		return gm__fail(rc, err, errlen, "cannot chmod %s: %s", path,
				strerror(-rc));
	}
	rc = check_dir(fd, path, err, errlen);
	if (rc) {
		close(fd);
		return rc;
	}
	return gm__track(fd);
}

int gm__dir_open(const char *path, int create, struct gm__dir *d, char *err,
		 size_t errlen)
{
	static const char *const sub[3] = { "dev", "queue", "job" };
	int *slot[3] = { &d->dev, &d->queue, &d->job };
	char sp[4200];

	d->root = d->dev = d->queue = d->job = -1;
	d->root = open_dir(-1, path, path, create, err, errlen);
	if (d->root < 0) {
		int rc = d->root;
		d->root = -1;
		return rc;
	}
	for (int i = 0; i < 3; i++) {
		snprintf(sp, sizeof sp, "%s/%s", path, sub[i]);
		*slot[i] = open_dir(d->root, sub[i], sp, create, err, errlen);
		if (*slot[i] < 0) {
			int rc = *slot[i];
			*slot[i] = -1;
			gm__dir_close(d);
			return rc;
		}
	}
	return 0;
}

void gm__dir_close(struct gm__dir *d)
{
	int *fds[4] = { &d->root, &d->dev, &d->queue, &d->job };
	for (int i = 0; i < 4; i++) {
		if (*fds[i] >= 0)
			gm__close(*fds[i]);
		*fds[i] = -1;
	}
}

static int check_file(int fd, const char *what, int fifo,
		      char *err, size_t errlen)
{
	struct stat st;

	if (gm__fstat(fd, &st) < 0)
		return gm__fail(-errno, err, errlen, "cannot stat %s: %s",
				what, strerror(errno));
	if (fifo ? !S_ISFIFO(st.st_mode) : !S_ISREG(st.st_mode))
		return gm__fail(-EINVAL, err, errlen,
				"%s is not a %s; remove it (the lock directory was damaged or is shared with something else)",
				what, fifo ? "FIFO" : "regular file");
	return 0;
}

/* Create `name` complete with `mode`: make it under a private temporary
 * name, set the mode on the descriptor, then link it into place. Readers
 * never see a half-made file, and a lost race (EEXIST) is not an error. */
static int create_file(int dirfd, const char *what, const char *name,
		       int fifo, mode_t mode, char *err, size_t errlen)
{
	char tmp[96];
	int fd, rc = 0;
	static unsigned counter;

	snprintf(tmp, sizeof tmp, ".tmp.%d.%u.%lld", (int)getpid(),
		 __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED),
		 (long long)gm__mono_ns());
	if (fifo) {
		if (mkfifoat(dirfd, tmp, 0600) < 0)
			goto fail;
		fd = openat(dirfd, tmp, O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	} else {
		fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			    0600);
	}
	if (fd < 0)
		goto fail_unlink;
	if (fchmod(fd, mode) < 0) {
		close(fd);
		goto fail_unlink;
	}
	close(fd);
	if (linkat(dirfd, tmp, dirfd, name, 0) < 0 && errno != EEXIST) {
		if (errno == ENOENT)
			return 0; /* our temporary file was cleaned: the caller
				   * opens again and, finding nothing, retries */
		goto fail_unlink;
	}
	unlinkat(dirfd, tmp, 0);
	return 0;
fail_unlink:
	rc = -errno;
	unlinkat(dirfd, tmp, 0);
	return gm__fail(rc, err, errlen, "cannot create %s: %s", what,
			strerror(-rc));
fail:
	rc = -errno;
	return gm__fail(rc, err, errlen, "cannot create %s: %s", what,
			strerror(-rc));
}

int gm__open(int dirfd, const char *what, const char *name, int flags,
	     int fifo, mode_t mode, char *err, size_t errlen)
{
	/* Never O_CREAT on an existing file: with fs.protected_regular and
	 * protected_fifos, that fails for files of other users in a sticky
	 * directory even though a plain open would succeed. */
	const int f = flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;

	for (int tries = 0;; tries++) {
		int fd = openat(dirfd, name, f), rc;

		if (fd >= 0) {
			rc = check_file(fd, what, fifo, err, errlen);
			if (rc) {
				close(fd);
				return rc;
			}
			return gm__track(fd);
		}
		if (errno == ELOOP)
			return gm__fail(-ELOOP, err, errlen,
					"%s is a symbolic link; gpumutex refuses to follow it",
					what);
		if (errno == EACCES)
			return gm__fail(-EACCES, err, errlen,
					"cannot open %s: permission denied (it belongs to another user with a restrictive mode; remove it or run `gpumutex init` as root)",
					what);
		if (errno != ENOENT || !mode || tries > 3)
			return gm__fail(-errno, err, errlen, "cannot open %s: %s",
					what, strerror(errno));
		rc = create_file(dirfd, what, name, fifo, mode, err, errlen);
		if (rc)
			return rc;
	}
}

int gm__dev_open(const struct gm__dir *d, int index, int flags, char *err,
		 size_t errlen)
{
	char name[16], what[48];

	snprintf(name, sizeof name, "%d", index);
	snprintf(what, sizeof what, "device file dev/%d", index);
	return gm__open(d->dev, what, name, flags, 1, 0666, err, errlen);
}

DIR *gm__listdir(int dirfd)
{
	/* A descriptor of its own: fdopendir takes it over, and a dup would
	 * share the directory offset with dirfd. */
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;

	if (fd < 0)
		return NULL;
	d = fdopendir(fd);
	if (!d)
		close(fd);
	return d;
}


int gm_lockdir_prepare(const struct gm_config *cfg, char *err, size_t errlen)
{
	struct gm__dir d;
	int rc = gm__dir_open(cfg->lock_dir, 1, &d, err, errlen);

	if (rc)
		return rc;
	for (int i = 0; i < cfg->ndevices && rc == 0; i++) {
		int fd = gm__dev_open(&d, cfg->devices[i], O_RDONLY, err, errlen);
		if (fd < 0)
			rc = fd;
		else
			gm__close(fd);
	}
	if (rc == 0) {
		int fd = gm__open(d.queue, "ticket counter queue/seq", "seq",
				  O_RDONLY, 0, 0666, err, errlen);
		if (fd < 0)
			rc = fd;
		else
			gm__close(fd);
	}
	gm__dir_close(&d);
	return rc;
}
