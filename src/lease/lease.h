/*
 * lease.h - the lease core: who may use which GPU.
 *
 * Plain POSIX C with no CUDA in it. The preload library calls it from cuInit,
 * the CLI calls it for `gpumutex status`, and the tests call it directly.
 * The protocol (files, locks, order, crash points) is in docs/design.md.
 *
 * Conventions: every function that can fail returns 0 or a negative errno
 * value and, where it takes an `err` buffer, writes one human-readable
 * sentence there (no "gpumutex:" prefix, no newline). Nothing here prints,
 * exits or installs signal handlers; the only global state is a table of
 * the descriptors of acquires in progress (gm_lease_forget_inflight). All
 * descriptors are O_CLOEXEC. Functions are safe to call from several
 * threads at once as long as they do not share a struct. They keep their
 * stack use small (no frame over 2 KiB, which the build enforces; paths,
 * records and working sets are on the heap), because the preload library
 * calls them from cuInit on threads whose stacks can be 16 KiB; so ENOMEM
 * is one more possible error.
 */
#ifndef GPUMUTEX_LEASE_H
#define GPUMUTEX_LEASE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GM_MAX_DEVICES 64      /* device indices 0..63 */
#define GM_JOB_MAX 64          /* longest GPUMUTEX_JOB value */
#define GM_CMD_MAX 256         /* command lines are cut to this */
#define GM_ERR_MAX 512         /* a comfortable size for err buffers */
#define GM_TIMEOUT_MAX 1000000000 /* longest GPUMUTEX_TIMEOUT, seconds */
#define GM_DEFAULT_LOCK_DIR "/tmp/libgpumutex"

/* What one process asks for, from the environment or from a caller. */
struct gm_config {
	int devices[GM_MAX_DEVICES]; /* candidate device indices, in order */
	int ndevices;
	int want;                    /* devices one job needs (>= 1) */
	double timeout_s;            /* < 0: wait forever; 0: do not wait */
	char lock_dir[4096];
	char job[GM_JOB_MAX + 1];    /* "" when the environment had none */
	int quiet;                   /* GPUMUTEX_QUIET: for callers that print */
	int recheck_ms;              /* fallback re-check period; 0 = none */
};

/*
 * Fill `cfg` from the process environment: GPUMUTEX_VISIBLE_DEVICES,
 * GPUMUTEX_NUM_DEVICES, GPUMUTEX_LOCK_DIR, GPUMUTEX_TIMEOUT, GPUMUTEX_JOB,
 * GPUMUTEX_QUIET and GPUMUTEX_RECHECK_MS.
 * Returns 1 when GPUMUTEX_VISIBLE_DEVICES is unset or empty (gpumutex is
 * not configured: the caller passes through; the other variables are then
 * not read), 0 when `cfg` is valid, and
 * -EINVAL with a message naming the variable, its value and what is
 * expected when any variable is malformed. A missing GPUMUTEX_JOB is not an
 * error: cfg->job is left empty and gm_job_generate() makes one.
 */
int gm_config_from_env(struct gm_config *cfg, char *err, size_t errlen);

/*
 * The configuration file (docs/deploy.md, "The configuration file").
 * GM_SYSTEM_CONFIG is fixed at build time; only a test build may change it.
 * Format: "key = value" lines, '#' comments (a line starting with '#', or
 * from a '#' after a blank to the end of the line), keys visible_devices,
 * num_devices, lock_dir, timeout, quiet, recheck_ms, idle_suspend_ms, gpu_time
 * (values as for the
 * GPUMUTEX_* variables; quiet also yes/no) and enforce = yes|no.
 */
#ifndef GM_SYSTEM_CONFIG
#define GM_SYSTEM_CONFIG "/etc/gpumutex.conf"
#endif
#define GM_CONF_MAX 65536 /* longest configuration file, bytes */
/* Where `gpumutex install --system` puts the library (and names it in
 * /etc/ld.so.preload). A library loaded from this path is a machine-wide
 * install: gm_config_resolve's GM_RESOLVE_INSTALLED. */
#define GM_INSTALL_LIB "/usr/local/lib/gpumutex/libgpumutex.so"
/* gm_config_resolve flags. */
#define GM_RESOLVE_INSTALLED 1

