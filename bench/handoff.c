/*
 * handoff - hand-off latency of the lease core against the physical limit.
 *
 * Two measurements, interleaved round by round so machine noise hits both
 * alike:
 *   flock:    A holds flock(LOCK_EX) on a file; B blocks in flock(LOCK_EX);
 *             A takes t0 and exits; B takes t1 when flock returns.
 *   gpumutex: A holds a lease on one device; B waits for it at the head of
 *             the line (blocked in poll on the device's doorbell); A takes
 *             t0 and exits; B takes t1 when gm_lease_acquire returns.
 * Latency = t1 - t0 (CLOCK_MONOTONIC). Before A exits it waits until B has
 * announced it is about to block, then 2 ms more, so B is really asleep in
 * the kernel (a benchmark may sleep; tests may not).
 *
 * It also times an uncontended acquire (take a free device, let it go),
 * the cost gpumutex adds to a cuInit that does not have to wait.
 *
 * GM_HANDOFF_AB=1 compares the event log off and on (see main).
 *
 * A leaves through _exit, as a process killed at the end would; with
 * GM_HANDOFF_EXIT=1 through exit() instead, so that what a process runs
 * at exit (the event log's exit record) is on the measured path.
 *
 * Usage: handoff [ROUNDS] [LOCKDIR]; prints "name value" lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lease.h"

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void nap_ms(int ms)
{
	struct timespec ts = { 0, ms * 1000000L };
	nanosleep(&ts, NULL);
}

/* Shared between the processes of one round. */
struct shm {
	volatile int64_t t0, t1;
};

/* The pipe B writes to just before it blocks (see round()). */
static int ready_pipe[2];
static int use_exit; /* GM_HANDOFF_EXIT=1: A leaves through exit() */

static void say_ready(void)
{
	if (write(ready_pipe[1], "w", 1) != 1)
		_exit(90);
}

static void on_wait(void *arg, const struct gm_wait_info *w)
{
	(void)arg;
	(void)w;
	say_ready();
}

static void base_cfg(struct gm_config *c, const char *dir, const char *job)
{
	memset(c, 0, sizeof *c);
	c->devices[0] = 0;
	c->ndevices = 1;
	c->want = 1;
	c->timeout_s = -1;
	c->recheck_ms = 0;
	snprintf(c->lock_dir, sizeof c->lock_dir, "%s", dir);
	snprintf(c->job, sizeof c->job, "%s", job);
}

/* A contender's way to get the lock (who is 'a' or 'b'); 0 on success.
 * B's must call say_ready() just before it blocks. */
typedef int (*take_fn)(const char *where, int round, char who);

static int take_gpumutex(const char *dir, int r, char who)
{
	struct gm_config cfg;
	struct gm_lease l;
	struct gm_acquire_hooks hooks = { on_wait, NULL, NULL };
	char err[GM_ERR_MAX], job[32];

	snprintf(job, sizeof job, "%c%d", who, r);
	base_cfg(&cfg, dir, job);
	return gm_lease_acquire(&cfg, who == 'b' ? &hooks : NULL, &l, err,
				sizeof err);
}

static int take_flock(const char *path, int r, char who)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);

	(void)r;
	if (fd < 0)
		return -1;
	if (who == 'b')
		say_ready();
	return flock(fd, LOCK_EX);
}

/*
 * One round: A takes the lock and says so; B starts and blocks; once B has
 * announced it is about to block, A waits 2 ms more (so B is really asleep
 * in the kernel), takes t0 and exits holding the lock; B takes t1 when it
 * gets the lock. Returns t1 - t0.
 */
static int64_t one_round(struct shm *s, take_fn take, const char *where,
			 int r)
{
	int hold[2], st;
	pid_t a, b;
	char c;

	if (pipe(hold) || pipe(ready_pipe))
		exit(1);
	a = fork();
	if (a == 0) {
		if (take(where, r, 'a'))
			_exit(91);
		if (write(hold[1], "h", 1) != 1)
			_exit(92);
		if (read(ready_pipe[0], &c, 1) != 1)
			_exit(93);
		nap_ms(2);
		s->t0 = now_ns();
		if (use_exit)
			exit(0);
		_exit(0); /* the kernel releases the lock */
	}
	if (read(hold[0], &c, 1) != 1)
		exit(1);
	b = fork();
	if (b == 0) {
		if (take(where, r, 'b'))
			_exit(94);
		s->t1 = now_ns();
		_exit(0);
	}
	waitpid(a, &st, 0);
	waitpid(b, &st, 0);
	close(hold[0]);
	close(hold[1]);
	close(ready_pipe[0]);
	close(ready_pipe[1]);
	return s->t1 - s->t0;
}

static int cmp64(const void *x, const void *y)
{
	int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
	return (a > b) - (a < b);
}

