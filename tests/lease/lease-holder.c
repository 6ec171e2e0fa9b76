/*
 * lease-holder - a test job: takes a lease through the core, records when
 * it held each device in a journal, and exits.
 *
 * Configured like the preload library, from GPUMUTEX_* variables; a
 * missing GPUMUTEX_JOB is generated and exported, as the library does.
 * Journal lines (appended with one write each, so many processes can share
 * one file; format shared with the fake driver, see tests/lib/journal.py):
 *   ev=wait  pid= job= seq= t=            first time it had to wait
 *   ev=grant pid= job= seq= devs= t=      devices locked, ticket still held
 *   ev=join  pid= job= devs= t=           joined the job's live lease (devs:
 *                                         those of its devices it may use)
 *   ev=begin pid= job= dev= lease= t=     after the lease was returned
 *   ev=tick  pid= job= dev= lease= t=     while holding (proof of use)
 *   ev=end   pid= job= dev= lease= t=     just before letting go
 *   ev=fail  pid= job= rc= t=             acquire failed (message on stderr)
 * begin/tick/end name the devices this process may use (gm_lease.usable).
 * Exit status: 0; 3 timed out; 7 its job's lease does not fit it
 * (GM_EJOIN); 4 another error; 2 bad arguments.
 *
 * Options:
 *   --journal FILE    where to append (default $GM_JOURNAL)
 *   --ticks N         hold for N ticks of up to --tick-us microseconds
 *   --tick-us N       (default 200)
 *   --wait-fd N       after begin, read fd N until EOF before ending (the
 *                     test decides when we let go, without sleeps)
 *   --ready-fd N      write one byte to fd N once the lease is held
 *   --waiting-fd N    write one byte to fd N when it starts waiting
 *   --ask-fd R W      after begin, for each byte read from fd R, write
 *                     '1' or '0' to fd W: whether gm_lease_contended says
 *                     a waiter wants the lease ('e' on error); until EOF
 *   --spawn PROG...   after begin, fork+exec PROG with every descriptor
 *                     above 2 closed (as Python's subprocess does), wait
 *                     for it, and exit with its status
 *   --fork-join       after begin, fork; the child calls acquire again
 *                     (it must join), journals, and exits; the parent
 *                     waits for it
 *   --orphan FD       after begin, fork a child that keeps the lease (it
 *                     shares our descriptors) and reads FD until EOF; the
 *                     parent exits at once
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lease.h"
#include "testjournal.h"

static int waiting_fd = -1;
static char job[GM_JOB_MAX + 1];

/* The devices of the lease this process may use (all, for a claimer). */
static int usable(const struct gm_lease *l, int i)
{
	return (l->usable >> l->devices[i]) & 1;
}

static void devlist(const struct gm_lease *l, char *out, size_t len)
{
	size_t off = 0;
	out[0] = '\0';
	for (int i = 0; i < l->ndevices; i++)
		if (usable(l, i))
			off += (size_t)snprintf(out + off, len - off, "%s%d",
						off ? "," : "", l->devices[i]);
}

static void on_wait(void *arg, const struct gm_wait_info *w)
{
	(void)arg;
	jwrite("ev=wait pid=%d job=%s seq=%" PRIu64 " ahead=%d head=%d jobbusy=%d t=%" PRId64,
	       (int)getpid(), job, w->ticket, w->ahead, w->head, w->job_busy,
	       now_ns());
	if (waiting_fd >= 0) {
		if (write(waiting_fd, "w", 1) != 1)
			perror("lease-holder: waiting-fd");
		close(waiting_fd);
		waiting_fd = -1;
	}
}

static void on_granted(void *arg, const struct gm_lease *l)
{
	char devs[GM_MAX_DEVICES * 4];
	(void)arg;
	devlist(l, devs, sizeof devs);
	jwrite("ev=grant pid=%d job=%s seq=%" PRIu64 " devs=%s t=%" PRId64,
	       (int)getpid(), job, l->ticket, devs, now_ns());
}

static int acquire(struct gm_lease *l)
{
	struct gm_config cfg;
	struct gm_acquire_hooks hooks = { on_wait, on_granted, NULL };
	char err[GM_ERR_MAX];
	int rc = gm_config_from_env(&cfg, err, sizeof err);

	if (rc == 1) {
		fprintf(stderr, "lease-holder: GPUMUTEX_VISIBLE_DEVICES is not set\n");
		return 2;
	}
	if (rc == 0 && !cfg.job[0]) {
		gm_job_generate(cfg.job);
		setenv("GPUMUTEX_JOB", cfg.job, 1);
	}
	snprintf(job, sizeof job, "%s", cfg.job[0] ? cfg.job : "-");
	if (rc == 0)
		rc = gm_lease_acquire(&cfg, &hooks, l, err, sizeof err);
	if (rc) {
		fprintf(stderr, "gpumutex: %s\n", err);
		jwrite("ev=fail pid=%d job=%s rc=%d t=%" PRId64, (int)getpid(), job,
		       rc, now_ns());
		return rc == -ETIMEDOUT ? 3 : rc == -GM_EJOIN ? 7 : 4;
	}
	if (l->joined) {
		char devs[GM_MAX_DEVICES * 4];
		devlist(l, devs, sizeof devs);
		jwrite("ev=join pid=%d job=%s devs=%s t=%" PRId64, (int)getpid(), job,
		       devs, now_ns());
	}
	return 0;
}

