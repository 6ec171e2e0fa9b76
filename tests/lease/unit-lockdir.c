/*
 * unit-lockdir.c - lease-unit's tests of the lock directory
 * (src/lease/lockdir.c): what a claim makes (the directory 01777, its
 * device FIFOs 0666) and what it refuses, with a message that says why
 * (symbolic links, files where directories belong, a device that is not
 * a FIFO, unsafe permissions, another user's directories), all without a
 * descriptor left open. Apart from the lease tests (lease-unit.c) because
 * these are about the files, not the protocol on them.
 */
#define _GNU_SOURCE
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

void test_lockdir_checks(void)
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
