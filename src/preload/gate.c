/*
 * gate.c - the once-per-process decision in front of the real cuInit, and
 * the lease it leads to.
 *
 * State machine, one per process:
 *   NEW -> BUSY (one thread decides; others block on gate_lock)
 *       -> OPEN  (pass through for good: not configured, no GPU wanted)
 *       -> DEFER (configured, devices fixed, CUDA_VISIBLE_DEVICES set; no
 *                 lease yet: the first call that can touch a device takes
 *                 it, gmp_gate_work)
 *       -> HELD  (lease held: taken in cuInit for a pool, or later)
 *       -> SHUT  (fail closed; gate_code is returned from every cuInit and
 *                 every wrapped driver call).
 *       -> GOING (HELD while the helper thread checkpoints the process,
 *                 under gate_lock: every wrapped call waits for gate_lock)
 *       -> SUSP  (checkpointed through the driver and lease let go after
 *                 GPUMUTEX_IDLE_SUSPEND_MS idle while another job waited:
 *                 suspend.c; the next wrapped call queues, restores,
 *                 and goes back to HELD)
 *   DEFER -> HELD at the first device call; HELD -> DEFER when the
 *   process gives its lease back (no context for GPUMUTEX_GIVE_BACK_MS);
 *   HELD -> EXIT when it gives it back at exit before its teardown
 *   (exit.c), EXIT -> HELD when it then makes a call that is not
 *   teardown (it queues again, as in DEFER).
 * OPEN and SHUT are final. gmp_go (wrap.h) is 1 exactly in OPEN and HELD:
 * the wrappers read it to go straight to the driver. Without the
 * generated wrappers (wrap.h) there is no DEFER: the lease is taken in
 * cuInit and kept, as before wrappers existed.
 *
 * fork: a child inherits the state. In HELD it shares the lease's open
 * file descriptions, so it is a member of the lease for as long as it
 * lives (it never gives it back: it has no helper thread), and its cuInit
 * returns at once. A child forked while another thread was in BUSY starts
 * again from NEW (see atfork_child).
 */
#define _GNU_SOURCE
#include "compat.h" /* dladdr1 at its oldest version */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gate.h"
#include "internal.h" /* gm__fstat: see src/lease/lockdir.c */
#include "lease.h"
#include "pyenv.h"
#include "gatepriv.h"
#include "wrap.h"
#include "suspend.h"
#include "activity.h"
#include "gputime.h"

enum { ST_NEW, ST_BUSY, ST_OPEN, ST_SHUT, ST_DEFER, ST_HELD, ST_SUSP,
       ST_GOING, ST_EXIT };

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static int gate_state;
static int gate_code;
static struct gm_lease gate_lease;
/* The configuration decided at the first cuInit (its candidates fixed to
 * this process's CUDA_VISIBLE_DEVICES), for taking the lease later. Used
 * under gate_lock only. */
static struct gm_config gate_cfg;
static char gate_err[GM_ERR_MAX];
/* 1: this process took its lease itself (not inherited by fork), so its
 * helper thread may give it back. */
static int gate_own;
static unsigned gate_give_back_ms = 1000;
/* Which files the lease's descriptors were, to notice if the program
 * closes them (or reuses their numbers) behind our back. */
static struct {
	unsigned long long dev, ino;
} gate_ids[GM_MAX_DEVICES];
static __attribute__((tls_model("initial-exec"))) _Thread_local int gate_in;

/* Values handed to Python; written once, before they are published. */
static char env_cvd[GM_MAX_DEVICES * 4];
static char env_job[GM_JOB_MAX + 1];

int gmp_gate_busy(void)
{
	return gate_in;
}


/* ---- The gate ----------------------------------------------------------------- */

static void go_set(int v)
{
	__atomic_store_n(&gmp_go, v, __ATOMIC_SEQ_CST);
}

static void state_set(int st)
{
	__atomic_store_n(&gate_state, st, __ATOMIC_RELEASE);
	go_set(st == ST_OPEN || st == ST_HELD);
}

/*
 * A child forked while another thread of the parent is in BUSY inherits a
 * locked gate_lock whose owner does not exist in the child: start over,
 * so the child's own cuInit decides for itself (it joins the lease through
 * GPUMUTEX_JOB, which the parent set before it started waiting).
 */