enum {
	GM_CONF_VISIBLE_DEVICES, GM_CONF_NUM_DEVICES, GM_CONF_LOCK_DIR,
	GM_CONF_TIMEOUT, GM_CONF_QUIET, GM_CONF_RECHECK_MS, GM_CONF_ENFORCE,
	GM_CONF_IDLE_SUSPEND_MS, GM_CONF_GPU_TIME, GM_CONF_NKEYS
};

/* A parsed file: val[k] points into text (NULL: key absent), line[k] is
 * its line number. */
struct gm_conf {
	char *text;
	const char *val[GM_CONF_NKEYS];
	int line[GM_CONF_NKEYS];
	int enforce;
	int present;
};

/* Where a resolved configuration came from (gm_config_resolve). */
struct gm_conf_info {
	int system_present; /* the system file exists (and was valid) */
	int enforce;        /* ... and says enforce = yes */
	int user_file;      /* GPUMUTEX_CONFIG's file was used instead */
	int secure;         /* AT_SECURE: the environment was not read */
	int from_file;      /* some setting came from the file */
	int from_env;       /* some setting came from the environment */
	char file[512];     /* the file whose settings apply ("" none) */
	char notes[1024];   /* settings refused under enforce, "; "-joined */
	/* The file's idle_suspend_ms (UINT32_MAX: absent): the default, and
	 * with enforce a ceiling that GPUMUTEX_IDLE_SUSPEND_MS may only lower
	 * (the preload library applies it: src/preload/suspend.c). */
	unsigned idle_suspend_file_ms;
	/* The file's gpu_time (-1: absent, 0 no, 1 yes): the default for
	 * GPUMUTEX_GPU_TIME, and with enforce the value that stands
	 * (src/preload/gputime.c applies it). */
	int gpu_time_file;
};

/* "visible_devices" for GM_CONF_VISIBLE_DEVICES, ...; NULL if unknown. */
const char *gm_conf_key_name(int key);

/*
 * Parse `len` bytes of `text` (modified: lines are cut in place) into `c`,
 * which must be zeroed; `path` names the file in messages. Refuses NUL
 * bytes, lines that are not "key = value", unknown and repeated keys, bad
 * values, and enforce = yes without visible_devices. 0 or -EINVAL (or
 * -ENOMEM) with a message naming the file, the line, the key and what is
 * expected.
 */
int gm_conf_parse(const char *path, char *text, size_t len,
		  struct gm_conf *c, char *err, size_t errlen);

/*
 * Read and parse the file `path` without ever blocking: opened with
 * O_NONBLOCK | O_NOFOLLOW; refused when it is a link, not a regular file,
 * over GM_CONF_MAX bytes, writable by group or others, or owned by anyone
 * but root (`system`) or root and this user (otherwise). Returns 0 (c
 * filled; gm_conf_free it), 1 when `system` and it does not exist, or
 * -errno with a message.
 */
int gm_conf_load(const char *path, int system, struct gm_conf *c, char *err,
		 size_t errlen);
void gm_conf_free(struct gm_conf *c);

/*
 * The configuration of this process, from GM_SYSTEM_CONFIG, GPUMUTEX_CONFIG
 * and the environment (docs/deploy.md, "Precedence"):
 * - no system file and no GPUMUTEX_CONFIG: exactly gm_config_from_env;
 * - a system file without enforce = yes: its settings, each overridden by
 *   its variable; GPUMUTEX_CONFIG names a file to use instead of it;
 * - enforce = yes: GPUMUTEX_CONFIG is ignored; the environment may narrow
 *   (a subset of visible_devices, a num_devices up to their count, a
 *   timeout, quiet, the job) but not choose devices outside the file's,
 *   more of them, or another lock directory: such a setting is dropped
 *   (the file's applies) and described in info->notes.
 * In an AT_SECURE process no variable is read (only the system file).
 * With GM_RESOLVE_INSTALLED in `flags` (the library was loaded from
 * GM_INSTALL_LIB), a missing system file, or a configuration without
 * visible devices, is an error instead of a pass-through: a machine-wide
 * install never lets a process by unqueued because its file went away.
 * Returns 1 when no visible devices result (pass through), 0 when `cfg`
 * is valid, -errno with a message when the file cannot be trusted or read
 * or any setting is malformed (the caller fails closed).
 * gm_config_resolve_at: the same with another system file path (the CLI's
 * --root for tests; the library uses gm_config_resolve only).
 */
int gm_config_resolve(struct gm_config *cfg, struct gm_conf_info *info,
		      int flags, char *err, size_t errlen);
