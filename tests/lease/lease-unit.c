/*
 * lease-unit - unit tests of the lease core: parsing, validation, the lock
 * directory's safety checks, and single-process acquire/join/state.
 * Multi-process behaviour is tested from tests/test_lease.py.
 *
 * Each test runs in a forked child so a crash fails only that test. The
 * last line is "N passed, N failed".
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

static int failures;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "  %s:%d: CHECK(%s) failed\n",       \
				__FILE__, __LINE__, #cond);                  \
			failures++;                                          \
		}                                                            \
	} while (0)

#define CHECK_INT(a, b)                                                      \
	do {                                                                 \
		long long _a = (long long)(a), _b = (long long)(b);          \
		if (_a != _b) {                                              \
			fprintf(stderr, "  %s:%d: %s == %lld, expected %s == %lld\n", \
				__FILE__, __LINE__, #a, _a, #b, _b);         \
			failures++;                                          \
		}                                                            \
	} while (0)

#define CHECK_HAS(str, sub)                                                  \
	do {                                                                 \
		if (!strstr((str), (sub))) {                                 \
			fprintf(stderr, "  %s:%d: \"%s\" lacks \"%s\"\n",    \
				__FILE__, __LINE__, (str), (sub));           \
			failures++;                                          \
		}                                                            \
	} while (0)

static char tmpdir[256];

static int count_fds(void)
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
static int log_fd_cloexec(void)
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

static void base_config(struct gm_config *c, const char *dir, int ndev, int want)
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

/* ---- parsing ---------------------------------------------------------- */

static void test_parse_devices(void)
{
	int d[GM_MAX_DEVICES], n = -1;
	char err[GM_ERR_MAX];
	static const char *const bad[] = {
		"", "0,,1", "a", "-1", "1,1", "64", ",0", "0,", " 0", "0 ,1",
		"1000", "+1", "0x1", "0;1", "1.5", "99999999999999999999",
	};

	CHECK_INT(gm_parse_devices("V", "0,2,3", d, &n, err, sizeof err), 0);
	CHECK_INT(n, 3);
	CHECK_INT(d[0], 0);
	CHECK_INT(d[1], 2);
	CHECK_INT(d[2], 3);
	CHECK_INT(gm_parse_devices("V", "63", d, &n, err, sizeof err), 0);
	CHECK_INT(d[0], 63);
	CHECK_INT(gm_parse_devices("V", "3,1", d, &n, err, sizeof err), 0);
	CHECK_INT(d[0], 3);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		CHECK_INT(gm_parse_devices("GPUMUTEX_VISIBLE_DEVICES", bad[i], d, &n,
					   err, sizeof err), -EINVAL);
		CHECK_HAS(err, "GPUMUTEX_VISIBLE_DEVICES");
		if (bad[i][0])
			CHECK_HAS(err, bad[i]);
	}
	gm_parse_devices("GPUMUTEX_VISIBLE_DEVICES", "1,1", d, &n, err, sizeof err);
	CHECK_HAS(err, "twice");
	gm_parse_devices("GPUMUTEX_VISIBLE_DEVICES", "", d, &n, err, sizeof err);
	CHECK_HAS(err, "empty");
}

static void test_parse_want(void)
{
	int w = 0;
	char err[GM_ERR_MAX];
	static const char *const bad[] = { "0", "-1", "abc", "5", "", "1.0",
					   " 1", "+1", "1x", "99999999999",
					   "\t1", "\n1", "1\n", "0x1",
					   "99999999999999999999999" };

	CHECK_INT(gm_parse_want("N", "1", 4, &w, err, sizeof err), 0);
	CHECK_INT(w, 1);
	CHECK_INT(gm_parse_want("N", "4", 4, &w, err, sizeof err), 0);
	CHECK_INT(w, 4);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		CHECK_INT(gm_parse_want("GPUMUTEX_NUM_DEVICES", bad[i], 4, &w, err,
					sizeof err), -EINVAL);
		CHECK_HAS(err, "GPUMUTEX_NUM_DEVICES");
	}
	gm_parse_want("GPUMUTEX_NUM_DEVICES", "5", 4, &w, err, sizeof err);
	CHECK_HAS(err, "from 1 to 4");
}

