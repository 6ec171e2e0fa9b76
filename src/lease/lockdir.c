/*
 * lockdir.c - the lock directory and opening the files in it.
 *
 * Everything below the lock directory is reached through directory
 * descriptors with O_NOFOLLOW, so no path component we create can be
 * swapped for a symlink between a check and a use.
 *
 * Nothing is ever created in place with a mode that has to be widened
 * afterwards: a process killed in between would leave a file or directory
 * that only its owner can use, and lock every other user out. Files and
 * directories are made complete under a private temporary name and then
 * linked or renamed to their real name.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* What kind of directory make_dir makes: a plain one (dev/, job/), queue/
 * (with its counter file in it), or the lock directory with all three. */
enum { DIR_PLAIN, DIR_QUEUE, DIR_ROOT };

void gm__owner_note(int dirfd, const char *name, char *out, size_t outlen)
{
	struct stat st;

	out[0] = '\0';
	if (gm__fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		snprintf(out, outlen, " (owned by uid %u, mode %04o)",
			 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
}

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
				"%s (owned by uid %u) has unsafe permissions %04o (writable by others but not sticky, so anyone could delete lease files); use mode 1777 or 0755",
				path, (unsigned)st.st_uid,
				(unsigned)(st.st_mode & 07777));
	if (st.st_uid != me && st.st_uid != 0 &&
	    (st.st_mode & 01777) != 01777)
		return gm__fail(-EPERM, err, errlen,
				"%s belongs to uid %u with mode %04o; a lock directory must be yours, root's, or a shared directory with mode 1777 (its owner can share it with chmod 1777, or root can run `gpumutex init`)",
				path, (unsigned)st.st_uid,
				(unsigned)(st.st_mode & 07777));
	return 0;
}

/* A plain rename would replace an empty directory that someone else
 * just made (and is about to use). Kernels
 * or filesystems without RENAME_NOREPLACE get a check first, which
 * leaves that race open, but what it can cost is a failed claim: files
 * cannot be made in a directory that was replaced. */
