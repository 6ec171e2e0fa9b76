/*
 * gjournal.h - journal lines of the C and CUDA jobs of tests/gpu (same format
 * as tests/gpu/gj.py and tests/lib/journal.py): one event a line, appended
 * with one write(2) to $GM_JOURNAL (O_APPEND), t = CLOCK_MONOTONIC ns.
 * Header-only, valid C and C++ (nvcc).
 */
#ifndef GJOURNAL_H
#define GJOURNAL_H
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long gj_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const char *gj_env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : "-";
}

static int gj_dev(void)
{
	const char *v = getenv("CUDA_VISIBLE_DEVICES");

	return v && *v >= '0' && *v <= '9' ? atoi(v) : 0;
}

/* gj_write(t or 0, "begin", "dev=%d x=%s", ...): adds pid, job, tag, role. */
static void gj_write(long long t, const char *ev, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void gj_write(long long t, const char *ev, const char *fmt, ...)
{
	static int fd = -1;
	char line[1024], extra[700];
	va_list ap;
	int n;

	if (!t)
		t = gj_now();
	va_start(ap, fmt);
	vsnprintf(extra, sizeof extra, fmt, ap);
	va_end(ap);
	n = snprintf(line, sizeof line,
		     "ev=%s pid=%d job=%s tag=%s role=%s %s%st=%lld\n", ev,
		     (int)getpid(), gj_env("GPUMUTEX_JOB"), gj_env("GM_TAG"),
		     getenv("GM_ROLE") ? gj_env("GM_ROLE") : "main", extra,
		     *extra ? " " : "", t);
	if (fd < 0) {
		const char *path = getenv("GM_JOURNAL");

		if (!path)
			return;
		fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
		if (fd < 0)
			return;
	}
	if (write(fd, line, (size_t)n) != n)
		perror("journal");
}

static void gj_begin(long long t, long long pre, long long init)
{
	gj_write(t, "begin", "dev=%d cvd=%s order=%s pre=%lld init=%lld",
		 gj_dev(), gj_env("CUDA_VISIBLE_DEVICES"),
		 gj_env("CUDA_DEVICE_ORDER"), pre, init);
}

static void gj_tick(void) { gj_write(0, "tick", "dev=%d", gj_dev()); }
static void gj_end(void) { gj_write(0, "end", "dev=%d", gj_dev()); }

#endif
