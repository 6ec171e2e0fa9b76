/*
 * profile.c - reading and writing the machine profile (profile.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profile.h"

#define GPO__PROFILE_MAX (1 << 20)

static double gpo__pow10(int e)
{
	double r = 1, b = 10;
	int neg = e < 0;

	if (neg)
		e = -e;
	while (e) {
		if (e & 1)
			r *= b;
		b *= b;
		e >>= 1;
	}
	return neg ? 1 / r : r;
}

int gpo_scan_double(const char *s, double *out, const char **end)
{
	double v = 0;
	int digits = 0, scale = 0, e = 0;
	const char *p = s;

	/* Up to 17 significant digits are accumulated exactly enough for
	 * a profile; later ones only move the decimal point. */
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		if (digits < 18)
			v = v * 10 + (*p - '0');
		else
			scale++;
	}
	if (*p == '.') {
		p++;
		for (; *p >= '0' && *p <= '9'; p++, digits++) {
			if (digits < 18) {
				v = v * 10 + (*p - '0');
				scale--;
			}
		}
	}
	if (digits == 0)
		return -EINVAL;
	if (*p == 'e' || *p == 'E') {
		const char *q = p + 1;
		int neg = 0, ed = 0;
		if (*q == '+' || *q == '-')
			neg = *q++ == '-';
		for (; *q >= '0' && *q <= '9'; q++, ed++)
			if (e < 10000)
				e = e * 10 + (*q - '0');
		if (ed) {
			p = q;
			scale += neg ? -e : e;
		}
	}
	if (scale > 400)
		return -EINVAL;
	if (scale < -400)
		v = 0;
	else if (scale)
		v *= gpo__pow10(scale);
	*out = v;
	if (end)
		*end = p;
	return 0;
}

static int gpo__fail(char *err, size_t errlen, int line, const char *what)
{
	if (err && errlen)
		snprintf(err, errlen, "line %d: %s", line, what);
	return -EINVAL;
}

static const char *gpo__skip(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t'))
		p++;
	return p;
}

/* One number field of the line [p, e); advances *pp. */
static int gpo__num(const char **pp, const char *e, double *v)
{
	const char *p = gpo__skip(*pp, e), *q;

	if (p >= e || gpo_scan_double(p, v, &q) || (q < e && *q != ' ' &&
						     *q != '\t' && *q != ':'))
		return -EINVAL;
	*pp = q;
	return 0;
}

static int gpo__word(const char *p, const char *e, const char *w)
{
	size_t n = strlen(w);
	return (size_t)(e - p) >= n && memcmp(p, w, n) == 0 &&
	       (p + n == e || p[n] == ' ' || p[n] == '\t');
}

static int gpo__curve(struct gpo_profile *pr, char dev, const char *p,
		      const char *e, int line, char *err, size_t errlen)
{
	struct gpo_curve c;
	const char *w = gpo__skip(p, e), *we = w;
	struct gpo_curve *grown;

	memset(&c, 0, sizeof c);
	c.dev = dev;
	while (we < e && *we != ' ' && *we != '\t')
		we++;
	if (we - w < 2 || (size_t)(we - w) > sizeof c.op ||
	    !strchr("sdcz", *w))
		return gpo__fail(err, errlen, line,
				 "a curve needs a name such as dgemm");
	c.prec = *w;
	memcpy(c.op, w + 1, (size_t)(we - w - 1));
	for (int i = 0; i < (int)sizeof c.op - 1 && c.op[i]; i++)
		if (!((c.op[i] >= 'a' && c.op[i] <= 'z') ||
		      (c.op[i] >= '0' && c.op[i] <= '9')))
			return gpo__fail(err, errlen, line,
					 "an operation name is lower-case letters and digits");
	p = we;
	for (;;) {
		double x, y;
		p = gpo__skip(p, e);
		if (p >= e)
			break;
		if (c.n == GPO_CURVE_MAX)
			return gpo__fail(err, errlen, line,
					 "too many points (at most 16)");
		if (gpo__num(&p, e, &x) || p >= e || *p != ':')
			return gpo__fail(err, errlen, line,
					 "a point is WORK:SPEED, e.g. 1e9:8.5e10");
		p++;
		if (gpo__num(&p, e, &y))
			return gpo__fail(err, errlen, line,
					 "a point is WORK:SPEED, e.g. 1e9:8.5e10");
		if (x <= 0 || y <= 0 || (c.n && x <= c.work[c.n - 1]))
			return gpo__fail(err, errlen, line,
					 "points need positive numbers in increasing work");
		c.work[c.n] = x;
		c.speed[c.n++] = y;
	}
	if (c.n == 0)
		return gpo__fail(err, errlen, line, "a curve needs a point");
	if (gpo_profile_curve(pr, c.dev, c.prec, c.op))
		return gpo__fail(err, errlen, line, "a second curve of that name");
	grown = realloc(pr->curves, (size_t)(pr->ncurves + 1) * sizeof c);
	if (!grown)
		return -ENOMEM;
	pr->curves = grown;
	pr->curves[pr->ncurves++] = c;
	return 0;
}

