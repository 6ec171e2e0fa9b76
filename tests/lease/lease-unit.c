/*
 * lease-unit - unit tests of the lease core: parsing, validation, the lock
 * directory's safety checks, and single-process acquire/join/state.
 * Multi-process behaviour is tested from tests/test_lease.py.
 *
 * Each test runs in a forked child so a crash fails only that test. The
 * last line is "N passed, N failed".
 *
 * This file: the shared checks and helpers (lease-unit.h), the
 * single-process lease tests and main; the parsing tests are in
 * unit-parse.c, the lock directory's in unit-lockdir.c.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lease.h"
#include "lease-unit.h"

int failures;
char tmpdir[256];

int count_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the DIR's own descriptor */
}

/* 1 when this process has exactly one descriptor of an events.log, and
 * it is close-on-exec (the lease's log descriptor). */
int log_fd_cloexec(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char path[320], target[4096];
	int n = 0, ok = 1;

	while (d && (de = readdir(d)) != NULL) {
		ssize_t len;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
		len = readlink(path, target, sizeof target - 1);
		target[len > 0 ? len : 0] = '\0';
		if (len > 0 && strstr(target, "/events.log")) {
			int fd = (int)strtol(de->d_name, NULL, 10);

			n++;
			ok = ok && (fcntl(fd, F_GETFD) & FD_CLOEXEC);
		}
	}
	if (d)
		closedir(d);
	return n == 1 && ok;
}

void base_config(struct gm_config *c, const char *dir, int ndev, int want)
{
	memset(c, 0, sizeof *c);
	for (int i = 0; i < ndev; i++)
		c->devices[i] = i;
	c->ndevices = ndev;
	c->want = want;
	c->timeout_s = -1;
	c->recheck_ms = 0;
	snprintf(c->lock_dir, sizeof c->lock_dir, "%s", dir);
	snprintf(c->job, sizeof c->job, "unitjob");
}

/* ---- acquire, join, state ---------------------------------------------- */

static void test_acquire_join_state(void)
{
	char dir[512], err[GM_ERR_MAX];
	struct gm_config c, other;
	struct gm_lease a, b, x, y;
	struct gm_state st;
	int before = count_fds();

	snprintf(dir, sizeof dir, "%s/basic", tmpdir);
	base_config(&c, dir, 4, 2);
	CHECK_INT(gm_lease_acquire(&c, NULL, &a, err, sizeof err), 0);
	CHECK_INT(a.ndevices, 2);
	CHECK_INT(a.devices[0], 0);
	CHECK_INT(a.devices[1], 1);
	CHECK_INT(a.joined, 0);
	CHECK(a.ticket > 0);
	/* Held: the lease's descriptors and its event log's, no other. */
	CHECK_INT(count_fds(), before + a.ndevices + 1);
	CHECK(log_fd_cloexec());

	/* The same job joins at once, on the same devices. */
	CHECK_INT(gm_lease_acquire(&c, NULL, &b, err, sizeof err), 0);
	CHECK_INT(b.joined, 1);
	CHECK_INT(b.lease_id, a.lease_id);
	CHECK_INT(b.ndevices, 2);
	CHECK_INT(b.devices[1], 1);

	/* Another job gets the other two. */
	other = c;
	snprintf(other.job, sizeof other.job, "otherjob");
	CHECK_INT(gm_lease_acquire(&other, NULL, &x, err, sizeof err), 0);
	CHECK_INT(x.devices[0], 2);
	CHECK_INT(x.devices[1], 3);

	/* State: four held devices, two leases, nobody waiting. */
	CHECK_INT(gm_state_read(dir, &st, err, sizeof err), 0);
	CHECK_INT(st.ndevices, 4);
	CHECK_INT(st.nleases, 2);
	CHECK_INT(st.nwaiters, 0);
	for (int i = 0; i < st.ndevices; i++) {
		CHECK_INT(st.devices[i].state, GM_DEV_HELD);
		CHECK(st.devices[i].lease >= 0);
	}
	if (st.nleases == 2) {
		struct gm_state_lease *l = &st.leases[st.devices[0].lease];
		CHECK(strcmp(l->job, "unitjob") == 0);
		CHECK_INT(l->uid, geteuid());
		CHECK_INT(l->npids, 1);
		CHECK_INT(l->pids[0], getpid());
		CHECK_HAS(l->cmd, "lease-unit");
		CHECK(l->start_ns > 0);
	}
	gm_state_free(&st);

	/* A third job cannot get in: with a timeout of 0 it gives up at once
	 * and leaves nothing behind. */
	other.want = 1;
	snprintf(other.job, sizeof other.job, "thirdjob");
	other.timeout_s = 0;
	CHECK_INT(gm_lease_acquire(&other, NULL, &y, err, sizeof err), -ETIMEDOUT);
	CHECK_HAS(err, "GPUMUTEX_TIMEOUT");
	other.timeout_s = 0.05;
	CHECK_INT(gm_lease_acquire(&other, NULL, &y, err, sizeof err), -ETIMEDOUT);
	CHECK_INT(y.ndevices, 0);
	CHECK_INT(gm_state_read(dir, &st, err, sizeof err), 0);
	CHECK_INT(st.nwaiters, 0);
	gm_state_free(&st);

	/* Closing every descriptor of the first lease frees devices 0 and 1. */
	gm_lease_release(&a);
	gm_lease_release(&b);
	other.timeout_s = 0;
	CHECK_INT(gm_lease_acquire(&other, NULL, &a, err, sizeof err), 0);
	CHECK_INT(a.devices[0], 0);
	CHECK_INT(a.joined, 0);

	/* A late process of the ended job does not revive its lease: it
	 * claims a fresh one (device 1 is the only free one). */
	c.want = 1;
	c.timeout_s = 0;
	CHECK_INT(gm_lease_acquire(&c, NULL, &b, err, sizeof err), 0);
	CHECK_INT(b.joined, 0);
	CHECK_INT(b.devices[0], 1);
	gm_lease_release(&a);
	gm_lease_release(&b);
	gm_lease_release(&x);
	CHECK_INT(count_fds(), before);
}

