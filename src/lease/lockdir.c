/*
 * lockdir.c - the lock directory, its files, and the lock primitives.
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

/*
 * Descriptors of acquires in progress. A child forked (by another thread)
 * while this process is inside gm_lease_acquire shares them: it would keep
 * the parent's job lock and ticket FIFOs open for writing, and so delay
 * the doorbells of everyone waiting for them, including itself.
 * gm_lease_forget_inflight() closes them in such a child. Slots hold
 * fd + 1 (0 is free) and are claimed with compare-and-swap, since several
 * threads may acquire at once.
 */
#define GM_INFLIGHT_SLOTS 256
static int inflight[GM_INFLIGHT_SLOTS];

int gm__track(int fd)
{
	for (int i = 0; fd >= 0 && i < GM_INFLIGHT_SLOTS; i++) {
		int free_slot = 0;
		if (__atomic_compare_exchange_n(&inflight[i], &free_slot, fd + 1, 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	return fd; /* a full table only means a child may keep one open */
}

void gm__untrack(int fd)
{
	for (int i = 0; fd >= 0 && i < GM_INFLIGHT_SLOTS; i++) {
		int mine = fd + 1;
		if (__atomic_compare_exchange_n(&inflight[i], &mine, 0, 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return;
	}
}

void gm__close(int fd)
{
	gm__untrack(fd);
	close(fd);
}

void gm_lease_forget_inflight(void)
{
	for (int i = 0; i < GM_INFLIGHT_SLOTS; i++) {
		int v = __atomic_exchange_n(&inflight[i], 0, __ATOMIC_ACQ_REL);
		if (v > 0)
			close(v - 1);
	}
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
			/* O_DIRECTORY|O_NOFOLLOW says ENOTDIR for a symlink;
			 * ENOTDIR also comes from a file higher up the path. */
			struct stat st;
			int r = gm__fstatat(parent < 0 ? AT_FDCWD : parent,
					    name, &st, AT_SYMLINK_NOFOLLOW);
			if (r == 0 && S_ISLNK(st.st_mode))
				return gm__fail(-ELOOP, err, errlen,
						"%s is a symbolic link; gpumutex refuses to follow it (set GPUMUTEX_LOCK_DIR to a real directory)",
						path);
			if (r == 0)
				return gm__fail(-ENOTDIR, err, errlen,
						"%s exists but is not a directory", path);
			return gm__fail(-ENOTDIR, err, errlen,
					"cannot open lock directory %s: a component of the path above it is not a directory",
					path);
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
	/* "<path>/<sub>", for messages only. On the heap: a lock directory
	 * path can be 4 KiB, and this runs on CUDA threads' small stacks. */
	size_t splen = strlen(path) + 8;
	char *sp = malloc(splen);

	d->root = d->dev = d->queue = d->job = -1;
	if (!sp)
		return gm__fail(-ENOMEM, err, errlen,
				"cannot open lock directory %s: out of memory",
				path);
	d->root = open_dir(-1, path, path, create, err, errlen);
	if (d->root < 0) {
		int rc = d->root;
		d->root = -1;
		free(sp);
		return rc;
	}
	for (int i = 0; i < 3; i++) {
		snprintf(sp, splen, "%s/%s", path, sub[i]);
		*slot[i] = open_dir(d->root, sub[i], sp, create, err, errlen);
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

static struct flock one_byte(short type, int64_t start)
{
	struct flock fl;

	memset(&fl, 0, sizeof fl);
	fl.l_type = type;
	fl.l_whence = SEEK_SET;
	fl.l_start = (off_t)start;
	fl.l_len = 1;
	return fl;
}

int gm__lock(int fd, int cmd, short type, int64_t start)
{
	struct flock fl = one_byte(type, start);

	for (;;) {
		if (fcntl(fd, cmd, &fl) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		return errno == EACCES ? -EAGAIN : -errno;
	}
}

void gm__unlock_all(int fd)
{
	struct flock fl;

	memset(&fl, 0, sizeof fl);
	fl.l_type = F_UNLCK;
	fl.l_whence = SEEK_SET; /* l_start 0 and l_len 0: the whole file */
	while (fcntl(fd, F_OFD_SETLK, &fl) < 0 && errno == EINTR)
		;
}

int gm__probe(int fd, short type, int64_t start)
{
	struct flock fl = one_byte(type, start);

	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		return -errno;
	return fl.l_type;
}

/* fstat, fstatat and lstat became real glibc functions (GLIBC_2.33) only
 * recently; before, they were inline wrappers of __fxstat and friends. The
 * system call is the same everywhere and, on Linux's 64-bit ABIs, fills
 * the same struct stat, so call it directly and keep the library loadable
 * on old glibc (tools/gate.sh). */
int gm__fstatat(int dirfd, const char *name, struct stat *st, int flags)
{
	return (int)syscall(SYS_newfstatat, dirfd, name, st, flags);
}

int gm__fstat(int fd, struct stat *st)
{
	return gm__fstatat(fd, "", st, AT_EMPTY_PATH);
}

int gm__still_linked(int dirfd, const char *name, int fd)
{
	struct stat a, b;

	if (gm__fstat(fd, &a) < 0 ||
	    gm__fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t gm__mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
int64_t gm__real_ns(void) { return clock_ns(CLOCK_REALTIME); }

int gm__wait(struct pollfd *fds, int n, int64_t deadline_ns, int recheck_ms)
{
	for (;;) {
		int64_t ms = recheck_ms > 0 ? recheck_ms : -1;

		if (deadline_ns >= 0) {
			int64_t left = deadline_ns - gm__mono_ns();
			if (left <= 0)
				return -ETIMEDOUT;
			left = (left + 999999) / 1000000;
			if (ms < 0 || left < ms)
				ms = left;
		}
		for (int i = 0; i < n; i++) {
			fds[i].events = 0; /* POLLHUP is reported regardless */
			fds[i].revents = 0;
		}
		int r = poll(fds, (nfds_t)n, ms > INT32_MAX ? INT32_MAX : (int)ms);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0) {
			if (deadline_ns >= 0 && gm__mono_ns() >= deadline_ns)
				return -ETIMEDOUT;
			if (recheck_ms > 0)
				return 0;
		}
	}
}

#ifdef GM_TEST_CRASHPOINTS
#include <signal.h>
void gm__crashpoint(const char *name)
{
	const char *at = getenv("GM_CRASH_AT");
	if (at && strcmp(at, name) == 0)
		kill(getpid(), SIGKILL);
}
#endif

void gm__cmdline(pid_t pid, char *out, size_t outlen)
{
	char path[64];
	int fd;
	ssize_t len;

	out[0] = '\0';
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	len = read(fd, out, outlen - 1);
	close(fd);
	if (len <= 0) {
		out[0] = '\0';
		return;
	}
	while (len > 0 && out[len - 1] == '\0')
		len--;
	for (ssize_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)out[i];
		if (c == '\0')
			out[i] = ' ';
		else if (c < 0x20 || c == 0x7f)
			out[i] = '?';
	}
	out[len] = '\0';
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

int gm_lockdir_declare(const struct gm_config *cfg, char *err, size_t errlen)
{
	struct gm__dir d;
	char tmp[64], buf[GM_MAX_DEVICES * 4 + 64];
	size_t off;
	int fd, rc = gm__dir_open(cfg->lock_dir, 0, &d, err, errlen);

	if (rc)
		return rc;
	off = (size_t)snprintf(buf, sizeof buf, "gpumutex-pool 1\ndevices=");
	for (int i = 0; i < cfg->ndevices; i++)
		off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%d",
					i ? "," : "", cfg->devices[i]);
	off += (size_t)snprintf(buf + off, sizeof buf - off, "\n");
	/* Whole or not at all: written under a name of ours, then renamed
	 * over the old declaration, so a reader sees one or the other. */
	snprintf(tmp, sizeof tmp, ".tmp." GM_POOL_FILE ".%d", (int)getpid());
	unlinkat(d.root, tmp, 0);
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