static int gpo__line(struct gpo_profile *pr, const char *p, const char *e,
		     int line, char *err, size_t errlen)
{
	double a, b;

	static const struct { const char *w; size_t off, size; } text[] = {
		{ "source", offsetof(struct gpo_profile, source),
		  sizeof pr->source },
		{ "cpu-library", offsetof(struct gpo_profile, cpu_library),
		  sizeof pr->cpu_library },
		{ "calibration", offsetof(struct gpo_profile, calibration),
		  sizeof pr->calibration },
	};

	/* Free text, kept (cut to its field) for `gpu-offload profile`. */
	for (size_t i = 0; i < sizeof text / sizeof text[0]; i++) {
		char *f = (char *)pr + text[i].off;
		size_t n;
		if (!gpo__word(p, e, text[i].w))
			continue;
		p = gpo__skip(p + strlen(text[i].w), e);
		n = (size_t)(e - p);
		if (n >= text[i].size)
			n = text[i].size - 1;
		memcpy(f, p, n);
		f[n] = '\0';
		return 0;
	}
	if (gpo__word(p, e, "startup")) {
		p += 7;
		if (gpo__num(&p, e, &a) || gpo__skip(p, e) != e)
			return gpo__fail(err, errlen, line,
					 "startup takes one number of seconds");
		pr->startup_s = a;
		return 0;
	}
	if (gpo__word(p, e, "h2d") || gpo__word(p, e, "d2h")) {
		int h = p[0] == 'h';
		p += 3;
		if (gpo__num(&p, e, &a) || gpo__num(&p, e, &b) ||
		    gpo__skip(p, e) != e || b <= 0)
			return gpo__fail(err, errlen, line,
					 "a copy cost is FIXED_SECONDS BYTES_PER_SECOND (> 0)");
		if (h)
			pr->h2d_fixed = a, pr->h2d_bw = b;
		else
			pr->d2h_fixed = a, pr->d2h_bw = b;
		return 0;
	}
	if (gpo__word(p, e, "cpu") || gpo__word(p, e, "gpu"))
		return gpo__curve(pr, p[0] == 'c' ? 'c' : 'g', p + 3, e, line,
				  err, errlen);
	return 0; /* a keyword of a newer version: skipped */
}

int gpo_profile_parse(const char *buf, size_t len, struct gpo_profile *p,
		      char *err, size_t errlen)
{
	const char *s = buf, *end = buf + len;
	int line = 0, rc = 0, first = 1;

	memset(p, 0, sizeof *p);
	p->startup_s = -1;
	if (err && errlen)
		err[0] = '\0';
	while (s < end && rc == 0) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *e = nl ? nl : end, *hash;
		line++;
		hash = memchr(s, '#', (size_t)(e - s));
		if (hash)
			e = hash;
		while (e > s && (e[-1] == ' ' || e[-1] == '\t' ||
				 e[-1] == '\r'))
			e--;
		s = gpo__skip(s, e);
		if (s < e) {
			if (first) {
				double v;
				const char *q = s + 19;
				first = 0;
				if (!gpo__word(s, e, "gpu-offload-profile") ||
				    gpo__num(&q, e, &v) || gpo__skip(q, e) != e)
					rc = gpo__fail(err, errlen, line,
						       "the first line must be \"gpu-offload-profile 1\"");
				else if (v != GPO_PROFILE_VERSION)
					rc = gpo__fail(err, errlen, line,
						       "a profile of another format version");
			} else {
				rc = gpo__line(p, s, e, line, err, errlen);
			}
		}
		s = nl ? nl + 1 : end;
	}
	if (rc == 0 && first)
		rc = gpo__fail(err, errlen, line ? line : 1, "empty profile");
	if (rc == -ENOMEM && err && errlen)
		snprintf(err, errlen, "out of memory");
	if (rc)
		gpo_profile_free(p);
	return rc;
}

