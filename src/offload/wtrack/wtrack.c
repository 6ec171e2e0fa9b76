/*
 * wtrack.c - write tracking by asynchronous userfaultfd write-protection
 * and PAGEMAP_SCAN (wtrack.h says what it promises; the design and the
 * probe's measurements: docs/offload-residency.md).
 *
 * Steps of one range's life:
 *   protect  /proc/self/maps says every mapping under the range is
 *            private, anonymous and writable; each whole mapping is
 *            registered with our userfaultfd in write-protect mode (whole
 *            mappings, so that registering never splits one: a program's
 *            mremap of its buffer keeps working); the range's pages are
 *            write-protected (UFFDIO_WRITEPROTECT; with WP_UNPOPULATED,
 *            pages not yet there get a marker, so a first touch counts).
 *   write    the kernel clears the page's protect bit at the first write
 *            and lets it through (WP_ASYNC: no message, no waiting).
 *   clean    PAGEMAP_SCAN (PM_SCAN_CHECK_WPASYNC: it fails unless every
 *            mapping in the range is registered in async mode, so a
 *            replaced, moved or unregistered mapping fails) returns the
 *            range as regions; clean only when the regions cover the
 *            whole range and every page is present or swapped and still
 *            protected. A page dropped by MADV_DONTNEED is neither.
 *
 * fork: the child's mappings are not registered (no UFFD_FEATURE_EVENT_FORK)
 * and its descriptor to /proc/self/pagemap would read the parent: a pid
 * change forgets everything (the child's copies of our descriptors are
 * closed once checked to be ours). The parent's pages keep their protect
 * bits through the copy-on-write, and its writes after fork are seen.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

#include "pcopy/pcopy.h"
#include "wtrack.h"

/* Linux 6.7's interfaces, for headers older than they are. */
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
struct gpo_wt_region { uint64_t start, end, categories; };
struct gpo_wt_scan {
	uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
	uint64_t category_inverted, category_mask, category_anyof_mask,
		 return_mask;
};
#define GPO_PAGE_IS_WRITTEN (1u << 1)
#define GPO_PAGE_IS_FILE    (1u << 2)
#define GPO_PAGE_IS_PRESENT (1u << 3)
#define GPO_PAGE_IS_SWAPPED (1u << 4)
#define GPO_PM_SCAN_CHECK_WPASYNC (1u << 1)
#define GPO_PAGEMAP_SCAN _IOWR('f', 16, struct gpo_wt_scan)

static pthread_mutex_t gpo__wt_lock = PTHREAD_MUTEX_INITIALIZER;
static int gpo__wt_uffd = -1, gpo__wt_pm = -1;
static struct stat gpo__wt_uffd_st, gpo__wt_pm_st;
static pid_t gpo__wt_pid;
static int gpo__wt_latched;     /* GPO_WT_R_* of a failed start, or OFF */
static size_t gpo__wt_page;

const char *gpo_wt_reason(int r)
{
	static const char *const word[GPO_WT_NREASONS] = {
		"tracked", "kernel", "permission", "shared", "busy", "limit",
		"error", "off" };
	return r >= 0 && r < GPO_WT_NREASONS ? word[r] : "error";
}

/* fstat by its system call: glibc's fstat symbol is 2.33's (the gate's
 * floor is 2.17). Only ever compared with itself, so the kernel's layout
 * of struct stat is all that matters. */
static int gpo__wt_fstat(int fd, struct stat *st)
{
	return (int)syscall(SYS_fstat, fd, st);
}

/* Whether descriptor fd is still the file st describes. */
static int gpo__wt_same(int fd, const struct stat *st)
{
	struct stat now;

	return fd >= 0 && gpo__wt_fstat(fd, &now) == 0 &&
	       now.st_dev == st->st_dev && now.st_ino == st->st_ino;
}

/* Forget every registration: closing our userfaultfd makes the kernel
 * drop them all, with their protect bits. Caller holds the lock. */