int gm_config_resolve_at(const char *system_path, struct gm_config *cfg,
			 struct gm_conf_info *info, int flags, char *err,
			 size_t errlen);

/*
 * Unsigned numbers without the C library (see num.c for why): digits of
 * `base` (10 or 16, either case) only: no blanks, sign or "0x".
 * gm_scan_uint reads the longest run of digits at `s` and sets `*end` (if
 *   given) to the first character after it; -EINVAL when there is no digit,
 *   -ERANGE when the value exceeds `max`. `*out` is set only on success.
 * gm_parse_uint: the same, but the whole of `s` must be the number
 *   (-EINVAL otherwise).
 */
int gm_scan_uint(const char *s, int base, uint64_t max, uint64_t *out,
		 const char **end);
int gm_parse_uint(const char *s, int base, uint64_t max, uint64_t *out);

/* "0,2,3" from {0,2,3}: the project's one way of writing a list of device
 * indices (or PIDs), cut to fit `len` (NUL-terminated whenever len > 0).
 * Returns the length written. */
size_t gm_format_list(char *buf, size_t len, const int *v, int n);

/* The short form of a job id that every text output shows (gpumutex
 * status, log, report, its picture, the waiting line): the id itself when
 * it has at most GM_JOB_SHORT characters; a longer one (a generated id has
 * 32 hex digits) as its first 12 and "...", 15 in all. `gpumutex log
 * --job` takes it. Returns out. */
#define GM_JOB_SHORT 16
const char *gm_job_short(const char *job, char *out, size_t len);

/*
 * The parsers behind gm_config_from_env, exposed for the CLI and the tests.
 * Each returns 0 or -EINVAL with a message naming `name` (the variable or
 * flag the text came from) and the offending value.
 * gm_parse_devices: "0,2,3" -> {0,2,3}; rejects "", empty entries, signs,
 *   non-digits, values above 63 and duplicates.
 * gm_parse_want: a decimal integer from 1 to `ndevices`.
 * gm_parse_timeout: seconds from 0 to GM_TIMEOUT_MAX as digits with an
 *   optional fraction ("30", "0.5", ".5"); no sign, exponent or "inf".
 * gm_job_check: 1 to GM_JOB_MAX characters from [A-Za-z0-9_-] (it
 *   becomes part of file names).
 * gm_parse_quiet: exactly "1" (quiet) or "0"; anything else ("", "yes",
 *   "false", "00") is refused, since a typo must not flip the meaning.
 * gm_check_lock_dir: an absolute path short enough for gm_config.lock_dir
 *   (the text only; gm_lockdir_prepare checks the directory itself).
 * gm_parse_recheck_ms: milliseconds from 0 (never) to 86400000.
 */
int gm_parse_devices(const char *name, const char *text, int *out, int *n,
		     char *err, size_t errlen);

/*
 * GPUs by UUID (uuid.c). gm_parse_visible: gm_parse_devices for a user's
 * setting (GPUMUTEX_VISIBLE_DEVICES, visible_devices), whose entries may
 * also be GPU UUIDs ("GPU-...", or a prefix naming one GPU), mapped to
 * NVML indices; a MIG instance ("MIG-...") is refused, and so is a UUID
 * when NVML cannot be loaded or does not know it, with a message saying
 * which. gm_uuid_index: one such entry (len bytes at p, in `text` of
 * setting `name`) to its index; 0 or -EINVAL with a message.
 * gm_is_uuid: whether len bytes at p look like a GPU- or MIG- UUID.
 * gm_uuid_dlsym: the dlsym NVML's functions are looked up with; until a
 * program sets it, every UUID is refused ("cannot load NVML").
 */
typedef void *(*gm_dlsym_fn)(void *handle, const char *name);
void gm_uuid_dlsym(gm_dlsym_fn fn);
int gm_parse_visible(const char *name, const char *text, int *out, int *n,
		     char *err, size_t errlen);
int gm_uuid_index(const char *name, const char *text, const char *p,
		  size_t len, int *index, char *err, size_t errlen);
int gm_is_uuid(const char *p, size_t len);
int gm_parse_want(const char *name, const char *text, int ndevices, int *out,
		  char *err, size_t errlen);
int gm_parse_timeout(const char *name, const char *text, double *out,
		     char *err, size_t errlen);
int gm_job_check(const char *name, const char *text, char *err,
		 size_t errlen);