static void test_parse_timeout(void)
{
	double t = -5;
	char err[GM_ERR_MAX];
	static const char *const bad[] = { "", "-1", "abc", "inf", "nan", "1e3",
					   "0x10", " 1", "1s", ".", "+1", "1.2.3",
					   "\t1", "1 ", "1000000001", "-0",
					   "99999999999999999999999", "1.5e2" };

	CHECK_INT(gm_parse_timeout("T", "0", &t, err, sizeof err), 0);
	CHECK(t == 0);
	CHECK_INT(gm_parse_timeout("T", "0.5", &t, err, sizeof err), 0);
	CHECK(t == 0.5);
	CHECK_INT(gm_parse_timeout("T", "30", &t, err, sizeof err), 0);
	CHECK(t == 30);
	CHECK_INT(gm_parse_timeout("T", ".25", &t, err, sizeof err), 0);
	CHECK(t == 0.25);
	CHECK_INT(gm_parse_timeout("T", "5.", &t, err, sizeof err), 0);
	CHECK(t == 5);
	CHECK_INT(gm_parse_timeout("T", "1000000000", &t, err, sizeof err), 0);
	CHECK(t == 1e9);
	gm_parse_timeout("GPUMUTEX_TIMEOUT", "1e3", &t, err, sizeof err);
	CHECK_HAS(err, "from 0 to 1000000000");
	gm_parse_timeout("GPUMUTEX_TIMEOUT", "1000000001", &t, err, sizeof err);
	CHECK_HAS(err, "out of range");
	gm_parse_timeout("GPUMUTEX_TIMEOUT", "inf", &t, err, sizeof err);
	CHECK_HAS(err, "from 0 to 1000000000");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		CHECK_INT(gm_parse_timeout("GPUMUTEX_TIMEOUT", bad[i], &t, err,
					   sizeof err), -EINVAL);
		CHECK_HAS(err, "GPUMUTEX_TIMEOUT");
	}
}

static void test_parse_uint(void)
{
	uint64_t v = 7;
	const char *end = NULL;

	CHECK_INT(gm_parse_uint("0", 10, 5, &v), 0);
	CHECK(v == 0);
	CHECK_INT(gm_parse_uint("18446744073709551615", 10, UINT64_MAX, &v), 0);
	CHECK(v == UINT64_MAX);
	CHECK_INT(gm_parse_uint("18446744073709551616", 10, UINT64_MAX, &v),
		  -ERANGE);
	CHECK_INT(gm_parse_uint("6", 10, 5, &v), -ERANGE);
	CHECK_INT(gm_parse_uint("ffffffffffffffff", 16, UINT64_MAX, &v), 0);
	CHECK(v == UINT64_MAX);
	CHECK_INT(gm_parse_uint("DEADbeef", 16, UINT64_MAX, &v), 0);
	CHECK(v == 0xdeadbeef);
	v = 7;
	static const char *const bad[] = { "", " 1", "+1", "-0", "1 ", "0x1",
					   "\t1", "1\n", "a" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK_INT(gm_parse_uint(bad[i], 10, UINT64_MAX, &v), -EINVAL);
	CHECK_INT(gm_parse_uint(NULL, 10, UINT64_MAX, &v), -EINVAL);
	CHECK_INT(gm_parse_uint("99999999999999999999x", 10, UINT64_MAX, &v),
		  -EINVAL);
	CHECK(v == 7);
	CHECK_INT(gm_scan_uint("12.5", 10, 100, &v, &end), 0);
	CHECK(v == 12 && *end == '.');
	CHECK_INT(gm_scan_uint("x", 10, 100, &v, &end), -EINVAL);
	CHECK_INT(gm_scan_uint("1", 8, 100, &v, &end), -EINVAL);
}

static void test_job(void)
{
	char j[GM_JOB_MAX + 1], k[GM_JOB_MAX + 1], err[GM_ERR_MAX];
	char longid[GM_JOB_MAX + 2];

	gm_job_generate(j);
	gm_job_generate(k);
	CHECK_INT(strlen(j), 32);
	CHECK(strcmp(j, k) != 0);
	CHECK_INT(gm_job_check("J", j, err, sizeof err), 0);
	CHECK_INT(gm_job_check("J", "a-b_C9", err, sizeof err), 0);
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", "", err, sizeof err), -EINVAL);
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", "a/b", err, sizeof err), -EINVAL);
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", "..", err, sizeof err), -EINVAL);
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", "a.lease", err, sizeof err), -EINVAL);
	memset(longid, 'x', sizeof longid - 1);
	longid[sizeof longid - 1] = '\0';
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", longid, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_JOB");
}

