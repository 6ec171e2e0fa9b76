/*
 * exiting.c - a holder that let its lease go while its process exits,
 * and a next holder that waits for that exit (docs/design.md, "Exit and
 * readiness rules").
 *
 * A process that gives its lease back at exit, before its CUDA teardown,
 * still has GPU memory until its files are closed. It says so on each of
 * its devices' files with a read lock on byte GM_EXIT_OFF + its pid,
 * taken before the lease's descriptors close and held by a descriptor of
 * its own until the process is gone (the kernel drops it then). A next
 * holder whose allocation failed for lack of memory finds these marks
 * with one F_OFD_GETLK over the range and waits for each process to be
 * gone (pidfd: readable once the process has exited, which is after all
 * its files, the driver's included, were released), then allocates again.
 * Plain POSIX and Linux system calls, no CUDA.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "lease.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* Marks live past every lease byte (GM_LEASE_OFF + GM_LEASE_MAX < 2^61),
 * one byte per pid (pid_max is at most 2^22). */
#define GM_EXIT_OFF ((int64_t)1 << 62)
#define GM_EXIT_PIDS ((int64_t)1 << 22)

/*
 * The mark's descriptor moved as high as the process's limit allows: the
 * kernel closes a dying process's files in ascending order, so a mark on
 * a low number (one the program freed, reused here) would be gone before
 * the driver's files, which hold the memory, are closed, and the next
 * holder would find no mark while the memory is still taken. Its own
 * descriptor when no high one is free.
 */
static int high_fd(int fd)
{
	struct rlimit rl;
	long floor = 64;
	int hi;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		if (rl.rlim_cur == RLIM_INFINITY)
			floor = 65536;
		else if (rl.rlim_cur > 128)
			floor = (long)rl.rlim_cur - 64;
	}
	if (fd >= floor)
		return fd;
	hi = fcntl(fd, F_DUPFD_CLOEXEC, (int)floor);
	if (hi < 0)
		return fd;
	/* the same open file description: the lock stays */
	gm__close(fd);
	return gm__track(hi);
}

int gm_lease_exit_mark(const char *lock_dir, const struct gm_lease *l,
		       int *fds, char *err, size_t errlen)
{
	struct gm__dir d;
	int rc, n = 0;
	pid_t me = getpid();

	for (int i = 0; i < l->ndevices; i++)
		fds[i] = -1;
	if (me <= 0 || (int64_t)me >= GM_EXIT_PIDS)
		return gm__fail(-ERANGE, err, errlen,
				"pid %d is out of the marks' range", (int)me);
	rc = gm__dir_open(lock_dir, 0, &d, err, errlen);
	if (rc)
		return rc;
	for (int i = 0; i < l->ndevices; i++) {
		/* Read-only: a FIFO's reader, never a writer, so that it
		 * delays nobody's doorbell. */
		int fd = gm__dev_open(&d, l->devices[i], O_RDONLY, err, errlen);

		if (fd < 0) {
			rc = fd;
			break;
		}
		rc = gm__lock(fd, F_OFD_SETLK, F_RDLCK, GM_EXIT_OFF + me);
		if (rc) {
			gm__close(fd);
			gm__fail(rc, err, errlen, "cannot mark dev/%d: %s",
				 l->devices[i], strerror(-rc));
			break;
		}
		fds[n++] = high_fd(fd);
	}
	gm__dir_close(&d);
	if (rc)
		for (int i = 0; i < n; i++) {
			gm__close(fds[i]);
			fds[i] = -1;
		}
	return rc;
}

/* The first exiting holder marked on `fd`: its pid, 0 if none, -errno. */
static int first_mark(int fd)
{
	struct flock fl;

	memset(&fl, 0, sizeof fl);
	fl.l_type = F_WRLCK;
	fl.l_whence = SEEK_SET;
	fl.l_start = GM_EXIT_OFF;
	fl.l_len = GM_EXIT_PIDS;
	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		return -errno;
	if (fl.l_type == F_UNLCK)
		return 0;
	return (int)(fl.l_start - GM_EXIT_OFF);
}

/* Wait until process `pid`, marked on `fd`, is gone. 0 or -errno. */
static int wait_gone(int fd, int pid)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);

	if (pfd < 0 && errno == ESRCH)
		return 0; /* gone already */
	if (pfd < 0) {
		/* No pidfd (Linux before 5.3): wait for the mark itself to
		 * go, which happens as the process's files are closed. */
		int rc = gm__lock(fd, F_OFD_SETLKW, F_WRLCK,
				  GM_EXIT_OFF + pid);
		if (rc == 0)
			gm__lock(fd, F_OFD_SETLK, F_UNLCK, GM_EXIT_OFF + pid);
		return rc;
	}
	/* The pid may have been reused between the probe and pidfd_open:
	 * only a process that still holds the mark is waited for. */
	if (gm__probe(fd, F_WRLCK, GM_EXIT_OFF + pid) == F_UNLCK) {
		gm__close(pfd);
		return 0;
	}
	for (;;) {
		struct pollfd p = { .fd = pfd, .events = POLLIN };
		int r = poll(&p, 1, -1);

		if (r > 0 || (r < 0 && errno != EINTR))
			break;
	}
	gm__close(pfd);
	return 0;
}

int gm_lease_exit_wait(const char *lock_dir, const int *devices, int n,
		       pid_t self, char *err, size_t errlen)
{
	struct gm__dir d;
	int rc, waited = 0;

	rc = gm__dir_open(lock_dir, 0, &d, err, errlen);
	if (rc)
		return rc;
	for (int i = 0; i < n && rc >= 0; i++) {
		int fd = gm__dev_open(&d, devices[i], O_RDONLY, err, errlen);

		if (fd < 0) {
			rc = fd;
			break;
		}
		for (;;) {
			int pid = first_mark(fd);

			if (pid <= 0 || pid == (int)self) {
				if (pid < 0)
					rc = pid;
				break;
			}
			rc = wait_gone(fd, pid);
			if (rc < 0)
				break;
			waited++;
		}
		gm__close(fd);
	}
	gm__dir_close(&d);
	if (rc < 0)
		return gm__fail(rc, err, errlen,
				"cannot wait for an exiting holder: %s",
				strerror(-rc));
	return waited;
}