int gm__rename_noreplace(int dirfd, const char *from, const char *to)
{
	struct stat st;
#ifdef SYS_renameat2
	if (syscall(SYS_renameat2, dirfd, from, dirfd, to, 1 /* NOREPLACE */) == 0)
		return 0;
	if (errno != ENOSYS && errno != EINVAL)
		return -1;
#endif
	if (gm__fstatat(dirfd, to, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		errno = EEXIST;
		return -1;
	}
	return renameat(dirfd, from, dirfd, to);
}

/* Make what a new directory of `kind` contains (see make_dir). */
static int populate(int fd, int kind)
{
	static const char *const sub[3] = { "dev", "queue", "job" };

	if (kind == DIR_QUEUE) {
		int f = openat(fd, "seq", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
			       O_CLOEXEC, 0600), rc = 0;
		if (f < 0)
			return -errno;
		if (fchmod(f, 0666) < 0)
			rc = -errno;
		close(f);
		return rc;
	}
	for (int i = 0; kind == DIR_ROOT && i < 3; i++) {
		int s, rc = 0;

		if (mkdirat(fd, sub[i], 0700) < 0)
			return -errno;
		s = openat(fd, sub[i], DIR_FLAGS);
		if (s < 0)
			return -errno;
		if (fchmod(s, 01777) < 0)
			rc = -errno;
		else if (i == 1)
			rc = populate(s, DIR_QUEUE);
		close(s);
		if (rc)
			return rc;
	}
	return 0;
}

/* Remove a temporary directory made by make_dir (best effort). */
static void unmake(int parent, const char *tmp)
{
	static const char *const sub[3] = { "dev", "queue", "job" };
	int fd = openat(parent, tmp, DIR_FLAGS);

	if (fd >= 0) {
		int q = openat(fd, "queue", DIR_FLAGS);
		if (q >= 0) {
			unlinkat(q, "seq", 0);
			close(q);
		}
		unlinkat(fd, "seq", 0);
		for (int i = 0; i < 3; i++)
			unlinkat(fd, sub[i], AT_REMOVEDIR);
		close(fd);
	}
	unlinkat(parent, tmp, AT_REMOVEDIR);
}

/*
 * Make directory `name` in `parent`, mode 1777, complete with what a
 * directory of `kind` contains: under a private temporary name (0700,
 * which nobody else can enter), then renamed into place. No crash leaves
 * `name` with a wrong mode or half-filled: until the rename it does not
 * exist. Returns 0 when made, or when someone else made it first (the
 * caller opens whatever is there and checks it), or -errno.
 */
static int make_dir(int parent, const char *name, int kind)
{
	char tmp[64], base[48];
	int fd, rc;

	for (int tries = 0;; tries++) {
		/* The lock directory's is made next to it (in /tmp, say):
		 * named so that it says whose it is if a crash leaves it. */
		gm__tmp_name(base, sizeof base);
		snprintf(tmp, sizeof tmp, "%s%s",
			 kind == DIR_ROOT ? ".gpumutex" : "", base);
		if (mkdirat(parent, tmp, 0700) == 0)
			break;
		if (errno != EEXIST || tries >= 8)
			return -errno;
	}
	fd = openat(parent, tmp, DIR_FLAGS);
	rc = fd < 0 ? -errno : populate(fd, kind);
	if (rc == 0 && fchmod(fd, 01777) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	if (rc == 0 && gm__rename_noreplace(parent, tmp, name) < 0)
		rc = -errno;
	if (rc) {
		unmake(parent, tmp);
		if (rc == -EEXIST || rc == -ENOTEMPTY)
			return 0;
	}
	return rc;
}

/* make_dir for the lock directory itself, given as a path. The copy of
 * the path is on the heap: this runs on CUDA threads' small stacks. */
static int make_top(const char *path)
{
	char *buf, *slash;
	size_t len = strlen(path);
	int parent, rc;

	while (len > 1 && path[len - 1] == '/')
		len--;
	if (len >= 4200)
		return -ENAMETOOLONG;
	buf = malloc(len + 1);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, path, len);
	buf[len] = '\0';
	slash = strrchr(buf, '/');
	if (!slash)
		rc = make_dir(AT_FDCWD, buf, DIR_ROOT);
	else if (slash[1] == '\0')
		rc = -EEXIST; /* "/" */
	else {
		*slash = '\0';
		parent = open(slash == buf ? "/" : buf,
			      O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (parent < 0) {
			rc = -errno;
		} else {
			rc = make_dir(parent, slash + 1, DIR_ROOT);
			close(parent);
		}
	}
	free(buf);
	return rc;
}

/* A subdirectory left private (0700) by an older version killed between
 * making it and widening it, in a shared lock directory: it is meant to
 * be shared, and only its owner can repair it. */
static void repair_sub(int fd, int parent)
{
	struct stat st, pst;

	if (gm__fstat(fd, &st) == 0 && gm__fstat(parent, &pst) == 0 &&
	    st.st_uid == geteuid() && (st.st_mode & 07777) == 0700 &&
	    (pst.st_mode & 07777) == 01777)
		(void)fchmod(fd, 01777);
}

/* Open directory `name` below `parent` (AT_FDCWD for the lock directory,
 * whose `name` is then its path), making it when missing and `create`. */
static int open_dir(int parent, const char *name, const char *path,
		    int create, int kind, char *err, size_t errlen)
{
	char note[64];
	int fd, rc;

	for (int tries = 0;; tries++) {
		fd = openat(parent, name, DIR_FLAGS);
		if (fd >= 0)
			break;
		if (errno == ENOTDIR || errno == ELOOP) {
			/* O_DIRECTORY|O_NOFOLLOW says ENOTDIR for a symlink;
			 * ENOTDIR also comes from a file higher up the path. */
			struct stat st;
			int r = gm__fstatat(parent, name, &st,
					    AT_SYMLINK_NOFOLLOW);
			gm__owner_note(parent, name, note, sizeof note);
			if (r == 0 && S_ISLNK(st.st_mode))
				return gm__fail(-ELOOP, err, errlen,
						"%s is a symbolic link%s; gpumutex refuses to follow it (set GPUMUTEX_LOCK_DIR to a real directory)",
						path, note);
			if (r == 0)
				return gm__fail(-ENOTDIR, err, errlen,
						"%s exists but is not a directory%s",
						path, note);
			return gm__fail(-ENOTDIR, err, errlen,
					"cannot open lock directory %s: a component of the path above it is not a directory",
					path);
		}
		if (errno != ENOENT || !create || tries > 2) {
			rc = -errno;
			gm__owner_note(parent, name, note, sizeof note);
			return gm__fail(rc, err, errlen,
					"cannot open lock directory %s: %s%s",
					path, strerror(-rc), note);
		}
		rc = parent == AT_FDCWD ? make_top(name) :
			make_dir(parent, name, kind);
		if (rc)
			return gm__fail(rc, err, errlen,
					"cannot create lock directory %s: %s",
					path, strerror(-rc));
	}
	if (create && parent != AT_FDCWD)
		repair_sub(fd, parent);
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
	static const int kind[3] = { DIR_PLAIN, DIR_QUEUE, DIR_PLAIN };
	int *slot[3] = { &d->dev, &d->queue, &d->job };
	/* "<path>/<sub>", for messages only. On the heap: a lock directory
	 * path can be 4 KiB, and this runs on CUDA threads' small stacks. */
	size_t splen = strlen(path) + 8;
	char *sp = malloc(splen);

	d->root = d->dev = d->queue = d->job = d->user = -1;
	d->user_name[0] = '\0';
	if (!sp)
		return gm__fail(-ENOMEM, err, errlen,
				"cannot open lock directory %s: out of memory",
				path);
	d->root = open_dir(AT_FDCWD, path, path, create, DIR_ROOT, err, errlen);
	if (d->root < 0) {
		int rc = d->root;
		d->root = -1;
		free(sp);
		return rc;
	}
	for (int i = 0; i < 3; i++) {
		snprintf(sp, splen, "%s/%s", path, sub[i]);
		*slot[i] = open_dir(d->root, sub[i], sp, create, kind[i], err,
				    errlen);
		if (*slot[i] < 0) {
			int rc = *slot[i];
			*slot[i] = -1;
			gm__dir_close(d);
			free(sp);
			return rc;
		}
	}
	free(sp);
	return 0;
}

void gm__dir_close(struct gm__dir *d)
{
	int *fds[5] = { &d->root, &d->dev, &d->queue, &d->job, &d->user };
	for (int i = 0; i < 5; i++) {
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
				"%s (owned by uid %u) is not a %s; remove it (the lock directory was damaged or is shared with something else)",
				what, (unsigned)st.st_uid,
				fifo ? "FIFO" : "regular file");
	return 0;
}

/* Create `name` complete with `mode`: make it under a private temporary
 * name, set the mode on the descriptor, then link it into place. Readers
 * never see a half-made file, and a lost race (EEXIST) is not an error. */
static int create_file(int dirfd, const char *what, const char *name,
		       int fifo, mode_t mode, char *err, size_t errlen)
{
	char tmp[64];
	int fd, rc;

	for (int tries = 0;; tries++) {
		gm__tmp_name(tmp, sizeof tmp);
		if (fifo) {
			if (mkfifoat(dirfd, tmp, 0600) == 0)
				fd = openat(dirfd, tmp, O_RDWR | O_NONBLOCK |
					    O_NOFOLLOW | O_CLOEXEC);
			else
				fd = -2;
		} else {
			fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL |
				    O_NOFOLLOW | O_CLOEXEC, 0600);
		}
		if (fd >= 0 || errno != EEXIST || tries >= 8)
			break;
	}
	if (fd == -2 || (fd < 0 && errno == EEXIST))
		goto fail;
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
	errno = -rc;
fail:
	rc = -errno;
	return gm__fail(rc, err, errlen, "cannot create %s: %s%s", what,
			strerror(-rc), rc == -EACCES ?
			" (its directory is not writable for you: ask its owner, or root with `gpumutex init`, to make it)" : "");
}

int gm__open(int dirfd, const char *what, const char *name, int flags,
	     int fifo, mode_t mode, char *err, size_t errlen)
{
	/* Never O_CREAT on an existing file: with fs.protected_regular and
	 * protected_fifos, that fails for files of other users in a sticky
	 * directory even though a plain open would succeed. */
	const int f = flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
	char note[64];

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
		rc = -errno;
		gm__owner_note(dirfd, name, note, sizeof note);
		if (rc == -ELOOP)
			return gm__fail(rc, err, errlen,
					"%s is a symbolic link%s; gpumutex refuses to follow it",
					what, note);
		if (rc == -EACCES)
			return gm__fail(rc, err, errlen,
					"cannot open %s: permission denied%s (another user made it with a restrictive mode; remove it or run `gpumutex init` as root)",
					what, note);
		if (rc != -ENOENT || !mode || tries > 3)
			return gm__fail(rc, err, errlen, "cannot open %s: %s%s",
					what, strerror(-rc), note);
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

/* For `gpumutex init` as root: make `fd` root's with `mode`. Changing the
 * owner of a file or directory in use is safe: the locks belong to open
 * descriptions, which do not change. */
static int own(int fd, mode_t mode, const char *what, char *err,
	       size_t errlen)
{
	if (fchown(fd, 0, 0) < 0 || fchmod(fd, mode) < 0)
		return gm__fail(-errno, err, errlen, "cannot give %s to root: %s",
				what, strerror(errno));
	return 0;
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

int gm_lockdir_secure(const struct gm_config *cfg, char *err, size_t errlen)
{
	static const mode_t modes[4] = { 0755, 0755, 01777, 01777 };
	static const char *const names[4] = {
		"the lock directory", "dev/", "queue/", "job/" };
	struct gm__dir d;
	int rc, fd;

	if (geteuid() != 0)
		return 0;
	rc = gm__dir_open(cfg->lock_dir, 0, &d, err, errlen);
	if (rc)
		return rc;
	{
		int fds[4] = { d.root, d.dev, d.queue, d.job };
		for (int i = 0; i < 4 && rc == 0; i++)
			rc = own(fds[i], modes[i], names[i], err, errlen);
	}
	for (int i = 0; i < cfg->ndevices && rc == 0; i++) {
		fd = gm__dev_open(&d, cfg->devices[i], O_RDONLY, err, errlen);
		rc = fd < 0 ? fd : own(fd, 0666, "a device file", err, errlen);
		if (fd >= 0)
			gm__close(fd);
	}
	if (rc == 0) {
		fd = gm__open(d.queue, "ticket counter queue/seq", "seq",
			      O_RDONLY, 0, 0, err, errlen);
		rc = fd < 0 ? fd : own(fd, 0666, "queue/seq", err, errlen);
		if (fd >= 0)
			gm__close(fd);
	}
	if (rc == 0)
		gm__queue_sweep(&d, (uid_t)-1, 0);
	gm__dir_close(&d);
	return rc;
}

int gm_lockdir_declare(const struct gm_config *cfg, char *err, size_t errlen)
{
	struct gm__dir d;
	char tmp[64], buf[GM_MAX_DEVICES * 4 + 64];
	size_t off;
	int fd, rc = gm__dir_open(cfg->lock_dir, 0, &d, err, errlen);

	if (rc)
		return rc;
	off = (size_t)snprintf(buf, sizeof buf, "gpumutex-pool 1\ndevices=");
	off += gm_format_list(buf + off, sizeof buf - off, cfg->devices,
				 cfg->ndevices);
	off += (size_t)snprintf(buf + off, sizeof buf - off, "\n");
	/* Whole or not at all: written under a name of ours, then renamed
	 * over the old declaration, so a reader sees one or the other. */
	gm__tmp_name(tmp, sizeof tmp); /* one nobody can make first */
	errno = 0;
	fd = openat(d.root, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
		    O_CLOEXEC, 0644);
	if (fd < 0 || fchmod(fd, 0644) < 0 ||
	    write(fd, buf, off) != (ssize_t)off ||
	    renameat(d.root, tmp, d.root, GM_POOL_FILE) < 0) {
		rc = errno ? -errno : -EIO;
		if (fd >= 0)
			close(fd);
		unlinkat(d.root, tmp, 0);
		gm__dir_close(&d);
		return gm__fail(rc, err, errlen,
				"cannot write %s/" GM_POOL_FILE ": %s%s", cfg->lock_dir,
				strerror(-rc), rc == -EPERM || rc == -EACCES ?
				" (another user declared the pool: run gpumutex init as that user or as root)" : "");
	}
	close(fd);
	gm__dir_close(&d);
	return 0;
}
