/*
 * suspend.c - idle suspension (suspend.h): the helper thread that samples
 * this process's GPU activity, publishes it for `gpumutex status`, and,
 * when the process has been idle for GPUMUTEX_IDLE_SUSPEND_MS while
 * another job waits for one of its GPUs, has the gate checkpoint it
 * (gmp_gate_suspend) and let its lease go; and the driver steps of
 * checkpoint and restore.
 *
 * Each process acts on itself only (the driver accepts its own PID from
 * any of its threads), so no rights over other processes and no daemon
 * are needed. A lease goes back to the queue when its last member lets
 * go: members of one job each checkpoint themselves, and until the last
 * one has, the lease stays held.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "activity.h"
#include "gate.h"
#include "gputime.h"
#include "internal.h" /* gm__fstat: see src/lease/lockdir.c */
#include "lease.h"
#include "resolve.h"
#include "suspend.h"
#include "wrap.h"

typedef int CUresult;
typedef CUresult (*ck_state_fn)(int, int *);
typedef CUresult (*ck_step_fn)(int, void *);

static unsigned sp_ms = GMP_IDLE_SUSPEND_DEFAULT_MS;
static pthread_mutex_t sp_mu = PTHREAD_MUTEX_INITIALIZER;
/* The lease as last armed (under sp_mu). */
static struct gm_lease sp_lease;
static char sp_dir[4096];
static char sp_job[GM_JOB_MAX + 1];
/*
 * A descriptor of ours kept open in the program, with the file it was: the
 * program may close it (a daemon's closefrom) and reuse the number for a
 * file of its own, which we must then neither write nor close. Checked
 * before each use (one fstat), as the lease's own (gate.c, lease_intact).
 */
struct ownfd {
	int fd;
	unsigned long long dev, ino;
};

static void own_set(struct ownfd *o, int fd)
{
	struct stat st;

	o->fd = fd;
	if (fd >= 0 && gm__fstat(fd, &st) == 0) {
		o->dev = st.st_dev;
		o->ino = st.st_ino;
	} else if (fd >= 0) {
		close(fd);
		o->fd = -1;
	}
}

/* Still ours? When not, forgotten (not closed: it is the program's). */
static int own_ok(struct ownfd *o)
{
	struct stat st;
	int saved = errno;

	if (o->fd >= 0 && (gm__fstat(o->fd, &st) != 0 || st.st_dev != o->dev ||
			   st.st_ino != o->ino))
		o->fd = -1;
	errno = saved;
	return o->fd >= 0;
}

static void own_close(struct ownfd *o)
{
	int saved = errno;

	if (own_ok(o))
		close(o->fd);
	o->fd = -1;
	errno = saved;
}

/* While suspended: the job file's marks (gm_lease_suspended_mark), under
 * the gate's lock. */
static struct ownfd sp_mark = { -1, 0, 0 };

static void mark_drop(void)
{
	own_close(&sp_mark);
}
static int sp_state;      /* thread: 0 none, 1 starting, 2 running, 3 cannot */
static unsigned sp_seq;   /* bumped by every arm */
/* Published state (thread only, except sp_susp_* written under the gate's
 * lock by the thread itself or read by the resuming thread). */
static int64_t sp_susp_mono;   /* suspended since (ms, 0: not suspended) */
static int64_t sp_susp_real;   /* the same, CLOCK_REALTIME ns */
static uint64_t sp_mem;        /* device memory checkpointed */
static int64_t sp_ckpt_ms;     /* how long the checkpoint took */
static int64_t sp_idle_ms;     /* idle when suspended */
static const char *sp_why = "-";