int gm_parse_quiet(const char *name, const char *text, int *out, char *err,
		   size_t errlen);
int gm_check_lock_dir(const char *name, const char *text, char *err,
		      size_t errlen);
int gm_parse_recheck_ms(const char *name, const char *text, int *out,
			char *err, size_t errlen);

/* Write a fresh random job id (32 hex digits) into buf[GM_JOB_MAX + 1]. */
void gm_job_generate(char *buf);

/* The state of a granted lease, as this process holds it. */
struct gm_lease {
	int devices[GM_MAX_DEVICES]; /* granted device indices, ascending */
	int ndevices;
	uint64_t lease_id;           /* unique per lease in this lock dir */
	uint64_t ticket;             /* this process's place in line; 0 if it joined */
	int joined;                  /* 1: joined the job's live lease */
	int fds[GM_MAX_DEVICES];     /* the descriptors that hold the lease */
	uint64_t usable;             /* bit i: device i is one this process may
	                              * use, i.e. one of its candidates; every
	                              * device for a claimer, those
	                              * gm_join_check allows for a joiner */
};

/* What a caller may learn while gm_lease_acquire runs. */
struct gm_wait_info {
	uint64_t ticket;     /* our ticket */
	int ahead;           /* live tickets older than ours that conflict:
	                      * exact when 1, else an upper bound */
	int head;            /* 1: nobody conflicting is ahead; waiting for devices */
	int job_busy;        /* 1: another process of our job is claiming */
	uint64_t narrowed;   /* the candidates (a bit set) when narrowed to
	                      * the GPUs of the job's suspended members
	                      * (gm_lease_acquire), else 0 */
};

struct gm_acquire_hooks {
	/* Called once, the first time the process has to wait (not when it is
	 * served at once, nor with cfg->timeout_s == 0, where it gives up
	 * instead of waiting). The preload prints its one-line message here. */
	void (*on_wait)(void *arg, const struct gm_wait_info *info);
	/* Called after the devices are locked and before the ticket is
	 * released: grants of conflicting jobs are strictly ordered here. */
	void (*on_granted)(void *arg, const struct gm_lease *lease);
	void *arg;
};

/*
 * Take or join the lease of job cfg->job (which must be set) for this
 * process. Joins at once when the job's lease is alive; otherwise takes a
 * ticket, waits first come first served behind every older waiter whose
 * candidate devices intersect ours, then for cfg->want free devices, all
 * at once. When members of the job are suspended (their marks on the job
 * file, gm_lease_suspended_mark) on exactly cfg->want of the candidates,
 * only those are candidates: they can join the new lease when they
 * resume. Blocks in
 * the kernel (poll on FIFO doorbells) and uses no CPU while waiting.
 * On success fills `out` and returns 0: the lease lives as long as the
 * descriptors in out->fds stay open in this process or in forked
 * children; they are O_CLOEXEC and nothing here ever closes them.
 * A joiner holds the whole lease (so that it stays one lease), but may
 * use only out->usable: the lease's devices among its own candidates.
 * Errors: -GM_EJOIN when the job's lease is alive but does not fit this
 * process (gm_join_check: none of its devices, or fewer than cfg->want,
 * are among cfg->devices): the process is not a member and must not use
 * any GPU; -ETIMEDOUT after cfg->timeout_s; -EINVAL, -EACCES, -ELOOP,
 * -ENOTDIR, -EPERM, -ENOSPC or another errno when the lock directory is
 * unusable (the message says why). On any error nothing is left behind
 * (but the job file while suspended members mark it):
 * no descriptor, no lock, no ticket.
 */
int gm_lease_acquire(const struct gm_config *cfg,
		     const struct gm_acquire_hooks *hooks,
		     struct gm_lease *out, char *err, size_t errlen);

/* gm_lease_acquire's and gm_join_check's "does not fit" (EXDEV, which no
 * step of the protocol returns otherwise). */
#define GM_EJOIN EXDEV

/*
 * May a process configured by `cfg` join its job's live lease on
 * `devices` (`ndevices` of them)? It may use the lease's devices that are
 * among its candidates cfg->devices, and needs cfg->want of them: a job's
 * lease cannot grow or move, so a process of the job that wants more, or
 * other GPUs, than the lease holds cannot be served by it. Sets *usable
 * (if given) to those devices as a bit set. Returns 0, or -GM_EJOIN with
 * a message naming the job, the lease's devices and the process's own.
 */