static int64_t median(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp64);
	return v[n / 2];
}

/* The uncontended acquire `n` times, log on/off per `ab` as below. */
static int uncontended(const char *dir, int n, int ab, int64_t *u[2])
{
	char udir[300];

	snprintf(udir, sizeof udir, "%s-u", dir);
	for (int r = 0; r < n; r++) {
		for (int k = 0; k < (ab ? 2 : 1); k++) {
			int side = ab ? (k ^ (r & 1)) : 0;
			struct gm_config cfg;
			struct gm_lease l;
			char err[GM_ERR_MAX], job[32];
			int64_t t;

			if (ab)
				setenv("GPUMUTEX_LOG", side ? "1" : "0", 1);
			snprintf(job, sizeof job, "u%d-%d", side, r);
			base_cfg(&cfg, udir, job);
			t = now_ns();
			if (gm_lease_acquire(&cfg, NULL, &l, err, sizeof err))
				return 1;
			u[side][r] = now_ns() - t;
			for (int i = 0; i < l.ndevices; i++)
				close(l.fds[i]);
		}
	}
	return 0;
}

/*
 * GM_HANDOFF_AB=1: every round is a flock hand-off and two gpumutex ones,
 * one with the event log off (GPUMUTEX_LOG=0) and one with it on, in
 * alternating order, and the uncontended acquires alternate likewise:
 * the two sides of the comparison interleaved hand-off by hand-off, so
 * that the machine's noise hits both alike. Prints the figures of both
 * sides, suffixed _log0 and _log1.
 */
int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200;
	const char *abv = getenv("GM_HANDOFF_AB");
	int ab = abv && !strcmp(abv, "1"), sides = ab ? 2 : 1;
	char dir[256], path[300];
	int64_t *g[2], *f, *u[2];
	struct shm *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	use_exit = getenv("GM_HANDOFF_EXIT") && !strcmp(getenv("GM_HANDOFF_EXIT"), "1");
	if (argc > 2)
		snprintf(dir, sizeof dir, "%s", argv[2]);
	else
		snprintf(dir, sizeof dir, "/tmp/gm-bench-handoff-%d", (int)getpid());
	snprintf(path, sizeof path, "%s.flock", dir);
	f = calloc((size_t)rounds, sizeof *f);
	for (int k = 0; k < 2; k++) {
		g[k] = calloc((size_t)rounds, sizeof *g[k]);
		u[k] = calloc((size_t)rounds, sizeof *u[k]);
		if (!g[k] || !u[k])
			return 1;
	}
	if (rounds < 1 || !f || s == MAP_FAILED)
		return 1;
	for (int r = 0; r < rounds; r++) {
		f[r] = one_round(s, take_flock, path, r);
		for (int k = 0; k < sides; k++) {
			int side = ab ? (k ^ (r & 1)) : 0;
			if (ab)
				setenv("GPUMUTEX_LOG", side ? "1" : "0", 1);
			g[side][r] = one_round(s, take_gpumutex, dir, 2 * r + side);
		}
	}
	if (uncontended(dir, rounds, ab, u))
		return 1;
	if (ab) {
		/* Paired: log on minus log off of the same round (adjacent
		 * in time), so that the machine's drift cancels. */
		int64_t *dg = calloc((size_t)rounds, sizeof *dg);
		int64_t *du = calloc((size_t)rounds, sizeof *du);

		if (!dg || !du)
			return 1;
		for (int r = 0; r < rounds; r++) {
			dg[r] = g[1][r] - g[0][r];
			du[r] = u[1][r] - u[0][r];
		}
		printf("handoff_log_paired_delta_median_us %.1f\n",
		       median(dg, rounds) / 1e3);
		printf("acquire_log_paired_delta_median_us %.1f\n",
		       median(du, rounds) / 1e3);
		free(dg);
		free(du);
	}
	for (int k = 0; k < sides; k++) {
		const char *sfx = !ab ? "" : k ? "_log1" : "_log0";
		int64_t gm, fl = median(f, rounds);

		printf("acquire_uncontended%s_median_us %.1f\n", sfx,
		       median(u[k], rounds) / 1e3);
		gm = median(g[k], rounds);
		printf("handoff_gpumutex%s_exit_median_us %.1f\n", sfx, gm / 1e3);
		printf("handoff_gpumutex%s_exit_p90_us %.1f\n", sfx,
		       g[k][rounds * 9 / 10] / 1e3);
		printf("handoff_ratio%s_median %.2f\n", sfx, (double)gm / (double)fl);
	}
	printf("handoff_rounds %d\n", rounds);
	printf("handoff_flock_exit_median_us %.1f\n", median(f, rounds) / 1e3);
	printf("handoff_flock_exit_p90_us %.1f\n", f[rounds * 9 / 10] / 1e3);
	unlink(path);
	return 0;
}