static int64_t real_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int gmp_susp_configure(unsigned file_ms, int enforce)
{
	const char *v = getenv("GPUMUTEX_IDLE_SUSPEND_MS");
	unsigned ceiling_ms = enforce ? file_ms : UINT32_MAX;
	uint64_t n;

	if (file_ms != UINT32_MAX)
		sp_ms = file_ms;

	if (v) {
		if (gm_parse_uint(v, 10, GMP_IDLE_SUSPEND_MAX_MS, &n)) {
			gmp_say("GPUMUTEX_IDLE_SUSPEND_MS=\"%s\" is not a number of milliseconds from 0 (never) to %u; cuInit fails (CUDA_ERROR_INVALID_VALUE) so that no GPU is used outside the queue",
				v, GMP_IDLE_SUSPEND_MAX_MS);
			return -1;
		}
		sp_ms = (unsigned)n;
	}
	/* An enforcing file's ceiling: the environment may only lower it
	 * (0, never, is the lowest: a ceiling of 0 forbids suspension). */
	if (ceiling_ms != UINT32_MAX &&
	    (ceiling_ms == 0 || sp_ms == 0 || sp_ms > ceiling_ms))
		sp_ms = ceiling_ms == 0 ? 0 : (sp_ms == 0 ? 0 : ceiling_ms);
	return 0;
}

/* ---- The driver's checkpoint API ------------------------------------------ */

struct ck_api {
	ck_state_fn state;
	ck_step_fn lock, ckpt, restore, unlock;
};

static int ck_api(struct ck_api *a)
{
	a->state = (ck_state_fn)gmp_wrap_driver_fn("cuCheckpointProcessGetState");
	a->lock = (ck_step_fn)gmp_wrap_driver_fn("cuCheckpointProcessLock");
	a->ckpt = (ck_step_fn)gmp_wrap_driver_fn("cuCheckpointProcessCheckpoint");
	a->restore = (ck_step_fn)gmp_wrap_driver_fn("cuCheckpointProcessRestore");
	a->unlock = (ck_step_fn)gmp_wrap_driver_fn("cuCheckpointProcessUnlock");
	return a->state && a->lock && a->ckpt && a->restore && a->unlock;
}

int gmp_susp_checkpoint(long seen, const char **why)
{
	/* CUcheckpointLockArgs: timeoutMs, reserved. A call in flight that
	 * does not end within it (a long synchronisation) makes it busy. */
	struct {
		unsigned timeout_ms, r0;
		unsigned long long r1[7];
	} largs;
	struct ck_api a;
	int pid = (int)getpid(), st = -1, rc;
	int64_t t0;

	/* gmp_go is 0 (seq_cst store) before this load: a thread that
	 * passed its wrapper's check bumped the count first (locked
	 * increment), so a call that started since the sample shows. */
	if (!gmp_act_quiet(seen)) {
		*why = "busy";
		return 1;
	}
	if (!ck_api(&a) || a.state(pid, &st) != 0) {
		*why = "nodriver";
		return 1;
	}
	if (st != 0) {
		*why = "refused";
		return 1;
	}
	memset(&largs, 0, sizeof largs);
	largs.timeout_ms = 1000;
	t0 = gmp_mono_ms();
	if (a.lock(pid, &largs) != 0) {
		*why = "busy";
		return 1;
	}
	rc = a.ckpt(pid, NULL);
	if (rc != 0) {
		/* Undo: whatever state the failure left, back to running
		 * (managed memory: 801 and still locked, on driver 580). */
		if (a.state(pid, &st) == 0 && st == 2)
			(void)a.restore(pid, NULL);
		(void)a.unlock(pid, NULL);
		*why = rc == 801 ? "unsupported" : "refused";
		return 1;
	}
	sp_ckpt_ms = gmp_mono_ms() - t0;
	return 0;
}

int gmp_susp_restore(void)
{
	struct ck_api a;
	int pid = (int)getpid(), rc;

	if (!ck_api(&a)) {
		gmp_say("the driver's checkpoint functions are gone; this process's GPU state cannot be restored");
		return -1;
	}
	rc = a.restore(pid, NULL);
	if (rc == 0)
		rc = a.unlock(pid, NULL);
	if (rc) {
		gmp_say("the driver refused to restore this process's GPU state after its suspension (CUDA error %d); its GPU calls now fail",
			rc);
		return -1;
	}
	return 0;
}

int64_t gmp_susp_suspended_ms(void)
{
	int64_t s = __atomic_load_n(&sp_susp_mono, __ATOMIC_ACQUIRE);

	return s ? gmp_mono_ms() - s : -1;
}

/* ---- Publication ----------------------------------------------------------- */

