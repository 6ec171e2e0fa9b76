/*
 * num.c - the number parsers of the whole project.
 *
 * Why not strtol and friends: with _GNU_SOURCE, glibc 2.38 and later
 * redirect strtol, strtoul, strtoll, strtoull, sscanf and atoi to C23
 * versions (__isoc23_*@GLIBC_2.38). A library built on such a host then
 * refuses to load on every older glibc, and, preloaded, takes every program
 * of the machine down with it. These parsers use no libc at all, so the
 * artifact is the same whatever the build host's headers do. They are
 * also strict where strtol is lenient: no leading blanks, no sign, no "0x",
 * which is what a configuration value should be refused for. And the one
 * formatter of device lists, the other way round.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lease.h"

static int digit(char c, int base)
{
	int v = c >= '0' && c <= '9' ? c - '0' :
		c >= 'a' && c <= 'f' ? c - 'a' + 10 :
		c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
	return v < base ? v : -1;
}

int gm_scan_uint(const char *s, int base, uint64_t max, uint64_t *out,
		 const char **end)
{
	uint64_t v = 0;
	const char *p = s;
	int d, range = 0;

	if (!s || (base != 10 && base != 16))
		return -EINVAL;
	while ((d = digit(*p, base)) >= 0) {
		if ((uint64_t)d > max || v > (max - (uint64_t)d) / (uint64_t)base)
			range = 1;
		else
			v = v * (uint64_t)base + (uint64_t)d;
		p++;
	}
	if (end)
		*end = p;
	if (p == s)
		return -EINVAL;
	if (range)
		return -ERANGE;
	*out = v;
	return 0;
}

size_t gm_format_list(char *buf, size_t len, const int *v, int n)
{
	size_t off = 0;

	if (!len)
		return 0;
	buf[0] = '\0';
	for (int i = 0; i < n && off < len; i++) {
		int k = snprintf(buf + off, len - off, "%s%d", i ? "," : "",
				 v[i]);
		if (k < 0)
			break;
		off += (size_t)k;
	}
	return off < len ? off : len - 1;
}

const char *gm_job_short(const char *job, char *out, size_t len)
{
	size_t n = job ? strlen(job) : 0;

	if (n <= GM_JOB_SHORT)
		snprintf(out, len, "%s", job ? job : "");
	else
		snprintf(out, len, "%.*s...", GM_JOB_SHORT - 3 - 1, job);
	return out;
}

int gm_parse_uint(const char *s, int base, uint64_t max, uint64_t *out)
{
	const char *end;
	uint64_t v;
	int rc = gm_scan_uint(s, base, max, &v, &end);

	if (rc == 0 && *end != '\0')
		return -EINVAL;
	if (rc == -ERANGE && *end != '\0')
		return -EINVAL; /* not a number at all, however large its head */
	if (rc == 0)
		*out = v;
	return rc;
}
