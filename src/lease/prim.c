/*
 * prim.c - the primitives the lease core is built of: the registry of
 * descriptors of acquires in progress, one-byte OFD locks, stat without
 * the C library's versioned wrappers, clocks, doorbell waits, crash
 * points and command lines.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/*
 * Descriptors of acquires in progress. A child forked (by another thread)
 * while this process is inside gm_lease_acquire shares them: it would keep
 * the parent's job lock and ticket FIFOs open for writing, and so delay
 * the doorbells of everyone waiting for them, including itself.
 * gm_lease_forget_inflight() closes them in such a child. Slots hold
 * fd + 1 (0 is free) and are claimed with compare-and-swap, since several
 * threads may acquire at once.
 */
#define GM_INFLIGHT_SLOTS 256
static int inflight[GM_INFLIGHT_SLOTS];

int gm__track(int fd)
{
	for (int i = 0; fd >= 0 && i < GM_INFLIGHT_SLOTS; i++) {
		int free_slot = 0;
		if (__atomic_compare_exchange_n(&inflight[i], &free_slot, fd + 1, 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	return fd; /* a full table only means a child may keep one open */
}

void gm__untrack(int fd)
{
	for (int i = 0; fd >= 0 && i < GM_INFLIGHT_SLOTS; i++) {
		int mine = fd + 1;
		if (__atomic_compare_exchange_n(&inflight[i], &mine, 0, 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return;
	}
}

void gm__close(int fd)
{
	gm__untrack(fd);
	close(fd);
}

void gm_lease_forget_inflight(void)
{
	for (int i = 0; i < GM_INFLIGHT_SLOTS; i++) {
		int v = __atomic_exchange_n(&inflight[i], 0, __ATOMIC_ACQ_REL);
		if (v > 0)
			close(v - 1);
	}
}

static struct flock one_byte(short type, int64_t start)
{
	struct flock fl;

	memset(&fl, 0, sizeof fl);
	fl.l_type = type;
	fl.l_whence = SEEK_SET;
	fl.l_start = (off_t)start;
	fl.l_len = 1;
	return fl;
}

int gm__lock(int fd, int cmd, short type, int64_t start)
{
	struct flock fl = one_byte(type, start);

	for (;;) {
		if (fcntl(fd, cmd, &fl) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		return errno == EACCES ? -EAGAIN : -errno;
	}
}

void gm__unlock_all(int fd)
{
	struct flock fl;

	memset(&fl, 0, sizeof fl);
	fl.l_type = F_UNLCK;
	fl.l_whence = SEEK_SET; /* l_start 0 and l_len 0: the whole file */
	while (fcntl(fd, F_OFD_SETLK, &fl) < 0 && errno == EINTR)
		;
}

int gm__probe_range(int fd, short type, int64_t start, int64_t len)
{
	struct flock fl = one_byte(type, start);

	fl.l_len = len;
	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		return -errno;
	return fl.l_type;
}

int gm__probe(int fd, short type, int64_t start)
{
	return gm__probe_range(fd, type, start, 1);
}

/* fstat, fstatat and lstat became real glibc functions (GLIBC_2.33) only
 * recently; before, they were inline wrappers of __fxstat and friends. The
 * system call is the same everywhere and, on Linux's 64-bit ABIs, fills
 * the same struct stat, so call it directly and keep the library loadable
 * on old glibc (tools/gate.sh). */
int gm__fstatat(int dirfd, const char *name, struct stat *st, int flags)
{
	return (int)syscall(SYS_newfstatat, dirfd, name, st, flags);
}

int gm__fstat(int fd, struct stat *st)
{
	return gm__fstatat(fd, "", st, AT_EMPTY_PATH);
}

int gm__still_linked(int dirfd, const char *name, int fd)
{
	struct stat a, b;

	if (gm__fstat(fd, &a) < 0 ||
	    gm__fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

void gm__tmp_name(char *buf, size_t len)
{
	/* Random, so that nobody can make the name first on purpose. */
	snprintf(buf, len, ".tmp.%d.%016" PRIx64, (int)getpid(),
		 gm__random_u64());
}

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t gm__mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
int64_t gm__real_ns(void) { return clock_ns(CLOCK_REALTIME); }

int gm__wait(struct pollfd *fds, int n, int64_t deadline_ns, int recheck_ms)
{
	for (;;) {
		int64_t ms = recheck_ms > 0 ? recheck_ms : -1;

		if (deadline_ns >= 0) {
			int64_t left = deadline_ns - gm__mono_ns();
			if (left <= 0)
				return -ETIMEDOUT;
			left = (left + 999999) / 1000000;
			if (ms < 0 || left < ms)
				ms = left;
		}
		for (int i = 0; i < n; i++) {
			fds[i].events = 0; /* POLLHUP is reported regardless */
			fds[i].revents = 0;
		}
		int r = poll(fds, (nfds_t)n, ms > INT32_MAX ? INT32_MAX : (int)ms);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0) {
			if (deadline_ns >= 0 && gm__mono_ns() >= deadline_ns)
				return -ETIMEDOUT;
			if (recheck_ms > 0)
				return 0;
		}
	}
}

#ifdef GM_TEST_CRASHPOINTS
#include <signal.h>
void gm__crashpoint(const char *name)
{
	const char *at = getenv("GM_CRASH_AT");
	const char *stop = getenv("GM_STOP_AT");
	if (at && strcmp(at, name) == 0)
		kill(getpid(), SIGKILL);
	/* A process the test looks at while it stands here (SIGCONT). */
	if (stop && strcmp(stop, name) == 0)
		kill(getpid(), SIGSTOP);
}
#endif

void gm__cmdline(pid_t pid, char *out, size_t outlen)
{
	char path[64];
	int fd;
	ssize_t len;

	out[0] = '\0';
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	len = read(fd, out, outlen - 1);
	close(fd);
	if (len <= 0) {
		out[0] = '\0';
		return;
	}
	while (len > 0 && out[len - 1] == '\0')
		len--;
	for (ssize_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)out[i];
		if (c == '\0')
			out[i] = ' ';
		else if (c < 0x20 || c == 0x7f)
			out[i] = '?';
	}
	out[len] = '\0';
}

unsigned long long gm__pidns(void)
{
	struct stat st;

	/* The nsfs inode: the same number from every namespace. */
	if (gm__fstatat(AT_FDCWD, "/proc/self/ns/pid", &st, 0) == 0)
		return (unsigned long long)st.st_ino;
	return 0;
}

/* Does process `pid` have the file (dev, ino) open? 1, 0, or -1 when its
 * descriptors cannot be listed (another user's, without privilege). */
static int holds_file(pid_t pid, const struct stat *file)
{
	char path[64];
	struct dirent *de;
	struct stat st;
	DIR *dir;
	int hit = 0, dfd;

	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	dfd = dirfd(dir);
	while (!hit && (de = readdir(dir)) != NULL)
		hit = de->d_name[0] != '.' &&
		      gm__fstatat(dfd, de->d_name, &st, 0) == 0 &&
		      st.st_dev == file->st_dev && st.st_ino == file->st_ino;
	closedir(dir);
	return hit;
}

int gm__proc_stat_field(pid_t pid, int field, uint64_t *out)
{
	char path[64], buf[1024];
	const char *p;
	ssize_t n;
	int fd, f;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	for (f = 2; p && *p && f < field; p++)
		if (*p == ' ')
			f++;
	if (!p || f < field || gm_scan_uint(p, 10, UINT64_MAX, out, NULL))
		return -2;
	return 0;
}

int gm__pid_here(pid_t pid, uid_t uid, int64_t since_ns,
		 const struct stat *ticket)
{
	char path[64];
	struct stat st;
	const char *p;
	uint64_t ticks = 0, btime = 0;
	long hz = sysconf(_SC_CLK_TCK);
	ssize_t n;
	int fd, rc;

	snprintf(path, sizeof path, "/proc/%d", (int)pid);
	if (pid <= 0 || gm__fstatat(AT_FDCWD, path, &st, 0) < 0 ||
	    st.st_uid != uid)
		return 0;
	/* The waiter keeps its ticket open: if we may look, that decides. */
	if (ticket) {
		int h = holds_file(pid, ticket);
		if (h >= 0)
			return h;
	}
	/* Started after the ticket was taken: another process under the
	 * number the ticket's owner had in its own namespace. */
	rc = gm__proc_stat_field(pid, 22, &ticks); /* starttime */
	if (rc == -1)
		return 0; /* gone meanwhile */
	if (rc)
		return 1; /* cannot tell: as before */
	fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char *big = malloc(65536);
		n = big ? read(fd, big, 65535) : -1;
		close(fd);
		if (n > 0) {
			big[n] = '\0';
			p = strstr(big, "\nbtime ");
			if (p)
				gm_scan_uint(p + 7, 10, UINT64_MAX, &btime, NULL);
		}
		free(big);
	}
	if (!btime || hz <= 0)
		return 1;
	/* btime is whole seconds: two of slack. */
	return (int64_t)(btime + ticks / (uint64_t)hz) * 1000000000 <=
	       since_ns + 2000000000;
}