static void atfork_child(void)
{
	/* The child has one thread: whatever state gate_lock was copied in
	 * (another thread may have held it at the fork), it is free now. */
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	int st = __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE);

	memcpy(&gate_lock, &fresh, sizeof fresh);
	gmp_wrap_atfork_child();
	gmp_susp_atfork_child();
	gmp_gt_atfork_child();
	/* An inherited lease is kept until the child exits: the child has
	 * no helper thread, and it shares the parent's descriptions. */
	gate_own = 0;
	if (st == ST_NEW || st == ST_BUSY) {
		/* Forked while another thread was deciding or taking the
		 * lease: drop the copies of that acquire's descriptors (they
		 * would keep its job lock and ticket open for writing, and
		 * delay everyone's wake-up, ours included) and start over from
		 * NEW. */
		gm_lease_forget_inflight();
		state_set(ST_NEW);
	} else if (st == ST_GOING) {
		/* Forked while the parent's helper thread was suspending it:
		 * the child shares the lease's descriptions, and keeps them
		 * (it has no helper thread), as a child forked in HELD. */
		state_set(ST_HELD);
	} else if (st == ST_SUSP) {
		/* The parent's GPU state is checkpointed and its lease gone:
		 * the child's own next device call queues afresh. */
		state_set(ST_DEFER);
	} else if (st == ST_DEFER) {
		/* Forked while another thread was taking the lease at its
		 * first device call (that happens in DEFER, under gate_lock):
		 * the same. */
		gm_lease_forget_inflight();
	}
}

/* The child handler is registered when the library is loaded, while the
 * process is still single-threaded: registered later, from the first
 * cuInit, a fork in another thread during the registration could leave
 * the child a gate_lock held by nobody and no handler to reset it. The
 * handler costs a memcpy per fork. (pthread_once would do too, but its
 * default version is GLIBC_2.34, and before that it lives in libpthread.) */
__attribute__((constructor)) static void atfork_register(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
}

/* GM_RESOLVE_INSTALLED when this library is the copy that `gpumutex
 * install --system` placed (as ld.so.preload names it): its file going
 * missing then fails closed instead of letting processes by. */
static int installed_copy(void)
{
	Dl_info self;
	struct link_map *lm = NULL;

	if (dladdr1((void *)installed_copy, &self, (void **)&lm,
		    RTLD_DL_LINKMAP) && self.dli_fname &&
	    strcmp(self.dli_fname, GM_INSTALL_LIB) == 0)
		return GM_RESOLVE_INSTALLED;
	return 0;
}

/*
 * Take (or join) the lease for gate_cfg, under gate_lock. `call`: the
 * first device call that needs it, NULL in cuInit. Returns 0 (the lease is
 * in gate_lease) or the CUDA error, after saying why.
 */
static int take(const char *call)
{
	struct gm_acquire_hooks hooks;
	struct wait_ctx ctx;
	int rc;

	ctx.cfg = &gate_cfg;
	ctx.call = call;
	ctx.suspended_ms = gmp_susp_suspended_ms();
	memset(&hooks, 0, sizeof hooks);
	hooks.on_wait = gmp_on_wait;
	hooks.arg = &ctx;
	rc = gm_lease_acquire(&gate_cfg, &hooks, &gate_lease, gate_err,
			      sizeof gate_err);
	if (rc == -ETIMEDOUT) {
		gmp_say("%s; %s returns CUDA_ERROR_NO_DEVICE", gate_err,
			call ? call : "cuInit");
		return GMP_CUDA_ERROR_NO_DEVICE;
	}
	if (rc == -GM_EJOIN) {
		gmp_join_refused(gmp_user_cvd(), gate_err);
		return GMP_CUDA_ERROR_INVALID_VALUE;
	}
	if (rc) {
		gmp_say("cannot queue for a GPU in GPUMUTEX_LOCK_DIR=\"%s\": %s; %s fails (CUDA_ERROR_NO_DEVICE) so that no GPU is used outside the queue",
			gate_cfg.lock_dir, gate_err, call ? call : "cuInit");
		return GMP_CUDA_ERROR_NO_DEVICE;
	}
	for (int i = 0; i < gate_lease.ndevices; i++) {
		struct stat st;
		if (gm__fstat(gate_lease.fds[i], &st) == 0) {
			gate_ids[i].dev = (unsigned long long)st.st_dev;
			gate_ids[i].ino = (unsigned long long)st.st_ino;
		}
	}
	gate_own = 1;
	gmp_exit_arm();
	return 0;
}

