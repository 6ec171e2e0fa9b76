/*
 * trace.c - the trace writer (tracew.h; layout in trace.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tracew.h"

static char gpo__dir[4096];
static int gpo__level;
static int gpo__on;
static int gpo__fd = -1;
static pid_t gpo__pid;

int gpo_trace_setup(const char *dir, int level)
{
	if (strlen(dir) >= sizeof gpo__dir - 32)
		return -ENAMETOOLONG;
	if (mkdir(dir, 0777) != 0 && errno != EEXIST)
		return -errno;
	snprintf(gpo__dir, sizeof gpo__dir, "%s", dir);
	gpo__level = level;
	gpo__on = 1;
	return 0;
}

int gpo_trace_on(void)
{
	return gpo__on;
}

static int gpo__open(void)
{
	struct gpo_trace_header h;
	struct timespec ts;
	static char path[4096 + 32]; /* under the caller's lock */
	int fd;

	snprintf(path, sizeof path, "%s/gpo-%d.trace", gpo__dir, (int)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
		  0644);
	if (fd < 0)
		return -errno;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, GPO_TRACE_MAGIC, 8);
	h.version = GPO_TRACE_VERSION;
	h.rec_size = GPO_TRACE_REC_SIZE;
	h.endian = GPO_TRACE_ENDIAN;
	h.pid = (int32_t)getpid();
	clock_gettime(CLOCK_REALTIME, &ts);
	h.start_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	h.level = (uint32_t)gpo__level;
	if (write(fd, &h, sizeof h) != (ssize_t)sizeof h) {
		int e = errno ? errno : EIO;
		close(fd);
		return -e;
	}
	return fd;
}

int gpo_trace_write(const struct gpo_trace_rec *r)
{
	ssize_t n;
	pid_t me;

	if (!gpo__on)
		return 0;
	me = getpid();
	/* The caller serialises writers (policy.c's trace lock). After a
	 * fork the child writes a file of its own: the parent's is not
	 * interleaved with records of another process. */
	if (gpo__fd < 0 || gpo__pid != me) {
		int fd;
		if (gpo__fd >= 0 && gpo__pid != me)
			close(gpo__fd);
		gpo__fd = -1;
		fd = gpo__open();
		if (fd < 0) {
			gpo__on = 0;
			return fd;
		}
		gpo__fd = fd;
		gpo__pid = me;
	}
	do
		n = write(gpo__fd, r, sizeof *r);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof *r) {
		int e = n < 0 ? errno : ENOSPC;
		gpo__on = 0;
		return -e;
	}
	return 0;
}

uint64_t gpo_fingerprint(const void *p, uint64_t bytes)
{
	const unsigned char *b = p;
	uint64_t h = 0x9e3779b97f4a7c15u ^ bytes, words;

	if (!p || bytes < 8)
		return h | 1;
	words = bytes / 8;
	for (uint64_t i = 0; i < 8; i++) {
		uint64_t w;
		uint64_t at = words > 8 ? (i * (words - 1)) / 7 : i % words;
		memcpy(&w, b + at * 8, 8);
		h ^= w + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
		h *= 0xff51afd7ed558ccdu;
		h ^= h >> 33;
	}
	return h ? h : 1;
}
