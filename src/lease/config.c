/*
 * config.c - parse and validate gpumutex's configuration.
 *
 * Every message names the variable (or flag), quotes the value and says
 * what is expected, because the reader is often an agent that has to fix
 * its own command line from that one sentence.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* The longest run of characters other than spaces in s: its start, *n. */
static char *longest_word(char *s, size_t *n)
{
	char *best = s;

	*n = 0;
	while (*s) {
		size_t k = strcspn(s, " ");
		if (k > *n)
			best = s, *n = k;
		s += k + strspn(s + k, " ");
	}
	return best;
}

/*
 * msg (len bytes, malloc'ed) into err[errlen]: when too long, the longest
 * values quoted in it (a 10,000-entry list, a 4,000-byte path) lose their
 * middle to "..." rather than the message its end, which says what is
 * wrong.
 */
static void fit(char *msg, size_t len, char *err, size_t errlen)
{
	while (len >= errlen) {
		size_t r, keep, head, over = len - (errlen - 1);
		char *w = longest_word(msg, &r);
		if (r < 24)
			break; /* nothing long left: cut the end after all */
		keep = r > over + 19 ? r - over : 19; /* 8 + "..." + 8 at least */
		head = (keep - 3) / 2;
		memcpy(w + head, "...", 3);
		memmove(w + head + 3, w + r - (keep - 3 - head),
			strlen(w + r - (keep - 3 - head)) + 1);
		len -= r - keep;
	}
	snprintf(err, errlen, "%s", msg);
}

int gm__fail(int rc, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap, again;
	int n;
	char *msg;

	if (!err || !errlen)
		return rc;
	va_start(ap, fmt);
	va_copy(again, ap);
	n = vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n >= errlen && (msg = malloc((size_t)n + 1))) {
		vsnprintf(msg, (size_t)n + 1, fmt, again);
		fit(msg, (size_t)n, err, errlen);
		free(msg);
	}
	va_end(again);
	return rc;
}

int gm_parse_devices(const char *name, const char *text, int *out, int *n,
		     char *err, size_t errlen)
{
	const char *p = text;
	int count = 0;
	uint64_t seen = 0;

	if (!text || !*text)
		return gm__fail(-EINVAL, err, errlen,
				"%s is empty; expected a comma-separated list of GPU indices such as \"0,1,2,3\"",
				name);
	for (;;) {
		long v = 0;
		int digits = 0;

		while (*p >= '0' && *p <= '9') {
			v = v * 10 + (*p - '0');
			p++;
			if (++digits > 3)
				break;
		}
		if (digits == 0 || (*p != ',' && *p != '\0'))
			return gm__fail(-EINVAL, err, errlen,
					"%s=\"%s\" is not a list of GPU indices; expected comma-separated numbers from 0 to %d such as \"0,1,2,3\"",
					name, text, GM_MAX_DEVICES - 1);
		if (v >= GM_MAX_DEVICES)
			return gm__fail(-EINVAL, err, errlen,
					"%s=\"%s\" names GPU %ld; indices must be from 0 to %d",
					name, text, v, GM_MAX_DEVICES - 1);
		if (seen & (UINT64_C(1) << v))
			return gm__fail(-EINVAL, err, errlen,
					"%s=\"%s\" names GPU %ld twice; each index may appear once",
					name, text, v);
		seen |= UINT64_C(1) << v;
		out[count++] = (int)v;
		if (*p == '\0')
			break;
		p++; /* the comma; an empty entry fails on the next round */
	}
	*n = count;
	return 0;
}

int gm_parse_want(const char *name, const char *text, int ndevices, int *out,
		  char *err, size_t errlen)
{
	uint64_t v;
	int rc = gm_parse_uint(text, 10, UINT64_MAX, &v);

	if (rc == -EINVAL)
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" is not a number; expected how many GPUs one job needs, a decimal number from 1 to %d",
				name, text ? text : "", ndevices);
	if ((rc || v < 1 || v > (uint64_t)ndevices) && ndevices == 1)
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" is out of range; only one GPU is managed, so a job takes that one (1)",
				name, text);
	if (rc || v < 1 || v > (uint64_t)ndevices)
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" is out of range; a job can take from 1 to %d GPUs (the number of managed GPUs)",
				name, text, ndevices);
	*out = (int)v;
	return 0;
}

int gm_parse_timeout(const char *name, const char *text, double *out,
		     char *err, size_t errlen)
{
	/* Digits with an optional fraction and nothing else: strtod would
	 * also take "inf", "nan", "1e3", hex and leading blanks. */
	uint64_t whole = 0, frac = 0;
	const char *p = text, *end = text;
	double scale = 1;
	int rc = 0;

	if (!p)
		rc = -EINVAL;
	else if (*p != '.')
		rc = gm_scan_uint(p, 10, GM_TIMEOUT_MAX, &whole, &end);
	if (rc == 0 && *end == '.') {
		/* "5." and ".5" are numbers, "." is not. 18 digits keep the
		 * fraction exact; finer ones mean nothing for a timeout. */
		p = end + 1;
		if (gm_scan_uint(p, 10, UINT64_MAX, &frac, &end) == -ERANGE ||
		    end - p > 18 || (end == p && p - 1 == text))
			rc = -EINVAL;
		for (const char *q = p; q < end; q++)
			scale *= 10;
	}
	if (rc == -ERANGE || (rc == 0 && *end == '\0' &&
			      whole == GM_TIMEOUT_MAX && frac))
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" is out of range; expected seconds from 0 to %d",
				name, text, GM_TIMEOUT_MAX);
	if (rc || *end != '\0')
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" is not a duration; expected seconds from 0 to %d as a plain decimal number such as \"30\" or \"0.5\" (no sign, exponent or \"inf\")",
				name, text ? text : "", GM_TIMEOUT_MAX);
	*out = (double)whole + (double)frac / scale;
	return 0;
}