static void test_config_env(void)
{
	struct gm_config c;
	char err[GM_ERR_MAX];

	unsetenv("GPUMUTEX_VISIBLE_DEVICES");
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), 1);

	setenv("GPUMUTEX_VISIBLE_DEVICES", "0,1,2,3", 1);
	unsetenv("GPUMUTEX_NUM_DEVICES");
	unsetenv("GPUMUTEX_LOCK_DIR");
	unsetenv("GPUMUTEX_TIMEOUT");
	unsetenv("GPUMUTEX_JOB");
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
	CHECK_INT(c.ndevices, 4);
	CHECK_INT(c.want, 1);
	CHECK(c.timeout_s < 0);
	CHECK(strcmp(c.lock_dir, GM_DEFAULT_LOCK_DIR) == 0);
	CHECK_INT(c.job[0], 0);

	setenv("GPUMUTEX_NUM_DEVICES", "5", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_NUM_DEVICES=\"5\"");
	setenv("GPUMUTEX_NUM_DEVICES", "2", 1);
	setenv("GPUMUTEX_LOCK_DIR", "relative/dir", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_LOCK_DIR=\"relative/dir\"");
	setenv("GPUMUTEX_LOCK_DIR", "", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	setenv("GPUMUTEX_LOCK_DIR", "/x/y", 1);
	setenv("GPUMUTEX_TIMEOUT", "soon", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_TIMEOUT=\"soon\"");
	setenv("GPUMUTEX_TIMEOUT", "2.5", 1);
	setenv("GPUMUTEX_JOB", "bad/job", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_JOB");
	setenv("GPUMUTEX_JOB", "good-job", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
	CHECK_INT(c.want, 2);
	CHECK(c.timeout_s == 2.5);
	CHECK(strcmp(c.job, "good-job") == 0);
	CHECK(strcmp(c.lock_dir, "/x/y") == 0);
	{
		static const char *const bad[] = { " 5", "+5", "-0", "5 ", "",
						   "86400001", "0x10", "1e3" };
		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			setenv("GPUMUTEX_RECHECK_MS", bad[i], 1);
			CHECK_INT(gm_config_from_env(&c, err, sizeof err),
				  -EINVAL);
			CHECK_HAS(err, "GPUMUTEX_RECHECK_MS");
		}
		setenv("GPUMUTEX_RECHECK_MS", "0", 1);
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.recheck_ms, 0);
		setenv("GPUMUTEX_RECHECK_MS", "86400000", 1);
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.recheck_ms, 86400000);
		unsetenv("GPUMUTEX_RECHECK_MS");
	}
	setenv("GPUMUTEX_VISIBLE_DEVICES", "0,,1", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "0,,1");
	setenv("GPUMUTEX_VISIBLE_DEVICES", "0", 1);
	unsetenv("GPUMUTEX_NUM_DEVICES");
	{
		static const char *const bad[] = { "", "false", "no", "off",
						   "yes", "true", "2", "00",
						   " 1", "1 " };
		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			setenv("GPUMUTEX_QUIET", bad[i], 1);
			CHECK_INT(gm_config_from_env(&c, err, sizeof err),
				  -EINVAL);
			CHECK_HAS(err, "GPUMUTEX_QUIET=\"");
			CHECK_HAS(err, bad[i]);
			CHECK_HAS(err, "expected 1");
		}
		setenv("GPUMUTEX_QUIET", "1", 1);
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.quiet, 1);
		setenv("GPUMUTEX_QUIET", "0", 1);
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.quiet, 0);
		unsetenv("GPUMUTEX_QUIET");
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.quiet, 0);
	}
	/* Empty is not configured, like unset, whatever the others say. */
	setenv("GPUMUTEX_VISIBLE_DEVICES", "", 1);
	setenv("GPUMUTEX_NUM_DEVICES", "x", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), 1);
	unsetenv("GPUMUTEX_NUM_DEVICES");
}

/* ---- lock directory safety ------------------------------------------- */

static int try_acquire(const char *dir, char *err, size_t errlen)
{
	struct gm_config c;
	struct gm_lease l;
	int rc;

	base_config(&c, dir, 2, 1);
	c.timeout_s = 0;
	rc = gm_lease_acquire(&c, NULL, &l, err, errlen);
	if (rc == 0)
		gm_lease_release(&l); /* its descriptors, its log's too */
	return rc;
}

