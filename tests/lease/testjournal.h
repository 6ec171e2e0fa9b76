/*
 * testjournal.h - the journal writer shared by the test programs of
 * tests/lease (format: tests/lib/journal.py). Header-only: each program
 * has its own `journal` descriptor, opened by its main().
 */
#ifndef GPUMUTEX_TESTJOURNAL_H
#define GPUMUTEX_TESTJOURNAL_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int journal = -1;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One line per write(2), so lines of many processes never interleave. */
static void jwrite(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void jwrite(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	if (journal < 0)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof buf - 1)
		return;
	buf[n++] = '\n';
	if (write(journal, buf, (size_t)n) != n)
		perror("journal");
}

/* Read fd until EOF: the test closes the other end when we may go on. */
static void drain(int fd)
{
	char c[64];
	while (read(fd, c, sizeof c) > 0 || errno == EINTR)
		errno = 0;
}

#endif