int gm_join_check(const struct gm_config *cfg, const int *devices,
		  int ndevices, uint64_t *usable, char *err, size_t errlen);

/* What a job of this user is doing in a lock directory (gm_job_probe). */
struct gm_job_state {
	uint64_t lease_id;           /* its live lease, when there is one */
	int devices[GM_MAX_DEVICES]; /* the lease's devices, ascending */
	int ndevices;                /* 0 unless gm_job_probe returned 1 */
};

/*
 * Does job `job` of this user (euid) hold a lease in `lock_dir` now?
 * For launchers started inside a job (gpumutex-run, the Python package):
 * a command they start as a new job would queue behind the GPUs its own
 * caller holds. Takes no lock and creates nothing (F_OFD_GETLK probes and
 * a read of the job's record, trusted only if it is ours).
 * Returns 1 when the job has a live lease (`out` names it), 2 when it has
 * none but one of its processes holds the job lock (it is taking one),
 * 0 when neither (also when the directory does not exist), -EINVAL for a
 * malformed job id, or another -errno when it cannot be told.
 */
int gm_job_probe(const char *lock_dir, const char *job,
		 struct gm_job_state *out, char *err, size_t errlen);

/*
 * Give this process's part of lease `l` back: close its descriptors (and
 * set them to -1). The lease ends when the last member lets go; members
 * that share the descriptions (forked children) or have their own
 * (joiners) keep it alive, which is why nothing is unlocked here: an OFD
 * lock belongs to the description, and unlocking it would take it from a
 * child that shares it. Then the event log's exit record of this process
 * for the lease, marked why=give-back (none is written again at exit).
 * Never fails.
 */
void gm_lease_release(struct gm_lease *l);

/*
 * Before giving lease `l` back at exit while this process still has GPU
 * memory (its CUDA teardown to come): mark each of its devices as having
 * an exiting holder, this process, until it is gone. Opens one descriptor
 * per device into fds[0..l->ndevices) (-1 where none), which the caller
 * keeps open until the process exits (closing one drops its mark).
 * Returns 0, or -errno with a message and nothing left open or marked.
 */
int gm_lease_exit_mark(const char *lock_dir, const struct gm_lease *l,
		       int *fds, char *err, size_t errlen);

/*
 * After an allocation on `devices` failed for lack of memory: wait until
 * every process marked as an exiting holder of one of them (other than
 * `self`) is gone. Returns how many were waited for (0: none, so the
 * memory is short for another reason), or -errno with a message. Blocks
 * in the kernel (pidfd, or the mark's lock), never polls.
 */
int gm_lease_exit_wait(const char *lock_dir, const int *devices, int n,
		       pid_t self, char *err, size_t errlen);

/*
 * For a child forked while another thread of its parent was inside
 * gm_lease_acquire (call it from a pthread_atfork child handler): close
 * the descriptors that acquire had open, which the child inherited. Kept,
 * they would hold the parent's job lock and ticket FIFOs open for writing
 * and delay the wake-ups of every waiter behind them (the locks themselves
 * stay the parent's). Async-signal-safe (only close(2)).
 */
void gm_lease_forget_inflight(void);

/*
 * Prepare the lock directory and the device files of cfg->devices, with
 * the checks gm_lease_acquire makes (symlinks, owners, modes), creating
 * what is missing as gm_lease_acquire would. Used by `gpumutex init` and
 * by `gpumutex-run`, so that an unusable directory is its error rather
 * than the command's.
 */
int gm_lockdir_prepare(const struct gm_config *cfg, char *err, size_t errlen);

/*
 * For `gpumutex init` run as root, after gm_lockdir_prepare: make the lock
 * directory, its subdirectories, the device files of cfg->devices and
 * queue/seq root's (taking over existing ones, safely while in use: locks
 * belong to open descriptions), with the lock directory and dev/ at mode
 * 0755 and queue/ and job/ at 1777. Nobody else can then remove, replace
 * or add a device file (docs/permissions.md). Does
 * nothing for other users. 0 or -errno with a message.
 */
int gm_lockdir_secure(const struct gm_config *cfg, char *err, size_t errlen);