static void test_lockdir_checks(void)
{
	char dir[512], target[1100], err[GM_ERR_MAX];
	int before = count_fds();
	struct stat st;

	/* Created when missing, sticky and world-writable whatever the umask. */
	snprintf(dir, sizeof dir, "%s/new", tmpdir);
	umask(077);
	CHECK_INT(try_acquire(dir, err, sizeof err), 0);
	umask(022);
	CHECK_INT(stat(dir, &st), 0);
	CHECK_INT(st.st_mode & 07777, 01777);
	snprintf(target, sizeof target, "%s/new/dev/0", tmpdir);
	CHECK_INT(stat(target, &st), 0);
	CHECK(S_ISFIFO(st.st_mode));
	CHECK_INT(st.st_mode & 0777, 0666);

	/* A symlinked lock directory is refused. */
	snprintf(dir, sizeof dir, "%s/link", tmpdir);
	snprintf(target, sizeof target, "%s/new", tmpdir);
	CHECK_INT(symlink(target, dir), 0);
	CHECK_INT(try_acquire(dir, err, sizeof err), -ELOOP);
	CHECK_HAS(err, "symbolic link");

	/* A symlinked subdirectory too. */
	snprintf(dir, sizeof dir, "%s/sub", tmpdir);
	CHECK_INT(mkdir(dir, 01777), 0);
	snprintf(target, sizeof target, "%s/sub/dev", tmpdir);
	CHECK_INT(symlink("/tmp", target), 0);
	CHECK_INT(try_acquire(dir, err, sizeof err), -ELOOP);
	CHECK_HAS(err, "symbolic link");

	/* A file where the directory should be. */
	snprintf(dir, sizeof dir, "%s/file", tmpdir);
	close(open(dir, O_CREAT | O_WRONLY, 0644));
	CHECK_INT(try_acquire(dir, err, sizeof err), -ENOTDIR);
	CHECK_HAS(err, "not a directory");

	/* A file where a subdirectory should be. */
	snprintf(dir, sizeof dir, "%s/subfile", tmpdir);
	CHECK_INT(mkdir(dir, 0755), 0);
	snprintf(target, sizeof target, "%s/subfile/queue", tmpdir);
	close(open(target, O_CREAT | O_WRONLY, 0644));
	CHECK_INT(try_acquire(dir, err, sizeof err), -ENOTDIR);

	/* A regular file where a device FIFO should be. */
	snprintf(dir, sizeof dir, "%s/devfile", tmpdir);
	CHECK_INT(mkdir(dir, 0755), 0);
	snprintf(target, sizeof target, "%s/devfile/dev", tmpdir);
	CHECK_INT(mkdir(target, 0755), 0);
	snprintf(target, sizeof target, "%s/devfile/dev/0", tmpdir);
	close(open(target, O_CREAT | O_WRONLY, 0666));
	CHECK(try_acquire(dir, err, sizeof err) < 0);
	CHECK_HAS(err, "not a FIFO");

	/* World-writable without the sticky bit: anyone could delete leases. */
	snprintf(dir, sizeof dir, "%s/unsafe", tmpdir);
	CHECK_INT(mkdir(dir, 0755), 0);
	CHECK_INT(chmod(dir, 0777), 0);
	CHECK_INT(try_acquire(dir, err, sizeof err), -EPERM);
	CHECK_HAS(err, "unsafe permissions");

	/* Another user's private directory (only testable as root). */
	if (geteuid() == 0) {
		snprintf(dir, sizeof dir, "%s/foreign", tmpdir);
		CHECK_INT(mkdir(dir, 0755), 0);
		CHECK_INT(chown(dir, 65534, 65534), 0);
		/* Root may use it (root is trusted), but a foreign owner
		 * with a private mode is refused for ordinary users. */
		pid_t p = fork();
		if (p == 0) {
			if (setgid(1234) || setuid(1234))
				_exit(9);
			char e2[GM_ERR_MAX];
			int rc = try_acquire(dir, e2, sizeof e2);
			_exit(rc == -EPERM && strstr(e2, "belongs to uid 65534") ? 0 : 1);
		}
		int status = 0;
		waitpid(p, &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

		/* A device FIFO of another user that we cannot open. */
		snprintf(dir, sizeof dir, "%s/foreigndev", tmpdir);
		CHECK_INT(mkdir(dir, 01777), 0);
		CHECK_INT(chmod(dir, 01777), 0);
		p = fork();
		if (p == 0) {
			if (setgid(1234) || setuid(1234))
				_exit(9);
			snprintf(target, sizeof target, "%s/dev", dir);
			if (mkdir(target, 01777) || chmod(target, 01777))
				_exit(8);
			snprintf(target, sizeof target, "%s/dev/0", dir);
			if (mkfifo(target, 0600))
				_exit(7);
			_exit(0);
		}
		waitpid(p, &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		p = fork();
		if (p == 0) {
			if (setgid(1235) || setuid(1235))
				_exit(9);
			char e2[GM_ERR_MAX];
			int rc = try_acquire(dir, e2, sizeof e2);
			_exit(rc == -EACCES && strstr(e2, "dev/0") ? 0 : 1);
		}
		waitpid(p, &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	CHECK_INT(count_fds(), before);
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
