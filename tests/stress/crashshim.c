/*
 * crashshim.so - an LD_PRELOAD shim for crash-point sweeps: it counts the
 * calls a program makes to the C library functions a claim uses and
 * SIGKILLs the process just before the Nth one. A sweep runs a claim for
 * N = 1, 2, ... until it completes without being killed, and after each
 * death checks that the survivors (other users, root, the same job) are
 * not hurt by what the dead claim left (tests/test_crash_sweep.py).
 *
 * Environment:
 *   GM_SHIM_KILL_AT=N   kill before the Nth counted call (unset or 0: never)
 *   GM_SHIM_FUNCS=a,b   count only these functions (default: all below)
 *   GM_SHIM_REPORT=FD   at the kill, write "N NAME\n" to descriptor FD, so
 *                       that a failing sweep can say where the claim died
 *   GM_SHIM_COUNT=FD    at exit, write "calls N\n" to descriptor FD: how
 *                       many counted calls the program made (the cost of
 *                       a claim, counted exactly: tests/test_queue_cost.py)
 *
 * The counter is shared with forked children (it is copied at fork), so a
 * sweep of a program that forks is deterministic as long as the program
 * is. Only calls through the PLT are seen: that is every call the lease
 * core makes to these functions, not the C library's internal ones.
 */
#define _GNU_SOURCE
#undef _FORTIFY_SOURCE /* its inline open/read would clash with ours */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static long kill_at = -1; /* -1: not read yet; 0: never */
static long calls;
static char funcs[512];
static int report_fd = -1;

static long env_num(const char *name)
{
	const char *s = getenv(name);
	long v = 0;

	if (!s)
		return 0;
	for (; *s >= '0' && *s <= '9'; s++)
		v = v * 10 + (*s - '0');
	return v;
}

static void setup(void)
{
	const char *f = getenv("GM_SHIM_FUNCS");

	if (kill_at >= 0)
		return;
	if (f) {
		funcs[0] = ',';
		strncpy(funcs + 1, f, sizeof funcs - 3);
		strcat(funcs, ",");
	}
	report_fd = getenv("GM_SHIM_REPORT") ? (int)env_num("GM_SHIM_REPORT") : -1;
	kill_at = env_num("GM_SHIM_KILL_AT");
}

static void *real(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

/* Count one call of `name`; die here if it is the chosen one. */
static void step(const char *name)
{
	char pat[40];

	setup();
	if (funcs[0]) {
		pat[0] = ',';
		strncpy(pat + 1, name, sizeof pat - 3);
		pat[sizeof pat - 2] = '\0';
		strcat(pat, ",");
		if (!strstr(funcs, pat))
			return;
	}
	if (++calls != kill_at)
		return;
	if (report_fd >= 0) {
		char buf[64];
		size_t n = 0;
		long v = calls, div = 1;
		ssize_t (*w)(int, const void *, size_t) = real("write");

		while (v / div >= 10)
			div *= 10;
		for (; div > 0; div /= 10)
			buf[n++] = (char)('0' + (v / div) % 10);
		buf[n++] = ' ';
		for (const char *p = name; *p && n < sizeof buf - 2; p++)
			buf[n++] = *p;
		buf[n++] = '\n';
		if (w)
			(void)w(report_fd, buf, n);
	}
	kill(getpid(), SIGKILL);
}

#define FORWARD(ret, name, params, args)			\
	ret name params						\
	{							\
		ret (*real_fn) params = real(#name);		\
		step(#name);					\
		return real_fn args;				\
	}

FORWARD(int, close, (int fd), (fd))
FORWARD(int, mkdir, (const char *p, mode_t m), (p, m))
FORWARD(int, mkdirat, (int d, const char *p, mode_t m), (d, p, m))
FORWARD(int, mkfifoat, (int d, const char *p, mode_t m), (d, p, m))
FORWARD(int, mknodat, (int d, const char *p, mode_t m, dev_t v), (d, p, m, v))
FORWARD(int, fchmod, (int fd, mode_t m), (fd, m))
FORWARD(int, fchown, (int fd, uid_t u, gid_t g), (fd, u, g))
FORWARD(int, linkat, (int a, const char *p, int b, const char *q, int f),
	(a, p, b, q, f))
FORWARD(int, renameat, (int a, const char *p, int b, const char *q),
	(a, p, b, q))
FORWARD(int, unlinkat, (int d, const char *p, int f), (d, p, f))
FORWARD(int, symlinkat, (const char *t, int d, const char *p), (t, d, p))
FORWARD(ssize_t, readlinkat, (int d, const char *p, char *b, size_t n),
	(d, p, b, n))
FORWARD(ssize_t, read, (int fd, void *b, size_t n), (fd, b, n))
FORWARD(ssize_t, pread, (int fd, void *b, size_t n, off_t o), (fd, b, n, o))
FORWARD(ssize_t, write, (int fd, const void *b, size_t n), (fd, b, n))
FORWARD(ssize_t, pwrite, (int fd, const void *b, size_t n, off_t o),
	(fd, b, n, o))
FORWARD(int, ftruncate, (int fd, off_t n), (fd, n))
FORWARD(struct dirent *, readdir, (DIR *d), (d))
FORWARD(DIR *, fdopendir, (int fd), (fd))
FORWARD(int, closedir, (DIR *d), (d))
FORWARD(int, poll, (struct pollfd *p, nfds_t n, int t), (p, n, t))
FORWARD(int, nanosleep, (const struct timespec *a, struct timespec *b), (a, b))

int open(const char *p, int flags, ...)
{
	int (*f)(const char *, int, ...) = real("open");
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = (mode_t)va_arg(ap, int); /* read whether or not it was passed */
	va_end(ap);
	step("open");
	return f(p, flags, m);
}

int openat(int d, const char *p, int flags, ...)
{
	int (*f)(int, const char *, int, ...) = real("openat");
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = (mode_t)va_arg(ap, int);
	va_end(ap);
	step("openat");
	return f(d, p, flags, m);
}

int fcntl(int fd, int cmd, ...)
{
	int (*f)(int, int, ...) = real("fcntl");
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *); /* an int or a pointer: one register */
	va_end(ap);
	step("fcntl");
	return f(fd, cmd, arg);
}

long syscall(long n, ...)
{
	long (*f)(long, ...) = real("syscall");
	va_list ap;
	long a[6];

	va_start(ap, n);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long); /* as many as any system call takes */
	va_end(ap);
	step("syscall");
	return f(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* GM_SHIM_COUNT: report the number of counted calls when the program
 * exits normally (a killed one reports through GM_SHIM_REPORT). */
__attribute__((destructor)) static void report_count(void)
{
	ssize_t (*w)(int, const void *, size_t) = real("write");
	char buf[40];
	size_t n = 0;
	long v = calls, div = 1;

	if (!getenv("GM_SHIM_COUNT") || !w)
		return;
	memcpy(buf, "calls ", 6);
	n = 6;
	while (v / div >= 10)
		div *= 10;
	for (; div > 0; div /= 10)
		buf[n++] = (char)('0' + (v / div) % 10);
	buf[n++] = '\n';
	(void)w((int)env_num("GM_SHIM_COUNT"), buf, n);
}