static void gpo__wt_close(void)
{
	if (gpo__wt_uffd >= 0 && gpo__wt_same(gpo__wt_uffd, &gpo__wt_uffd_st))
		close(gpo__wt_uffd);
	if (gpo__wt_pm >= 0 && gpo__wt_same(gpo__wt_pm, &gpo__wt_pm_st))
		close(gpo__wt_pm);
	gpo__wt_uffd = gpo__wt_pm = -1;
}

/* Open and configure the descriptors; 0 or a reason. Caller holds the
 * lock. User-mode-only first: it needs no privilege where
 * vm.unprivileged_userfaultfd is 0, and asynchronous faults never reach
 * the handler it restricts, so the kernel's own writes still count. */
static int gpo__wt_open(void)
{
	struct uffdio_api api;
	int fd, e;

	fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK |
			  UFFD_USER_MODE_ONLY);
	if (fd < 0)
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOSYS ? GPO_WT_R_KERNEL :
		       errno == EPERM || errno == EACCES ? GPO_WT_R_PERM :
		       GPO_WT_R_ERROR;          /* e.g. no descriptor left */
	memset(&api, 0, sizeof api);
	api.api = UFFD_API;
	api.features = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED;
	if (ioctl(fd, UFFDIO_API, &api) != 0) {
		e = errno;
		close(fd);
		return e == EINVAL ? GPO_WT_R_KERNEL : GPO_WT_R_ERROR;
	}
	gpo__wt_pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (gpo__wt_pm < 0) {
		close(fd);
		return GPO_WT_R_ERROR;
	}
	if (gpo__wt_fstat(fd, &gpo__wt_uffd_st) != 0 ||
	    gpo__wt_fstat(gpo__wt_pm, &gpo__wt_pm_st) != 0) {
		close(fd);
		close(gpo__wt_pm);
		gpo__wt_pm = -1;
		return GPO_WT_R_ERROR;
	}
	gpo__wt_uffd = fd;
	gpo__wt_pid = getpid();
	{
		/* PAGEMAP_SCAN itself (6.7): on one page of our own. */
		static char probe[1];
		struct gpo_wt_scan s;
		long pg = sysconf(_SC_PAGESIZE);
		gpo__wt_page = pg > 0 ? (size_t)pg : 4096;
		memset(&s, 0, sizeof s);
		s.size = sizeof s;
		s.start = (uintptr_t)probe & ~(uintptr_t)(gpo__wt_page - 1);
		s.end = s.start + gpo__wt_page;
		s.return_mask = GPO_PAGE_IS_WRITTEN;
		if (ioctl(gpo__wt_pm, GPO_PAGEMAP_SCAN, &s) < 0) {
			gpo__wt_close();
			return GPO_WT_R_KERNEL;
		}
	}
	return 0;
}

/* Ready to use in this process: 0 or a reason. Caller holds the lock. */
static int gpo__wt_ready(void)
{
	if (gpo__wt_uffd >= 0 && gpo__wt_pid != getpid())
		gpo__wt_close();        /* a child: its registrations are gone */
	if (gpo__wt_uffd >= 0) {
		if (gpo__wt_same(gpo__wt_uffd, &gpo__wt_uffd_st) &&
		    gpo__wt_same(gpo__wt_pm, &gpo__wt_pm_st))
			return 0;
		/* The program closed one of ours (and perhaps reused the
		 * number): not ours to close; start over. */
		gpo__wt_uffd = gpo__wt_pm = -1;
		}
	if (gpo__wt_latched)
		return gpo__wt_latched;
	{
		int r = gpo__wt_open();
		/* Lacking the kernel interface or the permission does not
		 * change during a process's life. */
		if (r == GPO_WT_R_KERNEL || r == GPO_WT_R_PERM)
			gpo__wt_latched = r;
		return r;
	}
}