/* Write this process's activity line (thread, or under the gate's lock). */
static pthread_mutex_t pub_mu = PTHREAD_MUTEX_INITIALIZER;
/* This process's activity file, opened once when the first lease is armed
 * (under pub_mu): a publication then opens nothing, so the thread never
 * holds a descriptor the program could see come and go. */
static struct ownfd pub = { -1, 0, 0 };
/* publish's buffers: static (a resume may run on a thread with a 16 KiB
 * stack), under pub_mu. */
static struct {
	char line[1024], devs[GM_MAX_DEVICES * 4], err[GM_ERR_MAX];
	char dir[sizeof sp_dir], f[1024];
} pb;

static void publish(const char *state, int64_t idle_ms)
{
	char *line = pb.line, *devs = pb.devs, *dir = pb.dir;
	uint64_t id;
	int64_t since = 0;

	pthread_mutex_lock(&pub_mu);
	pthread_mutex_lock(&sp_mu);
	memcpy(dir, sp_dir, sizeof pb.dir);
	id = sp_lease.lease_id;
	gm_format_list(devs, sizeof pb.devs, sp_lease.devices,
		       sp_lease.ndevices);
	pthread_mutex_unlock(&sp_mu);
	if (!dir[0] || !own_ok(&pub)) {
		pthread_mutex_unlock(&pub_mu);
		return;
	}
	if (idle_ms > 0)
		since = real_ns() - idle_ms * 1000000;
	snprintf(line, sizeof pb.line,
		 "gm1act pid=%d lease=%llu job=%s state=%s idle_since=%lld since=%lld mem=%llu why=%s devs=%s",
		 (int)getpid(), (unsigned long long)id, sp_job, state,
		 (long long)since, (long long)sp_susp_real,
		 (unsigned long long)sp_mem, sp_why, devs[0] ? devs : "-");
	(void)gm_activity_write(pub.fd, line);
	pthread_mutex_unlock(&pub_mu);
}

/* An event-log record of this process's suspension or resume, as the
 * lease core's records (docs/report.md): the lease in hex, its devices,
 * the memory moved, then two durations (given in ms) in ns. */
static void record(const char *event, const struct gm_lease *l,
		   const char *k1, int64_t ms1, const char *k2, int64_t ms2)
{
	pthread_mutex_lock(&pub_mu);
	gm_format_list(pb.devs, sizeof pb.devs, l->devices, l->ndevices);
	snprintf(pb.f, sizeof pb.f, "lease=%016llx dev=%s mem=%llu %s=%lld %s=%lld",
		 (unsigned long long)l->lease_id, pb.devs,
		 (unsigned long long)sp_mem, k1, (long long)ms1 * 1000000, k2,
		 (long long)ms2 * 1000000);
	(void)gm_event_append_job(sp_dir, event, sp_job, pb.f, pb.err,
				  sizeof pb.err);
	pthread_mutex_unlock(&pub_mu);
}

void gmp_susp_done(void)
{
	static char err[GM_ERR_MAX]; /* the helper thread's stack is small */
	int saved = errno;

	/* A new process of the job then claims our GPUs. Without the mark
	 * (an error: said nowhere, the suspension goes on) it may take
	 * others, and our resume then fails as a misfit joiner's would. */
	{
		int fd;
		if (gm_lease_suspended_mark(sp_dir, sp_job, &sp_lease, &fd, err,
					    sizeof err) == 0)
			own_set(&sp_mark, fd);
	}
	errno = saved;
	sp_susp_real = real_ns();
	__atomic_store_n(&sp_susp_mono, gmp_mono_ms(), __ATOMIC_RELEASE);
	sp_why = "-";
	publish("suspended", sp_idle_ms);
}

void gmp_susp_record(const struct gm_lease *l)
{
	record("suspend", l, "ckpt", sp_ckpt_ms, "idle", sp_idle_ms);
}

void gmp_susp_failed(void)
{
	mark_drop();
	__atomic_store_n(&sp_susp_mono, 0, __ATOMIC_RELEASE);
	sp_susp_real = 0;
	publish("failed", 0);
}