/*
 * Decide, and take the lease now when that cannot wait. Returns 0 and
 * *next (OPEN, DEFER or HELD), or the CUDA error (SHUT). Sets *py when
 * os.environ needs updating (2: and the placeholder removed from it).
 */
static int gate_run(int *py, int *next)
{
	/* Static, not on the stack (cuInit may run on a thread with a 16 KiB
	 * stack): gate_run runs under gate_lock, one thread at a time. */
	static struct gm_conf_info conf_info;
	struct gm_config *cfg = &gate_cfg;
	char *err = gate_err;
	const char *cvd, *gb;
	int rc;

	*next = ST_OPEN;
	/* The configuration: /etc/gpumutex.conf (machine-wide mode) and
	 * the environment, read here, once per process (src/lease/
	 * conffile.c). Settings an enforcing file refuses are dropped with
	 * one line; the process queues under the file's. */
	/* GPUs named by UUID are looked up in NVML with the real dlsym
	 * (ours is an interposer): src/lease/uuid.c. */
	gm_uuid_dlsym(gmp_real_dlsym());
	rc = gm_config_resolve(cfg, &conf_info, installed_copy(), err,
			       sizeof gate_err);
	if (rc == 1)
		return 0; /* not configured: pass through */
	if (rc < 0) {
		gmp_say("%s; cuInit fails (CUDA_ERROR_INVALID_VALUE) so that no GPU is used outside the queue",
			err);
		return GMP_CUDA_ERROR_INVALID_VALUE;
	}
	if (conf_info.notes[0])
		gmp_say("%s; this process queues under %s's settings",
			conf_info.notes, conf_info.file);
	gb = getenv("GPUMUTEX_GIVE_BACK_MS");
	if (gb) {
		uint64_t v;

		if (gm_parse_uint(gb, 10, 86400000, &v)) {
			gmp_say("GPUMUTEX_GIVE_BACK_MS=\"%s\" is not a number of milliseconds from 0 to 86400000; cuInit fails (CUDA_ERROR_INVALID_VALUE) so that no GPU is used outside the queue",
				gb);
			return GMP_CUDA_ERROR_INVALID_VALUE;
		}
		gate_give_back_ms = (unsigned)v;
	}
	if (gmp_susp_configure(conf_info.idle_suspend_file_ms,
			       conf_info.enforce) ||
	    gmp_gt_configure(conf_info.gpu_time_file, conf_info.enforce))
		return GMP_CUDA_ERROR_INVALID_VALUE;
	/* A launcher's placeholder (a pool's count for device queries) is
	 * no narrowing: the process queues for the whole pool. */
	cvd = gmp_user_cvd();
	if (cvd) {
		rc = gmp_narrow(cfg, cvd, err, sizeof gate_err);
		if (rc == 1)
			return 0; /* no GPU wanted: no lease, no wait */
		if (rc < 0) {
			gmp_say("%s; cuInit fails (CUDA_ERROR_INVALID_VALUE) so that no GPU is used outside the queue",
				err);
			return GMP_CUDA_ERROR_INVALID_VALUE;
		}
	}
	/* The job id goes into the environment before anything can wait or
	 * start a child: children then join this lease, not queue behind
	 * their own parent. */
	if (!cfg->job[0]) {
		gm_job_generate(cfg->job);
		setenv("GPUMUTEX_JOB", cfg->job, 1);
	}
	memcpy(env_job, cfg->job, sizeof env_job);
	env_job[GM_JOB_MAX] = '\0';
	*py = 1;

	if (gmp_wrappers() && cfg->ndevices == cfg->want) {
		/* The devices are fixed already: the real cuInit may run now
		 * (the CUDA runtime needs it even for device queries), and
		 * the lease waits for the first call that can touch one. */
		int d[GM_MAX_DEVICES], n = cfg->ndevices;

		memcpy(d, cfg->devices, sizeof d);
		for (int i = 1; i < n; i++)
			for (int j = i; j > 0 && d[j - 1] > d[j]; j--) {
				int t = d[j];
				d[j] = d[j - 1];
				d[j - 1] = t;
			}
		gm_format_list(env_cvd, sizeof env_cvd, d, n);
		*next = ST_DEFER;
		/* A live lease of this job that this process could never join
		 * is refused now, as it was when cuInit took the lease (one
		 * lock-free probe; a lease that fits is joined later, at the
		 * first device call, so that a query keeps nothing alive). */
		{
			static struct gm_job_state js;

			if (gm_job_probe(cfg->lock_dir, cfg->job, &js, err,
					 sizeof gate_err) == 1 &&
			    gm_join_check(cfg, js.devices, js.ndevices, NULL,
					  err, sizeof gate_err) == -GM_EJOIN) {
				gmp_join_refused(cvd, err);
				return GMP_CUDA_ERROR_INVALID_VALUE;
			}
		}
	} else {
		/* A pool: which GPUs this process gets is known only once it
		 * is granted them, and the driver reads CUDA_VISIBLE_DEVICES
		 * in cuInit. So wait here, as before. */
		int use[GM_MAX_DEVICES], n = 0;

		rc = take(NULL);
		if (rc)
			return rc;
		/* What this process may use: all of a lease it was granted,
		 * the part among its own candidates of one it joined. A later
		 * lease (after giving this one back, or a resume) is for all
		 * of these GPUs: the driver sees them all from now on, so a
		 * lease of fewer (a joiner of a bigger lease wanted fewer)
		 * would leave it a GPU another job may hold. */
		for (int i = 0; i < gate_lease.ndevices; i++)
			if (gate_lease.usable &
			    (UINT64_C(1) << gate_lease.devices[i]))
				use[n++] = gate_lease.devices[i];
		gm_format_list(env_cvd, sizeof env_cvd, use, n);
		memcpy(cfg->devices, use, sizeof use);
		cfg->ndevices = n;
		cfg->want = n;
		*next = ST_HELD;
		gmp_wrap_giveback_arm(gate_give_back_ms);
		gmp_susp_arm(cfg, &gate_lease);
		gmp_gt_granted(cfg, &gate_lease);
	}
	/* PCI_BUS_ID: CUDA's default order (fastest first) can differ
	 * between machines' GPUs, and an index must mean the same GPU in
	 * every process. */
	setenv("CUDA_VISIBLE_DEVICES", env_cvd, 1);
	setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
	/* The placeholder is spent: CUDA_VISIBLE_DEVICES is this process's
	 * own now, and a child must read it as a narrowing even where it
	 * equals the placeholder's text (granted the placeholder's GPUs). */
	if (getenv(GMP_PLACEHOLDER_ENV)) {
		unsetenv(GMP_PLACEHOLDER_ENV);
		*py = 2;
	}
	return 0;
}