static void test_state_missing(void)
{
	struct gm_state st;
	char err[GM_ERR_MAX], dir[512];

	snprintf(dir, sizeof dir, "%s/nonexistent", tmpdir);
	CHECK_INT(gm_state_read(dir, &st, err, sizeof err), -ENOENT);
	CHECK_HAS(err, "does not exist");
}

static void test_bad_config_struct(void)
{
	struct gm_config c;
	struct gm_lease l;
	char err[GM_ERR_MAX], dir[512];

	snprintf(dir, sizeof dir, "%s/badcfg", tmpdir);
	base_config(&c, dir, 2, 3);
	CHECK_INT(gm_lease_acquire(&c, NULL, &l, err, sizeof err), -EINVAL);
	base_config(&c, dir, 2, 1);
	c.devices[1] = 0;
	CHECK_INT(gm_lease_acquire(&c, NULL, &l, err, sizeof err), -EINVAL);
	base_config(&c, dir, 2, 1);
	c.job[0] = '\0';
	CHECK_INT(gm_lease_acquire(&c, NULL, &l, err, sizeof err), -EINVAL);
}

struct test {
	const char *name;
	void (*fn)(void);
};

int main(void)
{
	static const struct test tests[] = {
		{ "parse_devices", test_parse_devices },
		{ "parse_want", test_parse_want },
		{ "parse_timeout", test_parse_timeout },
		{ "parse_uint", test_parse_uint },
		{ "job", test_job },
		{ "config_env", test_config_env },
		{ "lockdir_checks", test_lockdir_checks },
		{ "acquire_join_state", test_acquire_join_state },
		{ "state_missing", test_state_missing },
		{ "bad_config_struct", test_bad_config_struct },
	};
	int passed = 0, failed = 0;

	snprintf(tmpdir, sizeof tmpdir, "/tmp/gm-unit-XXXXXX");
	if (!mkdtemp(tmpdir) || chmod(tmpdir, 0755)) {
		perror("mkdtemp");
		return 1;
	}
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		int status;
		pid_t p = fork();

		if (p == 0) {
			failures = 0;
			tests[i].fn();
			_exit(failures ? 1 : 0);
		}
		waitpid(p, &status, 0);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			printf("ok   %s\n", tests[i].name);
			passed++;
		} else {
			printf("FAIL %s (%s %d)\n", tests[i].name,
			       WIFEXITED(status) ? "exit" : "signal",
			       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			failed++;
		}
	}
	{
		char cmd[300];
		snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", tmpdir);
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