void gmp_susp_resumed(const struct gm_lease *l, int64_t waited_ms)
{
	int64_t susp = gmp_susp_suspended_ms();

	__atomic_store_n(&sp_susp_mono, 0, __ATOMIC_RELEASE);
	sp_susp_real = 0;
	mark_drop();
	publish("active", 0);
	record("resume", l, "suspended", susp, "waited", waited_ms);
	sp_mem = 0;
}

/* ---- Declines known before the driver is asked ---------------------------- */

/* A number after `key` in a small /proc or /sys file; -1 when absent. */
static long long file_num(const char *path, const char *key)
{
	static char buf[4096]; /* the thread's only */
	long long v = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	const char *p;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = key ? strstr(buf, key) : buf;
	if (!p)
		return -1;
	p += key ? strlen(key) : 0;
	while (*p == ' ' || *p == '\t')
		p++;
	{
		uint64_t u;

		if (gm_scan_uint(p, 10, INT64_MAX, &u, NULL) == 0)
			v = (long long)u;
	}
	return v;
}

/* Host memory that a checkpoint may fill: MemAvailable, and what the
 * cgroup (v2) still allows. -1 when unknown. */
static long long host_room(void)
{
	long long avail = file_num("/proc/meminfo", "MemAvailable:"), room;
	static char cg[512], path[700]; /* the thread's only */
	int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, cg, sizeof cg - 1) : -1;

	if (fd >= 0)
		close(fd);
	room = avail >= 0 ? avail * 1024 : -1;
	if (n > 3 && strncmp(cg, "0::", 3) == 0) {
		long long max, cur;
		char *nl;

		cg[n] = '\0';
		nl = strchr(cg, '\n');
		if (nl)
			*nl = '\0';
		snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", cg + 3);
		max = file_num(path, NULL); /* "max" reads as -1: no limit */
		snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current",
			 cg + 3);
		cur = file_num(path, NULL);
		if (max >= 0 && cur >= 0 && (room < 0 || max - cur < room))
			room = max > cur ? max - cur : 0;
	}
	return room;
}

typedef int (*nv_init_fn)(void);
typedef int (*nv_handle_fn)(unsigned, void **);
typedef int (*nv_mem_fn)(void *, unsigned long long *);

/* Device memory in use on the lease's GPUs (NVML): all of it is this
 * job's while it holds them. 0 when NVML cannot tell. */
static unsigned long long device_used(const struct gm_lease *l)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	unsigned long long sum = 0;
	nv_init_fn init;
	nv_handle_fn handle;
	nv_mem_fn mem;

	if (!h) {
		dlerror();
		return 0;
	}
	init = (nv_init_fn)gmp_lookup(h, "nvmlInit_v2", NULL);
	handle = (nv_handle_fn)gmp_lookup(h, "nvmlDeviceGetHandleByIndex_v2",
					  NULL);
	mem = (nv_mem_fn)gmp_lookup(h, "nvmlDeviceGetMemoryInfo", NULL);
	dlerror();
	if (init && handle && mem && init() == 0) {
		for (int i = 0; i < l->ndevices; i++) {
			void *dev = NULL;
			unsigned long long m[3] = { 0, 0, 0 }; /* total free used */

			if (handle((unsigned)l->devices[i], &dev) == 0 &&
			    mem(dev, m) == 0)
				sum += m[2];
		}
	}
	/* NVML stays loaded: unloading it while the driver may use it is
	 * not worth the few pages. */
	return sum;
}

/* A reason not to try, or NULL. */
static const char *pre_decline(const struct gm_lease *l)
{
	long long room;

	if (file_num("/proc/self/status", "TracerPid:") > 0)
		return "traced";
	if (__atomic_load_n(&gmp_ipc_used, __ATOMIC_RELAXED))
		return "ipc";
	sp_mem = device_used(l);
	room = host_room();
	if (sp_mem && room >= 0 && (long long)(sp_mem + sp_mem / 8) > room)
		return "memory";
	return NULL;
}

/* ---- The thread --------------------------------------------------------------- */

static void sp_wait(unsigned seen, int64_t ms)
{
	struct timespec t = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000 };

	syscall(SYS_futex, &sp_seq, FUTEX_WAIT_PRIVATE, seen, &t, NULL, 0);
}