int gpo_wt_available(void)
{
	int e = errno, r;

	pthread_mutex_lock(&gpo__wt_lock);
	r = gpo__wt_ready();
	pthread_mutex_unlock(&gpo__wt_lock);
	errno = e;
	return r;
}

/* One line of /proc/self/maps against [lo, hi): registers it when it
 * overlaps (then *next is its end). 0, or a reason. */
static int gpo__wt_line(const char *s, const char *end, uintptr_t lo,
			uintptr_t hi, uintptr_t *next)
{
	uintptr_t a, b, off, maj, min, inode;
	struct uffdio_register reg;
	const char *perms;

	if (gpo_maps_hex(&s, end, &a) || s >= end || *s++ != '-' ||
	    gpo_maps_hex(&s, end, &b) || s >= end || *s++ != ' ')
		return GPO_WT_R_ERROR;
	if (b <= lo || a >= hi)
		return 0;
	if (a > *next)
		return GPO_WT_R_SHARED;         /* a hole in the range */
	perms = s;
	if (end - s < 5 || perms[4] != ' ')
		return GPO_WT_R_ERROR;
	s += 5;
	if (gpo_maps_hex(&s, end, &off) || s >= end || *s++ != ' ' ||
	    gpo_maps_hex(&s, end, &maj) || s >= end || *s++ != ':' ||
	    gpo_maps_hex(&s, end, &min) || s >= end || *s++ != ' ')
		return GPO_WT_R_ERROR;
	inode = 0;
	while (s < end && *s >= '0' && *s <= '9')
		inode = inode * 10 + (uintptr_t)(*s++ - '0');
	while (s < end && *s == ' ')
		s++;
	/* Private, writable, no file; a name only for the heap or a named
	 * anonymous mapping ("[anon:...]", prctl PR_SET_VMA_ANON_NAME, e.g.
	 * glibc's decorated malloc arenas; "[anon_shmem:...]" is shared).
	 * [stack] and the rest are not the program's arrays. */
	if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p' ||
	    maj || min || inode ||
	    (s < end && !(end - s == 6 && memcmp(s, "[heap]", 6) == 0) &&
	     !(end - s > 6 && memcmp(s, "[anon:", 6) == 0)))
		return GPO_WT_R_SHARED;
	*next = b;
	/* Registered again every time, never from a list of our own: the
	 * mapping may have been replaced at the same address since (the
	 * kernel answers 0 at once for one that is still ours, EBUSY for
	 * one another userfaultfd holds). */
	memset(&reg, 0, sizeof reg);
	reg.range.start = a;
	reg.range.len = b - a;
	reg.mode = UFFDIO_REGISTER_MODE_WP;
	if (ioctl(gpo__wt_uffd, UFFDIO_REGISTER, &reg) != 0)
		return errno == EBUSY ? GPO_WT_R_BUSY :
		       errno == ENOMEM ? GPO_WT_R_LIMIT :
		       errno == EINVAL ? GPO_WT_R_SHARED : GPO_WT_R_ERROR;
	return 0;
}

/* Register every mapping under [lo, hi), checking each is private
 * anonymous memory: 0, or a reason. read(2) in blocks, no stdio.
 * Caller holds the lock. */
static int gpo__wt_register(uintptr_t lo, uintptr_t hi)
{
	/* Static, under the lock: the caller's stack may be small. */
	static char buf[8192];
	size_t have = 0;
	uintptr_t next = lo;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return GPO_WT_R_ERROR;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof buf - have);
		char *s = buf, *nl;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		while ((nl = memchr(s, '\n', have - (size_t)(s - buf)))) {
			r = gpo__wt_line(s, nl, lo, hi, &next);
			s = nl + 1;
			if (r || next >= hi)
				goto out;
		}
		have -= (size_t)(s - buf);
		memmove(buf, s, have);
		if (have == sizeof buf) {
			r = GPO_WT_R_ERROR;     /* a line longer than buf */
			goto out;
		}
	}
