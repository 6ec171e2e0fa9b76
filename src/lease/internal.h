/*
 * internal.h - private helpers of the lease core (prefix gm__).
 */
#ifndef GPUMUTEX_LEASE_INTERNAL_H
#define GPUMUTEX_LEASE_INTERNAL_H

#include <dirent.h>
#include <errno.h>
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
/* A job file's bytes GM_SUSP_OFF + d: read-locked by the job's members
 * suspended on device d (gm_lease_suspended_mark), for as long as they
 * are. */
#define GM_SUSP_OFF 16
/* Lease ids are random, from 1 to GM_LEASE_MAX (so 1+L fits in off_t). */
#define GM_LEASE_MAX ((UINT64_C(1) << 61) - 1)
/* Records are read whole up to this size; members are appended only
 * while a record is below 3/8 of it, so it cannot grow for ever. */
#define GM_RECORD_MAX 4096
/* The pool `gpumutex init` declares, in the lock directory itself:
 * "gpumutex-pool 1\ndevices=<list>\n" (gm_lockdir_declare). */
#define GM_POOL_FILE "pool"
/* job/<user>/held.<d>: names the record of that user's job that was
 * last granted device d (lease.c, holder_links). */
#define GM_HELD_FILE "held."

/* Format into err (if any) and return rc: `return gm__fail(-EINVAL, ...)`. */
int gm__fail(int rc, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Open descriptors of a lock directory and its three subdirectories, and
 * of this user's directory in job/ (gm__user_dir; -1 until found). */
struct gm__dir {
	int root, dev, queue, job, user;
	char user_name[40];          /* its name in job/ */
};

/* What gm__ticket_open (and others) say of a file that the protocol did
 * not make under a name it uses: skip it. */
#define GM__FOREIGN (-EXDEV)

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
 * Find (or make) this user's directory in job/, where its job files live,
 * and open it into d->user. It is job/<uid>, mode 0755: nobody else can
 * put anything in it, so no other user can plant a file under the name of
 * one of our job files. If another user took the name job/<uid> first,
 * it is job/<uid>.<16 hex digits> instead, chosen under the counter lock
 * (so that all processes of the user agree on one). `deadline` bounds the
 * wait for that lock: -ETIMEDOUT (without a message) when it passes.
 * Returns 0 or -errno with a message.
 */
int gm__user_dir(struct gm__dir *d, int64_t deadline, char *err,
		 size_t errlen);

/* The same directory, only if it exists (nothing is made, no lock is
 * taken): 0 with d->user open, -ENOENT when this user has none yet, or
 * -errno with a message. */
int gm__user_dir_find(struct gm__dir *d, char *err, size_t errlen);

/* renameat that never replaces an existing `to` (RENAME_NOREPLACE where
 * the kernel and filesystem have it); -1 with errno set on failure. */
int gm__rename_noreplace(int dirfd, const char *from, const char *to);

/* " (owned by uid U, mode M)" for `name` in `dirfd`, or "" if it cannot
 * be stat'ed: for messages that must say whose file is in the way. */
void gm__owner_note(int dirfd, const char *name, char *out, size_t outlen);

/* A fresh private temporary name: ".tmp.<pid>.<16 random hex digits>". */
void gm__tmp_name(char *buf, size_t len);

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
/* The same over `len` bytes from `start`: the first conflicting lock's type. */
int gm__probe_range(int fd, short type, int64_t start, int64_t len);

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

/* Parse a ticket's file name (see queue.c). 0 or -EINVAL. */
int gm__ticket_parse(const char *name, uint64_t *seq, unsigned *uid,
		     int *pid, int *want, uint64_t *mask, char *job,
		     size_t joblen);

/* A ticket this process holds. */
struct gm__ticket {
	uint64_t seq;                /* its number; 0: none */
	char name[256];              /* its name in queue/ */
	int fd;                      /* holds its write lock; -1: none */
	int cfd;                     /* queue/seq, unlocked, for the marks */
	int marks_ok;                /* queue/seq had its marks line */
};

/*
 * The queue's marks (queue.c): low[d] is a ticket number below which
 * every ticket whose candidates include device d is known to be over
 * (granted, given up or dead). They only grow. 0 means "nothing known".
 */
struct gm__marks {
	uint64_t low[GM_MAX_DEVICES];
};

/* Read the marks through `cfd` (queue/seq, kept by the ticket): 0, or
 * -errno with *m all zero (nothing known, which is always safe). */
int gm__marks_read(int cfd, struct gm__marks *m);

/* Raise every low[d] to at least to->low[d] (under the counter lock,
 * tried a few times without blocking or sleeping: the marks only save
 * work, so a busy or damaged counter just leaves them as they are). */
void gm__marks_raise(int cfd, const struct gm__marks *to);

/*
 * Open ticket `name` of user `uid` (from its name) for probing: the
 * descriptor, -ENOENT when it is gone, GM__FOREIGN when what is there is
 * not a ticket the protocol made (not a 0644 FIFO owned by `uid`: someone
 * else's file under such a name, never a waiter), or -errno with a
 * message naming the file and its owner when it may be a waiter but
 * cannot be opened.
 */
int gm__ticket_open(int qfd, const char *name, unsigned uid, char *err,
		    size_t errlen);

/* Open queue/seq and take its write lock, waiting until `deadline`
 * (CLOCK_MONOTONIC ns; -1: none). The locked descriptor, -ETIMEDOUT
 * (no message: the caller knows what it waited for), or -errno. */
int gm__counter_lock(const struct gm__dir *d, int64_t deadline, char *err,
		     size_t errlen);

/*
 * Take the next ticket for `cfg` (candidates `mask`): the ticket FIFO is
 * made complete (0644, write-locked) under a temporary name, then named
 * with the next number under the counter lock, before the counter moves
 * on. A damaged counter is recovered from the live tickets. 0 with *t
 * filled, -ETIMEDOUT (no message), or -errno with a message.
 */
int gm__ticket_take(const struct gm__dir *d, const struct gm_config *cfg,
		    uint64_t mask, int64_t deadline, struct gm__ticket *t,
		    char *err, size_t errlen);

/* Unlink and close ticket *t (nothing if it has none). `granted`: the
 * candidates of a ticket that reached the head and was granted; every
 * older ticket that intersects them is over, which the marks record
 * before the ticket goes (so the successor it wakes finds them). */
void gm__ticket_release(const struct gm__dir *d, struct gm__ticket *t,
			uint64_t granted);

/* Remove what is provably over in queue/: tickets nobody holds and index
 * links whose ticket is gone; those of user `only`, or with (uid_t)-1 of
 * everyone (root's `gpumutex init`: in the sticky queue/ nobody else may
 * remove others' files); only numbers below `below`, which the counter
 * has passed (the caller's own ticket number; 0: the counter now, read
 * under its lock). Lists the directory: for the every-16th-ticket
 * cleanup and `init`, never for every claim. */
void gm__queue_sweep(const struct gm__dir *d, uid_t only, uint64_t below);

/* The ticket counter (the next number), read under its lock without
 * waiting for it; 0 when it cannot be known. */
uint64_t gm__counter_now(const struct gm__dir *d);

/* The name of ticket `seq`'s index link in queue/ ("<seq:016x>"). */
#define GM__INDEX_LEN 20
void gm__index_name(char out[GM__INDEX_LEN], uint64_t seq);

/* Remove ticket `name` (number `seq`, below the counter) of this user,
 * and its index link if that names it (a dead ticket can share its
 * number with a live one that has the index: gm__index_unlink). */
void gm__ticket_unlink(const struct gm__dir *d, const char *name,
		       uint64_t seq);
/* Remove the index link of number `seq` if it names ticket `name`. The
 * caller knows the counter has passed `seq`. */
void gm__index_unlink(const struct gm__dir *d, const char *name,
		      uint64_t seq);

/*
 * The youngest live ticket older than *t whose candidates intersect
 * `mask`: a doorbell (read end of its FIFO) to sleep on, or -1 when there
 * is none (we are at the head), or -errno with a message. Dead tickets of
 * ours are removed on the way; files that are not tickets are passed
 * over. Its cost does not grow with the queue (ahead.c). *ahead is set to
 * a bound on the live tickets ahead: exact when it is 0 or 1.
 */
int gm__ticket_ahead(const struct gm__dir *d, const struct gm__ticket *t,
		     uint64_t mask, int *ahead, char *err, size_t errlen);

/* Remove this user's dead jobs (job FIFO unlocked, lease without
 * members), except `keep`. Best effort, never blocks. */
void gm__cleanup_jobs(const struct gm__dir *d, const char *keep);

/*
 * Crash injection for the tests: in a build with GM_TEST_CRASHPOINTS (the
 * sanitizer test build only, never the shipped library), a process whose
 * GM_CRASH_AT names the point kills itself there with SIGKILL, and one
 * whose GM_STOP_AT names it stops itself there (SIGSTOP) for the test to
 * look at it.
 */
#ifdef GM_TEST_CRASHPOINTS
void gm__crashpoint(const char *name);
#define GM_CRASHPOINT(name) gm__crashpoint(name)
#else
#define GM_CRASHPOINT(name) ((void)0)
#endif

/* Read this process's command line (NULs as spaces, cut to GM_CMD_MAX). */
void gm__cmdline(pid_t pid, char *out, size_t outlen);

/* This process's PID namespace (the inode of /proc/self/ns/pid; 0 when
 * unknown). Records carry it so that a reader in another namespace (a
 * container sharing the lock directory) does not show PIDs that mean
 * other processes there. */
unsigned long long gm__pidns(void);

/* Is `pid`, as seen from here, the process of user `uid` that took the
 * ticket `ticket` (its FIFO's stat) at `since_ns` (CLOCK_REALTIME)? 0 when
 * no such process is visible, it belongs to another user, it does not
 * have the ticket open (when its descriptors can be listed: ours, or as
 * root), or it started after the ticket (otherwise): the ticket's owner is
 * then in another PID namespace. 1 otherwise. */
/* Field `field` (numbered as in proc(5), 3 or more: after the command
 * name, which may hold blanks and parentheses) of /proc/<pid>/stat, as an
 * unsigned decimal number. 0; -1 when the file cannot be read (the process
 * is gone, or never was); -2 when it has no such field. */
int gm__proc_stat_field(pid_t pid, int field, uint64_t *out);
int gm__pid_here(pid_t pid, uid_t uid, int64_t since_ns,
		 const struct stat *ticket);

#endif
