/*
 * adversary - helper for tests/test_lease_adversarial.py and
 * test_lease_contention.py (also test_planted.py): things a test job
 * (lease-holder) does not do. Built by the generic rule of the Makefile:
 *   make build/tests/adversary
 *
 * Usage:
 *   adversary lock FILE OFFSET rd|wr READY_FD WAIT_FD
 *       Open FILE (O_RDONLY for rd, O_RDWR for wr; O_NONBLOCK), take a
 *       one-byte OFD lock of that type at OFFSET, write 'r' to READY_FD,
 *       hold until WAIT_FD reaches EOF. Exit 1 if the lock is refused.
 *       (What any local user can do to a 0666 device FIFO.)
 *   adversary state LOCKDIR
 *       gm_state_read; prints "lease ID JOB DEVS" and "dev I STATE" lines.
 *   adversary joinlimit EXTRA
 *       Configured from GPUMUTEX_*; fills every descriptor hole, sets
 *       RLIMIT_NOFILE to (lowest free descriptor + EXTRA), then acquires.
 *       Models a host program close to its descriptor limit.
 *   adversary grantlimit
 *       Acquires; its on_granted hook fills every descriptor hole and sets
 *       RLIMIT_NOFILE so that exactly the descriptors released after the
 *       grant (ticket, job lock) are available to the post-grant cleanup.
 *   adversary threads N SAMEJOB
 *       N threads each call gm_lease_acquire (job GPUMUTEX_JOB-<i>, or the
 *       same job for all when SAMEJOB is 1), journal like lease-holder
 *       (grant/join/begin/tick/end), then close their lease descriptors.
 * Exit codes of the acquiring modes: 0 ok, 3 timed out, 4 other error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "lease.h"
#include "testjournal.h"

#ifndef F_OFD_SETLK
#define F_OFD_SETLK 37
#endif


static int mode_lock(int argc, char **argv)
{
	struct flock fl;
	int fd, rdonly, ready, wait_fd;

	if (argc != 7)
		return 2;
	rdonly = strcmp(argv[4], "rd") == 0;
	ready = atoi(argv[5]);
	wait_fd = atoi(argv[6]);
	fd = open(argv[2], (rdonly ? O_RDONLY : O_RDWR) | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		perror("adversary: open");
		return 1;
	}
	memset(&fl, 0, sizeof fl);
	fl.l_type = rdonly ? F_RDLCK : F_WRLCK;
	fl.l_whence = SEEK_SET;
	fl.l_start = (off_t)strtoll(argv[3], NULL, 0);
	fl.l_len = 1;
	if (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
		perror("adversary: lock");
		return 1;
	}
	if (write(ready, "r", 1) != 1)
		return 1;
	close(ready);
	drain(wait_fd);
	return 0;
}

static int mode_state(int argc, char **argv)
{
	struct gm_state st;
	char err[GM_ERR_MAX];

	if (argc != 3)
		return 2;
	if (gm_state_read(argv[2], &st, err, sizeof err)) {
		fprintf(stderr, "adversary: %s\n", err);
		return 4;
	}
	for (int i = 0; i < st.nleases; i++) {
		printf("lease %" PRIx64 " %s ", st.leases[i].lease_id,
		       st.leases[i].job);
		for (int k = 0; k < st.leases[i].ndevices; k++)
			printf("%s%d", k ? "," : "", st.leases[i].devices[k]);
		printf("\n");
	}
	for (int i = 0; i < st.ndevices; i++)
		printf("dev %d %d\n", st.devices[i].index, (int)st.devices[i].state);
	printf("waiters %d\n", st.nwaiters);
	gm_state_free(&st);
	return 0;
}

/* Fill every descriptor hole below the highest open descriptor, so the
 * table is dense; returns the number of the highest open descriptor. */
static int fill_holes(void)
{
	int top = -1;

	for (int fd = 0; fd < 4096; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			top = fd;
	for (;;) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return top;
		if (fd > top) {
			close(fd);
			return top;
		}
	}
}

static int set_nofile(int n)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_NOFILE, &r) < 0)
		return -1;
	r.rlim_cur = (rlim_t)n;
	return setrlimit(RLIMIT_NOFILE, &r);
}

static int config(struct gm_config *cfg)
{
	char err[GM_ERR_MAX];
	int rc = gm_config_from_env(cfg, err, sizeof err);

	if (rc) {
		fprintf(stderr, "adversary: config: %s\n", rc == 1 ? "unset" : err);
		return -1;
	}
	if (!cfg->job[0])
		gm_job_generate(cfg->job);
	return 0;
}

static int exit_code(int rc, const char *err)
{
	if (rc)
		fprintf(stderr, "gpumutex: %s\n", err);
	return rc == 0 ? 0 : rc == -ETIMEDOUT ? 3 : 4;
}