out:
	close(fd);
	if (!r && next < hi)
		r = GPO_WT_R_SHARED;            /* part of it not mapped */
	return r;
}

int gpo_wt_protect(const void *p, size_t len)
{
	int e = errno, r;
	uintptr_t lo, hi;

	pthread_mutex_lock(&gpo__wt_lock);
	r = gpo__wt_ready();
	if (r)
		goto out;
	lo = (uintptr_t)p & ~(uintptr_t)(gpo__wt_page - 1);
	hi = ((uintptr_t)p + len + gpo__wt_page - 1) &
	     ~(uintptr_t)(gpo__wt_page - 1);
	if (!len || hi <= lo) {
		r = GPO_WT_R_ERROR;
		goto out;
	}
	r = gpo__wt_register(lo, hi);
	if (!r) {
		struct uffdio_writeprotect wp;
		memset(&wp, 0, sizeof wp);
		wp.range.start = lo;
		wp.range.len = hi - lo;
		wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
		if (ioctl(gpo__wt_uffd, UFFDIO_WRITEPROTECT, &wp) != 0)
			r = GPO_WT_R_ERROR;
	}
out:
	pthread_mutex_unlock(&gpo__wt_lock);
	errno = e;
	return r;
}

int gpo_wt_clean(const void *p, size_t len)
{
	struct gpo_wt_region vec[16];
	struct gpo_wt_scan s;
	int e = errno, clean = 0;
	uintptr_t lo, hi, at;

	pthread_mutex_lock(&gpo__wt_lock);
	if (!len || gpo__wt_uffd < 0 || gpo__wt_pid != getpid() ||
	    !gpo__wt_same(gpo__wt_uffd, &gpo__wt_uffd_st) ||
	    !gpo__wt_same(gpo__wt_pm, &gpo__wt_pm_st))
		goto out;
	lo = (uintptr_t)p & ~(uintptr_t)(gpo__wt_page - 1);
	hi = ((uintptr_t)p + len + gpo__wt_page - 1) &
	     ~(uintptr_t)(gpo__wt_page - 1);
	at = lo;
	while (at < hi) {
		long n;
		memset(&s, 0, sizeof s);
		s.size = sizeof s;
		s.flags = GPO_PM_SCAN_CHECK_WPASYNC;
		s.start = at;
		s.end = hi;
		s.vec = (uintptr_t)vec;
		s.vec_len = sizeof vec / sizeof vec[0];
		s.return_mask = GPO_PAGE_IS_WRITTEN | GPO_PAGE_IS_PRESENT |
				GPO_PAGE_IS_SWAPPED | GPO_PAGE_IS_FILE;
		n = ioctl(gpo__wt_pm, GPO_PAGEMAP_SCAN, &s);
		if (n < 0 || (n == 0 && s.walk_end <= at))
			goto out;
		for (long i = 0; i < n; i++) {
			uint64_t c = vec[i].categories;
			if (vec[i].start != at || vec[i].end <= at ||
			    (c & (GPO_PAGE_IS_WRITTEN | GPO_PAGE_IS_FILE)) ||
			    !(c & (GPO_PAGE_IS_PRESENT | GPO_PAGE_IS_SWAPPED)))
				goto out;
			at = vec[i].end;
		}
		/* The walk must have reported every page it passed. */
		if (s.walk_end != at)
			goto out;
	}
	clean = at == hi;
out:
	pthread_mutex_unlock(&gpo__wt_lock);
	errno = e;
	return clean;
}

void gpo_wt_reset(int off)
{
	int e = errno;

	pthread_mutex_lock(&gpo__wt_lock);
	if (gpo__wt_uffd >= 0 && gpo__wt_pid == getpid())
		gpo__wt_close();
	else if (gpo__wt_uffd >= 0)
		gpo__wt_close();        /* a child's copies, checked ours */
	if (off)
		gpo__wt_latched = GPO_WT_R_OFF;
	pthread_mutex_unlock(&gpo__wt_lock);
	errno = e;
}