int gm_job_check(const char *name, const char *text, char *err,
		 size_t errlen)
{
	size_t len = text ? strlen(text) : 0;

	/* No dots: the id becomes part of file names whose suffixes
	 * (".lease") and fields (ticket names) are separated by dots. */
	if (len == 0 || len > GM_JOB_MAX ||
	    strspn(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") != len)
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" is not a valid job id; expected 1 to %d characters from A-Z a-z 0-9 _ -",
				name, text ? text : "", GM_JOB_MAX);
	return 0;
}

int gm_parse_quiet(const char *name, const char *text, int *out, char *err,
		   size_t errlen)
{
	if (text && (strcmp(text, "0") == 0 || strcmp(text, "1") == 0)) {
		*out = text[0] == '1';
		return 0;
	}
	return gm__fail(-EINVAL, err, errlen,
			"%s=\"%s\" is not valid; expected 1 (no waiting line) or 0 (print it)",
			name, text ? text : "");
}

int gm_parse_recheck_ms(const char *name, const char *text, int *out,
			char *err, size_t errlen)
{
	uint64_t ms;

	if (!text || gm_parse_uint(text, 10, 86400000, &ms))
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" is not valid; expected milliseconds as a decimal number from 0 (never) to 86400000",
				name, text ? text : "");
	*out = (int)ms;
	return 0;
}

int gm_check_lock_dir(const char *name, const char *text, char *err,
		      size_t errlen)
{
	/* 64 bytes to spare for the names below it (dev/63, job/<uid>/<job>
	 * are formatted into buffers of that size around lock_dir). */
	if (!text || text[0] != '/' ||
	    strlen(text) >= sizeof ((struct gm_config *)0)->lock_dir - 64)
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" is not usable; expected an absolute directory path of at most %d bytes such as \"%s\"",
				name, text ? text : "",
				(int)sizeof ((struct gm_config *)0)->lock_dir - 65,
				GM_DEFAULT_LOCK_DIR);
	return 0;
}

void gm__random_bytes(void *out, size_t len)
{
	unsigned char *raw = out;
	size_t got = 0;

	/* getrandom(2) by number: its libc wrapper is newer than our glibc
	 * floor. Fall back to /dev/urandom, then to time and pid, so bytes are
	 * always produced (uniqueness, not secrecy, is what matters). */
#ifdef SYS_getrandom
	{
		long r = syscall(SYS_getrandom, raw, len, 0);
		if (r == (long)len)
			got = len;
	}
#endif
	if (got < len) {
		int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t r = read(fd, raw, len);
			got = r == (ssize_t)len ? len : 0;
			close(fd);
		}
	}
	if (got < len) {
		static unsigned long counter;
		struct timespec ts;
		uint64_t x;
		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		x ^= ((uint64_t)getpid() << 32) ^
		     __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
		for (size_t i = 0; i < len; i++) {
			x = x * 6364136223846793005u + 1442695040888963407u;
			raw[i] = (unsigned char)(x >> 56);
		}
	}
}

uint64_t gm__random_u64(void)
{
	uint64_t v;
	gm__random_bytes(&v, sizeof v);
	return v;
}

void gm_job_generate(char *buf)
{
	unsigned char raw[16];

	gm__random_bytes(raw, sizeof raw);
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(buf + 2 * i, 3, "%02x", raw[i]);
}

static const char *env(const char *name)
{
	const char *v = getenv(name);
	return v;
}

int gm_config_from_env(struct gm_config *cfg, char *err, size_t errlen)
{
	const char *v;
	int rc;

	memset(cfg, 0, sizeof *cfg);
	cfg->want = 1;
	cfg->timeout_s = -1;
	cfg->recheck_ms = GM_DEFAULT_RECHECK_MS;

	/* Empty is unset: shells and tools export empty variables, and an
	 * empty list could only ever be refused. */
	v = env("GPUMUTEX_VISIBLE_DEVICES");
	if (!v || !*v)
		return 1;
	rc = gm_parse_visible("GPUMUTEX_VISIBLE_DEVICES", v, cfg->devices,
			      &cfg->ndevices, err, errlen);
	if (rc)
		return rc;

	v = env("GPUMUTEX_NUM_DEVICES");
	if (v) {
		rc = gm_parse_want("GPUMUTEX_NUM_DEVICES", v, cfg->ndevices,
				   &cfg->want, err, errlen);
		if (rc)
			return rc;
	}

	v = env("GPUMUTEX_LOCK_DIR");
	if (!v)
		v = GM_DEFAULT_LOCK_DIR;
	rc = gm_check_lock_dir("GPUMUTEX_LOCK_DIR", v, err, errlen);
	if (rc)
		return rc;
	strcpy(cfg->lock_dir, v);

	v = env("GPUMUTEX_TIMEOUT");
	if (v) {
		rc = gm_parse_timeout("GPUMUTEX_TIMEOUT", v, &cfg->timeout_s,
				      err, errlen);
		if (rc)
			return rc;
	}

	v = env("GPUMUTEX_JOB");
	if (v) {
		rc = gm_job_check("GPUMUTEX_JOB", v, err, errlen);
		if (rc)
			return rc;
		strcpy(cfg->job, v);
	}

	v = env("GPUMUTEX_QUIET");
	if (v) {
		rc = gm_parse_quiet("GPUMUTEX_QUIET", v, &cfg->quiet, err, errlen);
		if (rc)
			return rc;
	}

	v = env("GPUMUTEX_RECHECK_MS");
	if (v) {
		rc = gm_parse_recheck_ms("GPUMUTEX_RECHECK_MS", v,
					 &cfg->recheck_ms, err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}