static void each_dev(const struct gm_lease *l, const char *ev)
{
	for (int i = 0; i < l->ndevices; i++)
		if (usable(l, i))
			jwrite("ev=%s pid=%d job=%s dev=%d lease=%" PRIu64 " t=%" PRId64,
			       ev, (int)getpid(), job, l->devices[i], l->lease_id,
			       now_ns());
}

static int spawn_and_wait(char **argv)
{
	int st;
	pid_t p = fork();

	if (p == 0) {
		/* Close everything above stderr, as subprocess (close_fds) does:
		 * the child has no inherited lease and must join through
		 * GPUMUTEX_JOB. Keep the journal only if the child needs it:
		 * it reopens it from GM_JOURNAL. */
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		execvp(argv[0], argv);
		_exit(127);
	}
	if (p < 0 || waitpid(p, &st, 0) < 0)
		return 4;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	const char *jpath = getenv("GM_JOURNAL");
	long ticks = 0, tick_us = 200;
	int wait_fd = -1, ready_fd = -1, fork_join = 0, orphan_fd = -1, rc, i;
	int ask_r = -1, ask_w = -1;
	char **spawn = NULL;
	struct gm_lease lease;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--journal") && i + 1 < argc)
			jpath = argv[++i];
		else if (!strcmp(argv[i], "--ticks") && i + 1 < argc)
			ticks = atol(argv[++i]);
		else if (!strcmp(argv[i], "--tick-us") && i + 1 < argc)
			tick_us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--wait-fd") && i + 1 < argc)
			wait_fd = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ready-fd") && i + 1 < argc)
			ready_fd = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--waiting-fd") && i + 1 < argc)
			waiting_fd = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ask-fd") && i + 2 < argc) {
			ask_r = atoi(argv[++i]);
			ask_w = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--fork-join"))
			fork_join = 1;
		else if (!strcmp(argv[i], "--orphan") && i + 1 < argc)
			orphan_fd = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--spawn") && i + 1 < argc) {
			spawn = argv + i + 1;
			break;
		} else {
			fprintf(stderr, "lease-holder: bad argument %s\n", argv[i]);
			return 2;
		}
	}
	if (jpath)
		journal = open(jpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);

	rc = acquire(&lease);
	if (rc)
		return rc;
	each_dev(&lease, "begin");
	if (ready_fd >= 0) {
		if (write(ready_fd, "r", 1) != 1)
			perror("lease-holder: ready");
		close(ready_fd);
	}
	for (char c; ask_r >= 0 && read(ask_r, &c, 1) == 1;) {
		struct gm_config cfg;
		char err[GM_ERR_MAX];
		int got = gm_config_from_env(&cfg, err, sizeof err) ? -1 :
			  gm_lease_contended(cfg.lock_dir, &lease, job, err,
					     sizeof err);
		c = got < 0 ? 'e' : got ? '1' : '0';
		if (write(ask_w, &c, 1) != 1)
			break;
	}
	srand((unsigned)getpid() ^ (unsigned)now_ns());
	for (long t = 0; t < ticks; t++) {
		struct timespec ts = { 0, (long)(rand() % (tick_us + 1)) * 1000 };
		each_dev(&lease, "tick");
		nanosleep(&ts, NULL);
	}
	if (fork_join) {
		pid_t p = fork();
		if (p == 0) {
			struct gm_lease again;
			rc = acquire(&again);
			if (rc)
				_exit(rc);
			each_dev(&again, "tick");
			_exit(again.joined ? 0 : 5);
		}
		int st;
		if (p < 0 || waitpid(p, &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			rc = 6;
	}
	if (spawn)
		rc = spawn_and_wait(spawn);
	if (orphan_fd >= 0) {
		pid_t p = fork();
		if (p == 0) {
			/* We share the parent's lease descriptors. */
			drain(orphan_fd);
			each_dev(&lease, "tick");
			each_dev(&lease, "end");
			_exit(0);
		}
		close(orphan_fd);
		return p < 0 ? 4 : 0; /* the parent leaves at once */
	}
	if (wait_fd >= 0)
		drain(wait_fd);
	each_dev(&lease, "end");
	return rc;
}