int gpo_profile_load(const char *path, struct gpo_profile *p, char *err,
		     size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
	char *buf;
	size_t len = 0;

	memset(p, 0, sizeof *p);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open %s: %s", path,
			 strerror(errno));
		return rc;
	}
	buf = malloc(GPO__PROFILE_MAX);
	if (!buf) {
		close(fd);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (;;) {
		ssize_t n = read(fd, buf + len, GPO__PROFILE_MAX - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot read %s: %s", path,
				 strerror(errno));
			free(buf);
			close(fd);
			return rc;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == GPO__PROFILE_MAX) {
			free(buf);
			close(fd);
			snprintf(err, errlen, "%s is larger than 1 MiB", path);
			return -EFBIG;
		}
	}
	close(fd);
	{
		char e2[200];
		rc = gpo_profile_parse(buf, len, p, e2, sizeof e2);
		if (rc)
			snprintf(err, errlen, "%s, %s", path, e2);
	}
	free(buf);
	return rc;
}

#define GPO__PUT(...) do { \
	int n_ = snprintf(buf + (used < len ? used : len), \
			  used < len ? len - used : 0, __VA_ARGS__); \
	if (n_ > 0) used += (size_t)n_; \
} while (0)

size_t gpo_profile_format(const struct gpo_profile *p, char *buf,
			  size_t len)
{
	size_t used = 0;

	if (len)
		buf[0] = '\0';
	GPO__PUT("gpu-offload-profile %d\n", GPO_PROFILE_VERSION);
	if (p->source[0])
		GPO__PUT("source %s\n", p->source);
	if (p->cpu_library[0])
		GPO__PUT("cpu-library %s\n", p->cpu_library);
	if (p->calibration[0])
		GPO__PUT("calibration %s\n", p->calibration);
	if (p->startup_s >= 0)
		GPO__PUT("startup %.6g\n", p->startup_s);
	if (p->h2d_bw > 0)
		GPO__PUT("h2d %.6g %.6g\n", p->h2d_fixed, p->h2d_bw);
	if (p->d2h_bw > 0)
		GPO__PUT("d2h %.6g %.6g\n", p->d2h_fixed, p->d2h_bw);
	for (int i = 0; i < p->ncurves; i++) {
		const struct gpo_curve *c = &p->curves[i];
		GPO__PUT("%s %c%s", c->dev == 'g' ? "gpu" : "cpu", c->prec,
			 c->op);
		for (int j = 0; j < c->n; j++)
			GPO__PUT(" %.6g:%.6g", c->work[j], c->speed[j]);
		GPO__PUT("\n");
	}
	return used;
}

void gpo_profile_free(struct gpo_profile *p)
{
	free(p->curves);
	p->curves = NULL;
	p->ncurves = 0;
}

const struct gpo_curve *gpo_profile_curve(const struct gpo_profile *p,
					  char dev, char prec,
					  const char *op)
{
	for (int i = 0; i < p->ncurves; i++)
		if (p->curves[i].dev == dev && p->curves[i].prec == prec &&
		    strcmp(p->curves[i].op, op) == 0)
			return &p->curves[i];
	return NULL;
}

int gpo_profile_path(char *buf, size_t len)
{
	const char *v = getenv("GPU_OFFLOAD_PROFILE");
	int n;

	if (v && *v)
		n = snprintf(buf, len, "%s", v);
	else if ((v = getenv("XDG_CONFIG_HOME")) && *v == '/')
		n = snprintf(buf, len, "%s/gpu-offload/profile", v);
	else if ((v = getenv("HOME")) && *v == '/')
		n = snprintf(buf, len, "%s/.config/gpu-offload/profile", v);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
