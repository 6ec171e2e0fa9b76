/*
 * internal.h - private helpers of the lease core (prefix gm__).
 */
#ifndef GPUMUTEX_LEASE_INTERNAL_H
#define GPUMUTEX_LEASE_INTERNAL_H

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/stat.h>

#include "lease.h"

/* Old glibc headers lack the open-file-description lock commands; the
 * kernel (3.15+) has had them under these numbers all along. */
#ifndef F_OFD_GETLK
#define F_OFD_GETLK 36
#define F_OFD_SETLK 37
#define F_OFD_SETLKW 38
#endif

#define GM_DEFAULT_RECHECK_MS 10000

/* Byte 0 of a device file is the device itself; lease L's members also
 * hold byte GM_LEASE_OFF + L, which names the lease (see docs/design.md). */
#define GM_LEASE_OFF 1
/* Lease ids are random, from 1 to GM_LEASE_MAX (so 1+L fits in off_t). */
#define GM_LEASE_MAX ((UINT64_C(1) << 61) - 1)
/* Records are read whole up to this size; members are appended only
 * while a record is below 3/8 of it, so it cannot grow for ever. */
#define GM_RECORD_MAX 4096
/* The pool `gpumutex init` declares, in the lock directory itself:
 * "gpumutex-pool 1\ndevices=<list>\n" (gm_lockdir_declare). */
#define GM_POOL_FILE "pool"

/* Format into err (if any) and return rc: `return gm__fail(-EINVAL, ...)`. */
int gm__fail(int rc, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Open descriptors of a lock directory and its three subdirectories. */
struct gm__dir {
	int root, dev, queue, job;
};

/*
 * Open (and with `create`, make) the lock directory `path` and its
 * subdirectories, refusing symlinks, non-directories and directories that
 * others could tamper with. Returns 0 or -errno with a message. On error
 * nothing stays open.
 */
int gm__dir_open(const char *path, int create, struct gm__dir *d, char *err,
		 size_t errlen);
void gm__dir_close(struct gm__dir *d);

/*
 * Open `name` in `dirfd` with `flags` (O_RDONLY or O_RDWR; O_NOFOLLOW,
 * O_CLOEXEC and O_NONBLOCK are added), which must be a FIFO (`fifo`) or a
 * regular file. With `mode` != 0 a missing file is created first with that
 * exact mode, whatever the umask, and appears under `name` only complete.
 * Returns the descriptor or -errno with a message naming `what`.
 */
int gm__open(int dirfd, const char *what, const char *name, int flags,
	     int fifo, mode_t mode, char *err, size_t errlen);

/* List directory `dirfd` through a descriptor of its own (NULL on error). */
DIR *gm__listdir(int dirfd);

/* The in-flight registry (lockdir.c): gm__track(fd) records a descriptor
 * an acquire opened (and returns fd, so it can wrap the open);
 * gm__close(fd) forgets and closes it; gm__untrack forgets only. */
int gm__track(int fd);
void gm__untrack(int fd);
void gm__close(int fd);

/* Open device `index`'s FIFO, creating it (0666) if missing. */
int gm__dev_open(const struct gm__dir *d, int index, int flags, char *err,
		 size_t errlen);

/* One-byte OFD lock at `start`: cmd F_OFD_SETLK/F_OFD_SETLKW, type
 * F_RDLCK/F_WRLCK/F_UNLCK. Returns 0 or -errno (-EAGAIN when taken). */
int gm__lock(int fd, int cmd, short type, int64_t start);

/* Drop every lock this description holds on the file. */
void gm__unlock_all(int fd);

/* Who holds byte `start` in a way that conflicts with `type` from some
 * other open file description? Returns F_UNLCK, F_RDLCK, F_WRLCK or -errno. */
int gm__probe(int fd, short type, int64_t start);

/* fstat/fstatat through the system call (see lockdir.c for why). */
int gm__fstat(int fd, struct stat *st);
int gm__fstatat(int dirfd, const char *name, struct stat *st, int flags);

/* 1 if `fd` is still the file called `name` in `dirfd`, else 0. */
int gm__still_linked(int dirfd, const char *name, int fd);

/* Random bytes (getrandom, else /dev/urandom, else time and pid). */
void gm__random_bytes(void *out, size_t len);
uint64_t gm__random_u64(void);

/* CLOCK_MONOTONIC / CLOCK_REALTIME in nanoseconds. */
int64_t gm__mono_ns(void);
int64_t gm__real_ns(void);

/*
 * Sleep until one of `fds` (doorbells: read ends of FIFOs) reports
 * POLLHUP, i.e. its last writer - the last holder - has gone, or until
 * `deadline_ns` (CLOCK_MONOTONIC, -1 for none), or for at most
 * `recheck_ms` (0: no limit). Returns 0 when woken or the recheck period
 * passed, -ETIMEDOUT at the deadline.
 */
int gm__wait(struct pollfd *fds, int n, int64_t deadline_ns, int recheck_ms);

/* Parse a lease record's "lease=" and "devices=" lines; 0 or -EINVAL. */
int gm__record_parse(const char *text, uint64_t *lease, int *devices,
		     int *ndevices);

/* 1 if some description holds lease `lease`'s name byte on any of the
 * devices (the lease has a live member), 0 if none does, -1 if that could
 * not be told (a device file could not be opened). Takes no lock. */
int gm__lease_alive(const struct gm__dir *d, uint64_t lease,
		    const int *devices, int ndevices);

/* Read a lease record: a regular file (anything else is refused without
 * blocking), up to GM_RECORD_MAX-1 bytes, NUL-terminated, into *text,
 * which the caller frees (heap, not stack: the core runs on the stacks
 * of CUDA threads, which can be 16 KiB); its owner in *owner.
 * 0 or -errno (-ENOENT: none; -EINVAL: not a regular file; -ENOMEM). On
 * error *text is NULL. */
int gm__read_record(int dirfd, const char *name, char **text, uid_t *owner);

/* Parse a ticket's file name (see lease.c). 0 or -EINVAL. */
int gm__ticket_parse(const char *name, uint64_t *seq, unsigned *uid,
		     int *pid, int *want, uint64_t *mask, char *job,
		     size_t joblen);

/* Remove this user's dead jobs (job FIFO unlocked, lease without
 * members), except `keep`. Best effort, never blocks. */
void gm__cleanup_jobs(const struct gm__dir *d, const char *keep);

/*
 * Crash injection for the tests: in a build with GM_TEST_CRASHPOINTS (the
 * sanitizer test build only, never the shipped library), a process whose
 * GM_CRASH_AT names the point kills itself there with SIGKILL.
 */
#ifdef GM_TEST_CRASHPOINTS
void gm__crashpoint(const char *name);
#define GM_CRASHPOINT(name) gm__crashpoint(name)
#else
#define GM_CRASHPOINT(name) ((void)0)
#endif

/* Read this process's command line (NULs as spaces, cut to GM_CMD_MAX). */
void gm__cmdline(pid_t pid, char *out, size_t outlen);

#endif
