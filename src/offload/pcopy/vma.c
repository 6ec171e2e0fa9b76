/*
 * vma.c - the copy engine's one look at the process's memory map: is an
 * address in a private anonymous mapping, and where does that mapping
 * end (pcopy.c populates a gather's destination ahead of its calls only
 * there: pcopy.h, gpo_pcopy_anon_vma).
 *
 * /proc/self/maps, read with read(2) in blocks (no stdio: no allocation,
 * nothing buffered behind the program's back), parsed line by line; the
 * descriptor is opened O_CLOEXEC and closed before returning.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "pcopy.h"

int gpo_maps_hex(const char **p, const char *end, uintptr_t *v)
{
	const char *s = *p;
	uintptr_t x = 0;

	for (; s < end; s++) {
		unsigned d;
		if (*s >= '0' && *s <= '9')
			d = (unsigned)(*s - '0');
		else if (*s >= 'a' && *s <= 'f')
			d = (unsigned)(*s - 'a' + 10);
		else
			break;
		if (x > (UINTPTR_MAX >> 4))
			return -1;
		x = (x << 4) | d;
	}
	if (s == *p)
		return -1;
	*p = s;
	*v = x;
	return 0;
}

/* One line "lo-hi perms offset dev inode [path]": 1 when it is addr's
 * mapping (then *anon says whether it is private anonymous), 0 when not,
 * -1 when it cannot be read. */
static int gpo__line(const char *s, const char *end, uintptr_t addr,
		     uintptr_t *lo, uintptr_t *hi, int *anon, int *heap)
{
	uintptr_t a, b, off, inode;
	const char *perms;
	size_t len;

	if (gpo_maps_hex(&s, end, &a) || s >= end || *s++ != '-' ||
	    gpo_maps_hex(&s, end, &b) || s >= end || *s++ != ' ')
		return -1;
	if (addr < a || addr >= b)
		return 0;
	perms = s;
	if (end - s < 5 || perms[4] != ' ')
		return -1;
	s += 5;
	if (gpo_maps_hex(&s, end, &off) || s >= end || *s++ != ' ')
		return -1;
	/* dev "maj:min" */
	while (s < end && *s != ' ')
		s++;
	if (s >= end || *s++ != ' ')
		return -1;
	/* inode, decimal: 0 for anonymous memory */
	inode = 0;
	for (; s < end && *s >= '0' && *s <= '9'; s++)
		inode = inode * 10 + (uintptr_t)(*s - '0');
	while (s < end && *s == ' ')
		s++;
	*lo = a;
	*hi = b;
	/* Private, readable and writable, no file: no path at all, the heap,
	 * or a name given with prctl(PR_SET_VMA_ANON_NAME). Not a stack. */
	len = (size_t)(end - s);
	*heap = len == 6 && !memcmp(s, "[heap]", 6);
	*anon = !memcmp(perms, "rw-p", 4) && inode == 0 &&
		(len == 0 || *heap || (len > 6 && !memcmp(s, "[anon:", 6)));
	return 1;
}

int gpo_pcopy_anon_vma(uintptr_t addr, uintptr_t *lo, uintptr_t *hi, int *heap)
{
	/* static: callers are serialised (pcopy.h), and the caller's stack
	 * may be a small thread's; a line longer than this: its range still
	 * read */
	static char buf[1536];
	size_t have = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), found = 0, anon = 0;

	if (fd < 0)
		return -1;
	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof buf - have);
		char *s = buf, *nl;

		if (r <= 0)
			break;
		have += (size_t)r;
		while ((nl = memchr(s, '\n', have - (size_t)(s - buf)))) {
			int m = gpo__line(s, nl, addr, lo, hi, &anon, heap);
			if (m != 0) {
				found = m;
				break;
			}
			s = nl + 1;
		}
		if (found)
			break;
		/* The rest of a line for the next block; a line longer than
		 * the buffer (a path of thousands of bytes) is skipped whole,
		 * after its address range was looked at. */
		have -= (size_t)(s - buf);
		if (have == sizeof buf) {
			int m = gpo__line(buf, buf + have, addr, lo, hi, &anon, heap);
			if (m != 0) {
				found = m;
				break;
			}
			have = 0;
			do {
				r = read(fd, buf, sizeof buf);
				nl = r > 0 ? memchr(buf, '\n', (size_t)r) : NULL;
			} while (r > 0 && !nl);
			if (r <= 0)
				break;
			have = (size_t)r - (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, have);
		} else {
			memmove(buf, s, have);
		}
	}
	close(fd);
	return found == 1 && anon ? 0 : -1;
}