/*
 * A later cuInit in a process that holds a lease: check that the lease's
 * descriptors are still ours. A program that closes every descriptor (a
 * daemon, `closefrom`) drops its lease while it may still use the GPU, and
 * another job can then be given the GPU: exclusion is gone, so say so,
 * once, and fail this and every later cuInit. 0 or a CUDA error.
 */
static int lease_intact(void)
{
	for (int i = 0; i < gate_lease.ndevices; i++) {
		struct stat st;

		if (gm__fstat(gate_lease.fds[i], &st) == 0 &&
		    (unsigned long long)st.st_dev == gate_ids[i].dev &&
		    (unsigned long long)st.st_ino == gate_ids[i].ino)
			continue;
		pthread_mutex_lock(&gate_lock);
		if (__atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) == ST_HELD) {
			gmp_say("this process closed the descriptor that held its lease on GPU %d (descriptor %d), so another job may be given that GPU while this process still uses it; exclusion is no longer guaranteed, and cuInit now fails with CUDA_ERROR_NO_DEVICE",
				gate_lease.devices[i], gate_lease.fds[i]);
			gate_code = GMP_CUDA_ERROR_NO_DEVICE;
			state_set(ST_SHUT);
		}
		pthread_mutex_unlock(&gate_lock);
		return __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) ==
			ST_SHUT ? gate_code : 0;
	}
	return 0;
}