static int mode_joinlimit(int argc, char **argv)
{
	struct gm_config cfg;
	struct gm_lease l;
	char err[GM_ERR_MAX];
	int top, rc;

	if (argc != 3 || config(&cfg))
		return 2;
	top = fill_holes();
	if (set_nofile(top + 1 + atoi(argv[2])) < 0)
		return 2;
	rc = gm_lease_acquire(&cfg, NULL, &l, err, sizeof err);
	return exit_code(rc, err);
}

static void limit_on_grant(void *arg, const struct gm_lease *l)
{
	(void)arg;
	(void)l;
	/* After this hook the core closes the ticket and the job lock: those
	 * two slots are all the cleanup that follows will have. */
	set_nofile(fill_holes() + 1);
}

static int mode_grantlimit(int argc, char **argv)
{
	struct gm_config cfg;
	struct gm_acquire_hooks hooks = { NULL, limit_on_grant, NULL };
	struct gm_lease l;
	char err[GM_ERR_MAX];

	(void)argv;
	if (argc != 2 || config(&cfg))
		return 2;
	return exit_code(gm_lease_acquire(&cfg, &hooks, &l, err, sizeof err),
			 err);
}

struct worker {
	pthread_t t;
	int index, samejob, rc;
	struct gm_config cfg;
};

static void on_granted_t(void *arg, const struct gm_lease *l)
{
	struct worker *w = arg;
	char devs[GM_MAX_DEVICES * 4] = "";
	size_t off = 0;

	for (int i = 0; i < l->ndevices; i++)
		off += (size_t)snprintf(devs + off, sizeof devs - off, "%s%d",
					i ? "," : "", l->devices[i]);
	jwrite("ev=grant pid=%d job=%s seq=%" PRIu64 " devs=%s t=%" PRId64,
	       (int)getpid() * 100 + w->index, w->cfg.job, l->ticket, devs,
	       now_ns());
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct gm_acquire_hooks hooks = { NULL, on_granted_t, w };
	struct gm_lease l;
	char err[GM_ERR_MAX];
	int id = (int)getpid() * 100 + w->index;

	w->rc = gm_lease_acquire(&w->cfg, &hooks, &l, err, sizeof err);
	if (w->rc) {
		jwrite("ev=fail pid=%d job=%s rc=%d t=%" PRId64, id, w->cfg.job,
		       w->rc, now_ns());
		return NULL;
	}
	if (l.joined)
		jwrite("ev=join pid=%d job=%s t=%" PRId64, id, w->cfg.job, now_ns());
	for (int k = 0; k < 6; k++) {
		for (int i = 0; i < l.ndevices; i++)
			jwrite("ev=%s pid=%d job=%s dev=%d lease=%" PRIu64 " t=%" PRId64,
			       k == 0 ? "begin" : k == 5 ? "end" : "tick", id,
			       w->cfg.job, l.devices[i], l.lease_id, now_ns());
		sched_yield();
	}
	for (int i = 0; i < l.ndevices; i++)
		close(l.fds[i]);
	return NULL;
}

static int mode_threads(int argc, char **argv)
{
	struct gm_config base;
	struct worker *w;
	int n, bad = 0;

	if (argc != 4 || config(&base))
		return 2;
	n = atoi(argv[2]);
	w = calloc((size_t)n, sizeof *w);
	if (!w)
		return 2;
	for (int i = 0; i < n; i++) {
		w[i].index = i;
		w[i].samejob = atoi(argv[3]);
		w[i].cfg = base;
		if (!w[i].samejob)
			snprintf(w[i].cfg.job, sizeof w[i].cfg.job, "%.50s-%d",
				 base.job, i);
	}
	for (int i = 0; i < n; i++)
		if (pthread_create(&w[i].t, NULL, work, &w[i]))
			return 2;
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].t, NULL);
		bad |= w[i].rc != 0;
	}
	free(w);
	return bad ? 4 : 0;
}

int main(int argc, char **argv)
{
	const char *jpath = getenv("GM_JOURNAL");

	if (jpath)
		journal = open(jpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
	if (argc < 2)
		return 2;
	if (!strcmp(argv[1], "lock"))
		return mode_lock(argc, argv);
	if (!strcmp(argv[1], "state"))
		return mode_state(argc, argv);
	if (!strcmp(argv[1], "joinlimit"))
		return mode_joinlimit(argc, argv);
	if (!strcmp(argv[1], "grantlimit"))
		return mode_grantlimit(argc, argv);
	if (!strcmp(argv[1], "threads"))
		return mode_threads(argc, argv);
	fprintf(stderr, "adversary: unknown mode %s\n", argv[1]);
	return 2;
}