/*
 * Declare cfg->devices the lock directory's pool: the GPUs gm_state_read
 * reports as managed even while no job names them (the file `pool` in the
 * lock directory, replaced whole; it only describes, it grants nothing).
 * Used by `gpumutex init`; a later declaration replaces the earlier one.
 * Needs gm_lockdir_prepare first. 0 or -errno with a message.
 */
int gm_lockdir_declare(const struct gm_config *cfg, char *err, size_t errlen);

/*
 * Append a record "gm1 <event> t= mono= uid= pid= job=- <fields>" to this
 * user's event log in `lock_dir` (job/<user>/events.log, docs/report.md),
 * making the user's directory if needed. For `gpumutex sample`'s
 * utilisation records; the lease core writes its own. 0 (also when the
 * log is off, GPUMUTEX_LOG=0, or its file is refused as not ours) or
 * -errno with a message when the lock directory is unusable.
 */
int gm_event_append(const char *lock_dir, const char *event,
		    const char *fields, char *err, size_t errlen);

/* ---- Introspection ---------------------------------------------------- */

enum gm_dev_state { GM_DEV_FREE = 0, GM_DEV_HELD = 1, GM_DEV_GRANTING = 2 };

struct gm_state_lease {
	uint64_t lease_id;
	char job[GM_JOB_MAX + 1];
	uid_t uid;
	int devices[GM_MAX_DEVICES]; /* granted */
	int ndevices;
	int candidates[GM_MAX_DEVICES]; /* what it could have been granted
				      * (its GPUMUTEX_VISIBLE_DEVICES, narrowed);
				      * = devices for a record without them */
	int ncandidates;
	pid_t pids[32];              /* members that announced themselves */
	int npids;
	int nhidden;                 /* more members, in another PID
				      * namespace (their PIDs mean other
				      * processes here) */
	char cmd[GM_CMD_MAX];        /* command line of the first member */
	int64_t start_ns;            /* CLOCK_REALTIME when granted */
};

struct gm_state_waiter {
	uint64_t ticket;
	uid_t uid;
	pid_t pid;
	char job[GM_JOB_MAX + 1];
	int want;
	int devices[GM_MAX_DEVICES]; /* candidates */
	int ndevices;
	int64_t since_ns;            /* CLOCK_REALTIME when it took its ticket */
	char cmd[GM_CMD_MAX];        /* from /proc, "" when not visible */
	int pid_hidden;              /* pid is not this process's PID here
				      * (another PID namespace, or gone) */
};

struct gm_state_device {
	int index;
	enum gm_dev_state state;
	int lease;                   /* index into leases[], -1 if unknown */
};

/*
 * A device is managed now, and listed in devices[], when it is held or
 * being granted, or a candidate of a live waiter or of a live lease, or in
 * the pool `gpumutex init` declared. The other device files (left by jobs
 * that managed other GPUs, or by an earlier pool) are only counted in
 * unmanaged[]: nobody would ever be granted them as things stand.
 */
struct gm_state {
	struct gm_state_device devices[GM_MAX_DEVICES]; /* managed, ascending */
	int ndevices;
	int unmanaged[GM_MAX_DEVICES];   /* other device files, ascending */
	int nunmanaged;
	int pool[GM_MAX_DEVICES];        /* declared by `gpumutex init` */
	int npool;
	struct gm_state_lease *leases;
	int nleases;
	struct gm_state_waiter *waiters; /* in queue order */
	int nwaiters;
	int64_t now_ns;                  /* CLOCK_REALTIME of the snapshot */
};

/*
 * Read the current state of `lock_dir` without taking any lock (only
 * F_OFD_GETLK probes), so it never delays anyone. Returns 0, or -ENOENT
 * when the directory does not exist, or another negative errno. The
 * snapshot is not atomic: a lease may end while it is read.
 */
int gm_state_read(const char *lock_dir, struct gm_state *st, char *err,
		  size_t errlen);

/*
 * The live leases that hold any of `devices` (st->leases only; no devices,
 * waiters or pool): what a waiter's one-line message needs, at a cost that
 * grows with the number of users and devices, never with the number of
 * jobs or waiters (it reads each user's holder files, job/<user>/
 * held.<d>, instead of every record or ticket). Leases of older
 * versions, which write no holder files, are not found. Same returns as
 * gm_state_read.
 */
int gm_state_read_holders(const char *lock_dir, const int *devices,
			  int ndevices, struct gm_state *st, char *err,
			  size_t errlen);
void gm_state_free(struct gm_state *st);