int gmp_gate(void)
{
	static const char *const keys[] = { "GPUMUTEX_JOB",
					     "CUDA_VISIBLE_DEVICES",
					     "CUDA_DEVICE_ORDER",
					     GMP_PLACEHOLDER_ENV };
	const char *values[4] = { NULL, NULL, NULL, NULL };
	int saved = errno, st, code, py = 0, next = ST_OPEN;

	st = __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE);
	if (st == ST_HELD) {
		code = lease_intact();
		errno = saved;
		return code;
	}
	if (st == ST_OPEN || st == ST_DEFER || st == ST_EXIT)
		return 0;
	if (st == ST_SHUT)
		return gate_code;
	pthread_mutex_lock(&gate_lock);
	st = __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE);
	if (st != ST_NEW) {
		pthread_mutex_unlock(&gate_lock);
		return st == ST_SHUT ? gate_code : 0;
	}
	__atomic_store_n(&gate_state, ST_BUSY, __ATOMIC_RELEASE);
	gate_in = 1;
	code = gate_run(&py, &next);
	gate_in = 0;
	gate_code = code;
	state_set(code ? ST_SHUT : next);
	pthread_mutex_unlock(&gate_lock);
	/* GPU time: CUPTI calls the driver, so it starts outside the lock
	 * (gputime.h). */
	gmp_gt_run_pending();

	/* After the unlock: updating os.environ may run Python code, which
	 * may switch to a thread that holds the GIL and is blocked on
	 * gate_lock in its own cuInit. */
	if (py) {
		values[0] = env_job;
		if (env_cvd[0]) {
			values[1] = env_cvd;
			values[2] = "PCI_BUS_ID";
		}
		if (py == 2)
			values[3] = GMP_PYENV_UNSET;
		gmp_pyenv_update(keys, values, 4);
	}
	errno = saved;
	return code;
}

int gmp_gate_code(void)
{
	return gate_code ? gate_code : GMP_CUDA_ERROR_NO_DEVICE;
}

/* ---- Idle suspension (suspend.c) ---------------------------------------------- */

/* resume's "fail this call only" (not a CUresult). */
#define GMP_RESUME_RETRY (-2)
static int64_t resume_t0;

/*
 * The first wrapped call after a suspension, under gate_lock: queue for
 * the same GPUs as a new claim (a fresh ticket: behind whoever queued
 * meanwhile, first come first served, so neither side starves), then
 * restore and unlock. 0, GMP_RESUME_RETRY, or a sticky CUDA error when
 * the driver would not restore.
 */
static int resume(const char *call)
{
	resume_t0 = gmp_mono_ms();
	if (take(call))
		return GMP_RESUME_RETRY;
	if (gmp_susp_restore()) {
		gm_lease_release(&gate_lease);
		gate_own = 0;
		gmp_susp_failed();
		return GMP_CUDA_ERROR_NO_DEVICE;
	}
	return 0;
}

int gmp_gate_holds(void)
{
	return __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) == ST_HELD &&
	       gate_own;
}

int gmp_gate_suspend(long seen, const char **why)
{
	/* static: the helper thread's stack is small, and only it suspends */
	static struct gm_lease gone;
	int rc = -1;

	/* GPU time: CUPTI's records handed over while the driver still
	 * answers (after a checkpoint it is locked). */
	gmp_gt_flush();
	pthread_mutex_lock(&gate_lock);
	if (__atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) == ST_HELD &&
	    gate_own) {
		/* From here no call goes straight to the driver: each takes
		 * the slow path, which waits for gate_lock. */
		state_set(ST_GOING); /* and gmp_go 0 */
		gate_in = 1;
		rc = gmp_susp_checkpoint(seen, why);
		if (rc == 0) {
			/* Checkpointed: nothing of ours is on the GPUs. The
			 * job file marked before the lease goes: a new
			 * process of the job then claims our GPUs, where we
			 * can join it (lease.c, narrow_to_suspended). The
			 * lease ends when its last member lets go. */
			gmp_susp_done();
			gm_lease_release(&gate_lease);
			gate_own = 0;
			state_set(ST_SUSP);
			gone = gate_lease; /* for the record, after the lock */
		} else {
			state_set(ST_HELD);
		}
		gate_in = 0;
	}
	pthread_mutex_unlock(&gate_lock);
	if (rc == 0) {
		gmp_susp_record(&gone);
		gmp_gt_end("suspend", 0);
	}
	return rc;
}

int gmp_gate_work(const char *call)
{
	return gmp_gate_work_counted(call, NULL);
}

