/*
 * fakelog.c - the fake driver's call counts and journal (fakedev.c's
 * header says what they hold), linked into its libcuda.so.1.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakelog.h"

/* ---- Journal ---------------------------------------------------------------- */

static FILE *fd_jf;

void fd_journal(const char *fmt, ...)
{
	static int tried;
	va_list ap;

	if (!tried) {
		const char *path = getenv("FAKEDEV_JOURNAL");
		tried = 1;
		if (path && *path)
			fd_jf = fopen(path, "a");
	}
	if (!fd_jf)
		return;
	va_start(ap, fmt);
	vfprintf(fd_jf, fmt, ap);
	va_end(ap);
	fputc('\n', fd_jf);
}

/* ---- Call counts ---------------------------------------------------------- */

#define NCOUNT 96
static struct { const char *name; long n; } fd_cnt[NCOUNT];

API void fakedev_count(const char *name);
API void fakedev_count(const char *name)
{
	for (int i = 0; i < NCOUNT; i++) {
		if (!fd_cnt[i].name)
			fd_cnt[i].name = name;
		if (fd_cnt[i].name == name || !strcmp(fd_cnt[i].name, name)) {
			fd_cnt[i].n++;
			return;
		}
	}
}

__attribute__((destructor)) static void fd_dump(void)
{
	const char *path = getenv("FAKEDEV_COUNTS");
	FILE *f;

	if (fd_jf)
		fclose(fd_jf);
	fd_jf = NULL;
	if (!path || !(f = fopen(path, "a")))
		return;
	for (int i = 0; i < NCOUNT && fd_cnt[i].name; i++)
		fprintf(f, "%s %ld\n", fd_cnt[i].name, fd_cnt[i].n);
	fclose(f);
}