/* How often to sample: a quarter of the threshold, 5 ms to 1 s. */
static int64_t sp_period(void)
{
	int64_t p = sp_ms ? sp_ms / 4 : 1000;

	return p < 5 ? 5 : p > 1000 ? 1000 : p;
}

static void try_suspend(long seen, int64_t idle)
{
	/* The thread's only. */
	static struct gm_lease l;
	static char dir[sizeof sp_dir], job[sizeof sp_job], err[GM_ERR_MAX];
	const char *why = NULL;
	int rc;

	pthread_mutex_lock(&sp_mu);
	l = sp_lease;
	memcpy(dir, sp_dir, sizeof dir);
	memcpy(job, sp_job, sizeof job);
	pthread_mutex_unlock(&sp_mu);
	if (!gmp_gate_holds() ||
	    gm_lease_contended(dir, &l, job, err, sizeof err) != 1)
		return;
	why = pre_decline(&l);
	if (!why) {
		sp_idle_ms = idle;
		rc = gmp_gate_suspend(seen, &why);
		if (rc <= 0)
			return;
	}
	if (strcmp(sp_why, why) != 0) {
		sp_why = why;
		publish("idle", idle);
	}
}

static void *sp_main(void *arg)
{
	const char *last = "";
	int64_t retry = 0;

	(void)arg;
	for (;;) {
		unsigned seq = __atomic_load_n(&sp_seq, __ATOMIC_ACQUIRE);
		long seen;
		int64_t idle = gmp_act_idle_ms(&seen), now = gmp_mono_ms();
		const char *state = gmp_susp_suspended_ms() >= 0 ? "suspended" :
				    idle > 0 ? "idle" : "active";

		if (strcmp(state, last) != 0 && gmp_susp_suspended_ms() < 0) {
			if (strcmp(state, "active") == 0)
				sp_why = "-";
			publish(state, idle);
		}
		last = state;
		gmp_gt_tick();
		if (sp_ms && idle >= (int64_t)sp_ms && now >= retry &&
		    gmp_susp_suspended_ms() < 0) {
			try_suspend(seen, idle);
			/* A decline is looked at again after another period of
			 * the threshold, not every sample (busy: sooner). */
			if (gmp_susp_suspended_ms() < 0 && strcmp(sp_why, "-"))
				retry = now + (strcmp(sp_why, "busy") == 0 ?
					       sp_period() * 4 : (int64_t)sp_ms);
		}
		sp_wait(seq, sp_period());
	}
	return NULL;
}

void gmp_susp_arm(const struct gm_config *cfg, const struct gm_lease *l)
{
	int expect = 0;

	if (!gmp_wrappers())
		return;
	pthread_mutex_lock(&sp_mu);
	sp_lease = *l;
	snprintf(sp_dir, sizeof sp_dir, "%s", cfg->lock_dir);
	snprintf(sp_job, sizeof sp_job, "%s", cfg->job);
	pthread_mutex_unlock(&sp_mu);
	pthread_mutex_lock(&pub_mu);
	if (!own_ok(&pub)) {
		int saved = errno, fd;
		if (gm_activity_open(cfg->lock_dir, &fd, pb.err,
				     sizeof pb.err) == 0)
			own_set(&pub, fd);
		errno = saved;
	}
	pthread_mutex_unlock(&pub_mu);
	if (__atomic_compare_exchange_n(&sp_state, &expect, 1, 0,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		int ok = gmp_thread_start(sp_main);

		__atomic_store_n(&sp_state, ok ? 2 : 3, __ATOMIC_RELEASE);
	}
	__atomic_add_fetch(&sp_seq, 1, __ATOMIC_ACQ_REL);
	syscall(SYS_futex, &sp_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void gmp_susp_atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	/* Either lock may have been held by the parent's helper thread,
	 * which the child does not have. */
	memcpy(&sp_mu, &fresh, sizeof fresh);
	memcpy(&pub_mu, &fresh, sizeof fresh);
	/* The parent's activity file: the child publishes its own once it
	 * holds a lease. */
	own_close(&pub);
	/* The parent's marks are its own (the child is not suspended). */
	mark_drop();
	sp_state = 0;
	sp_susp_mono = 0;
	sp_susp_real = 0;
}