int gmp_gate_work_counted(const char *call, int *inflight)
{
	int saved = errno, st, code = 0;

	st = __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE);
	if (st == ST_OPEN || st == ST_HELD)
		return 0;
	if (st == ST_SHUT)
		return gate_code;
	if (gate_in) /* from inside the gate on this thread: a bug */
		return GMP_CUDA_ERROR_NO_DEVICE;
	if (st == ST_NEW || st == ST_BUSY) {
		/* A device call before any cuInit: decide as cuInit would
		 * (the driver is not initialised, so the call itself will
		 * fail, but nothing may reach the GPU unqueued). */
		code = gmp_gate();
		if (code) {
			errno = saved;
			return code;
		}
	}
	pthread_mutex_lock(&gate_lock);
	st = __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE);
	if (st == ST_EXIT && gmp_exit_teardown_call(call)) {
		/* Freeing, destroying, waiting: no work for a GPU, and the
		 * process's own teardown, which must not queue behind the
		 * next job. */
		if (inflight)
			__atomic_add_fetch(inflight, 1, __ATOMIC_SEQ_CST);
		code = inflight ? GMP_GATE_COUNTED : 0;
	} else if (st == ST_DEFER || st == ST_EXIT || st == ST_SUSP) {
		gate_in = 1;
		code = st == ST_SUSP ? resume(call) : take(call);
		gate_in = 0;
		if (code == GMP_RESUME_RETRY) {
			/* A resume that timed out (GPUMUTEX_TIMEOUT) or could
			 * not queue: this call fails, the next one tries
			 * again; the state stays checkpointed. */
			code = GMP_CUDA_ERROR_NO_DEVICE;
		} else if (code) {
			gate_code = code;
			state_set(ST_SHUT);
		} else {
			state_set(ST_HELD);
			/* Counted in flight before the lock is let go: a
			 * give-back (which takes the lock, then waits for the
			 * calls in flight) cannot come between this grant and
			 * the call it was taken for. */
			if (inflight)
				__atomic_add_fetch(inflight, 1,
						   __ATOMIC_SEQ_CST);
			gmp_wrap_giveback_arm(gate_give_back_ms);
			gmp_susp_arm(&gate_cfg, &gate_lease);
			gmp_gt_granted(&gate_cfg, &gate_lease);
			if (st == ST_SUSP)
				gmp_susp_resumed(&gate_lease,
						 gmp_mono_ms() - resume_t0);
			code = inflight ? GMP_GATE_COUNTED : 0;
		}
	} else if (__atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) == ST_SHUT) {
		code = gate_code;
	}
	pthread_mutex_unlock(&gate_lock);
	gmp_gt_run_pending();
	errno = saved;
	return code;
}

void gmp_gate_context_gone(void)
{
	if (__atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) == ST_HELD &&
	    gate_own)
		gmp_wrap_giveback_arm(gate_give_back_ms);
}

int gmp_gate_exit_release(int (*quiesce)(void))
{
	static int marks[GM_MAX_DEVICES];
	int done = 0;

	pthread_mutex_lock(&gate_lock);
	if (__atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) == ST_HELD &&
	    gate_own) {
		go_set(0);
		gate_in = 1;
		if (quiesce() == 0 &&
		    gm_lease_exit_mark(gate_cfg.lock_dir, &gate_lease, marks,
				       gate_err, sizeof gate_err) == 0) {
			/* The marks' descriptors stay open until the
			 * process is gone: that is what they say. */
			gm_lease_release(&gate_lease);
			gate_own = 0;
			state_set(ST_EXIT);
			done = 1;
		} else {
			go_set(1);
		}
		gate_in = 0;
	}
	pthread_mutex_unlock(&gate_lock);
	return done;
}

int gmp_gate_held_devices(int *devs, const char **lock_dir)
{
	int n = 0;

	pthread_mutex_lock(&gate_lock);
	if (__atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) == ST_HELD) {
		n = gate_lease.ndevices;
		memcpy(devs, gate_lease.devices, sizeof(int) * (size_t)n);
	}
	pthread_mutex_unlock(&gate_lock);
	/* Written once, by the first cuInit, before any lease. */
	*lock_dir = gate_cfg.lock_dir;
	return n;
}

void gmp_gate_give_back(void)
{
	int gone = 0;

	pthread_mutex_lock(&gate_lock);
	if (__atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) == ST_HELD &&
	    gate_own) {
		/* No new call goes straight to the driver from here on; the
		 * check waits for context calls in flight. */
		go_set(0);
		gate_in = 1;
		if (gmp_wrap_may_hold_context()) {
			go_set(1);
		} else {
			/* Closing is enough: the lease lives on in other
			 * members (forked children share our descriptions,
			 * joiners have their own) and ends with the last. */
			gm_lease_release(&gate_lease);
			gate_own = 0;
			state_set(ST_DEFER);
			gone = 1;
		}
		gate_in = 0;
	}
	pthread_mutex_unlock(&gate_lock);
	/* No context was left, so no GPU work is: the records are all
	 * there to flush. */
	if (gone)
		gmp_gt_end("give-back", 1);
}