/* ---- Activity and idle suspension (src/lease/activity.c) ---------------- */

/* Longest published line, bytes (the file is padded to it). */
#define GM_ACT_LINE 512

/* What one member process published (gm_activity_read). */
struct gm_activity {
	pid_t pid;
	uid_t uid;
	uint64_t lease_id;            /* the lease it holds or last held */
	char job[GM_JOB_MAX + 1];
	char state[16];               /* active, idle, suspended */
	int64_t idle_since_ns;        /* CLOCK_REALTIME of its last GPU call
	                               * (0: active now) */
	int64_t since_ns;             /* suspended since (CLOCK_REALTIME) */
	uint64_t mem;                 /* device memory checkpointed, bytes */
	char why[16];                 /* why it was not suspended ("-") */
	int devices[GM_MAX_DEVICES];  /* its lease's devices */
	int ndevices;
};

/*
 * This process, a member of job `job`'s lease *l, is about to let the
 * lease go while suspended (docs/suspend.md): mark the job's file with
 * read locks on bytes GM_SUSP_OFF + d, one per device d of the lease it
 * may use (l->usable), held through *fd (read-only, close-on-exec: it
 * keeps no FIFO writer open) until the caller closes it, at its resume. A new claim of the
 * job then takes those devices (gm_lease_acquire), so that the member can
 * join its lease, and no cleanup removes the job file meanwhile. Call
 * while the lease is still held (its job file then exists). 0, or -errno
 * with a message (*fd = -1): no mark.
 */
int gm_lease_suspended_mark(const char *lock_dir, const char *job,
			    const struct gm_lease *l, int *fd, char *err,
			    size_t errlen);

/*
 * Open (creating it) this process's activity file,
 * job/<user>/act.<pid>.<PID namespace> in `lock_dir`: *fd, close-on-exec, OFD-write-locked (byte 0) while open,
 * stays open so that each later publication opens nothing. First removes
 * the user's act.* files whose process is gone (no such PID, the file
 * unlocked). 0 or -errno with a message (*fd = -1). For the preload
 * library.
 */
int gm_activity_open(const char *lock_dir, int *fd, char *err, size_t errlen);

/*
 * Replace the activity line in the file open as `fd` (gm_activity_open) in
 * place: `line` (at most GM_ACT_LINE - 1 bytes, "gm1act pid= lease= job=
 * state= idle_since= since= mem= why= devs="). 0 or -EIO.
 */
int gm_activity_write(int fd, const char *line);

/*
 * Every published activity line of every user in `lock_dir` (*out
 * malloc'ed, *n of them; free it), from files owned by the user whose
 * directory holds them. Lines of dead processes are returned too: the
 * caller matches them to live leases and PIDs. 0 or -errno.
 */
int gm_activity_read(const char *lock_dir, struct gm_activity **out, int *n,
		     char *err, size_t errlen);

/* gm_event_append with the record's job= field set to `job`. */
int gm_event_append_job(const char *lock_dir, const char *event,
			const char *job, const char *fields, char *err,
			size_t errlen);

/* ---- Leases that are given back (gpu-offload) ------------------------- */

/*
 * For a process that uses a GPU only now and then and gives it back when
 * someone else wants it (gpu-offload): a lease taken without waiting is
 * gm_lease_acquire with cfg->timeout_s == 0. Such a claim takes a ticket
 * like any other and gives up at once, leaving nothing behind, when an
 * older live claim whose candidates intersect its own is waiting (even if
 * the devices it wants are free: it never jumps the queue) or when too few
 * of its candidates are free.
 *
 * gm_lease_contended: is a live claim of another job (or another user)
 * waiting for any of `lease`'s devices, i.e. would giving the lease back
 * let a waiter in? A claim that free devices serve now (the queue played
 * in order), younger than a second, is about to be granted them and does
 * not count. `job` is the holder's own job (its own processes never
 * queue behind it: they join). Reads like gm_state_read (no lock, so it
 * never delays anyone; its cost grows with the number of jobs and waiters
 * in the directory). Returns 1 or 0, or -errno with a message.
 *
 * Giving the lease back is gm_lease_release (above). A process that calls
 * it must have stopped using the devices first (for CUDA: its contexts
 * destroyed), since the next waiter may be granted them at once.
 */
int gm_lease_contended(const char *lock_dir, const struct gm_lease *lease,
		       const char *job, char *err, size_t errlen);

#endif
