/*
 * conffile.c - the configuration file (/etc/gpumutex.conf) and how it
 * combines with the environment.
 *
 * The machine-wide mode exists for processes whose environment was reset
 * (env -i, sudo, systemd, sandboxes) or tampered with, so the file is read
 * as an untrusted input by a library that runs inside every program: no
 * open can block (O_NONBLOCK, a FIFO is refused after fstat), symlinks are
 * not followed, the size is capped, and a file that anyone but root could
 * have written is not believed. Every message names the file, the line and
 * the key, and says what is expected: the reader is an administrator (or
 * an agent) who fixes the file from that one sentence.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static const char *const key_names[GM_CONF_NKEYS] = {
	[GM_CONF_VISIBLE_DEVICES] = "visible_devices",
	[GM_CONF_NUM_DEVICES] = "num_devices",
	[GM_CONF_LOCK_DIR] = "lock_dir",
	[GM_CONF_TIMEOUT] = "timeout",
	[GM_CONF_QUIET] = "quiet",
	[GM_CONF_RECHECK_MS] = "recheck_ms",
	[GM_CONF_ENFORCE] = "enforce",
	[GM_CONF_IDLE_SUSPEND_MS] = "idle_suspend_ms",
	[GM_CONF_GPU_TIME] = "gpu_time",
};

const char *gm_conf_key_name(int key)
{
	return key >= 0 && key < GM_CONF_NKEYS ? key_names[key] : NULL;
}

void gm_conf_free(struct gm_conf *c)
{
	free(c->text);
	memset(c, 0, sizeof *c);
}

/* yes/no (and 1/0, which the environment uses): nothing else, since a
 * typo must not flip the meaning. */
static int parse_bool(const char *v, int *out)
{
	if (!strcmp(v, "yes") || !strcmp(v, "1")) {
		*out = 1;
		return 0;
	}
	if (!strcmp(v, "no") || !strcmp(v, "0")) {
		*out = 0;
		return 0;
	}
	return -EINVAL;
}

/* Check one value on its own (num_devices needs the device count and is
 * checked when the configuration is resolved, except for its form). */
static int check_value(struct gm_conf *c, int k, const char *v, char *err,
		       size_t errlen)
{
	int devs[GM_MAX_DEVICES], n, b;
	double t;

	switch (k) {
	case GM_CONF_VISIBLE_DEVICES:
		return gm_parse_visible(key_names[k], v, devs, &n, err, errlen);
	case GM_CONF_NUM_DEVICES:
		return gm_parse_want(key_names[k], v, GM_MAX_DEVICES, &n, err,
				     errlen);
	case GM_CONF_LOCK_DIR:
		return gm_check_lock_dir(key_names[k], v, err, errlen);
	case GM_CONF_TIMEOUT:
		return gm_parse_timeout(key_names[k], v, &t, err, errlen);
	case GM_CONF_RECHECK_MS:
	case GM_CONF_IDLE_SUSPEND_MS: /* the same range: 0 (never) to a day */
		return gm_parse_recheck_ms(key_names[k], v, &n, err, errlen);
	default: /* quiet, enforce, gpu_time */
		if (parse_bool(v, &b))
			return gm__fail(-EINVAL, err, errlen,
					"%s=\"%s\" is not valid; expected yes or no",
					key_names[k], v);
		if (k == GM_CONF_ENFORCE)
			c->enforce = b;
		return 0;
	}
}

static int is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

int gm_conf_parse(const char *path, char *text, size_t len,
		  struct gm_conf *c, char *err, size_t errlen)
{
	/* On the heap: check_value's message is wrapped with the line's
	 * place, and this may run on a 16 KiB cuInit thread stack. */
	char *why = NULL;
	char *p = text, *end = text + len;
	int lineno = 0, rc = 0;

	if (memchr(text, '\0', len))
		return gm__fail(-EINVAL, err, errlen,
				"%s contains a NUL byte; expected a text file of \"key = value\" lines",
				path);
	while (p < end) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *line = p, *eol = nl ? nl : end, *key, *kend, *v;
		int k;

		p = nl ? nl + 1 : end;
		lineno++;
		*eol = '\0';
		/* A comment: a line starting with '#', or the rest of a line
		 * from a '#' after a blank (so "enforce = yes  # binding"
		 * works, and a '#' inside a path does not start one). */
		for (char *q = line; *q; q++)
			if (*q == '#' && (q == line || is_blank(q[-1]))) {
				*q = '\0';
				break;
			}
		while (is_blank(*line))
			line++;
		for (size_t l = strlen(line); l && is_blank(line[l - 1]); l--)
			line[l - 1] = '\0';
		if (!*line)
			continue;
		key = line;
		kend = key + strspn(key, "abcdefghijklmnopqrstuvwxyz_");
		v = kend;
		while (is_blank(*v))
			v++;
		if (kend == key || *v != '=') {
			/* The line goes into a message on a terminal. */
			for (char *q = line; *q; q++)
				if ((unsigned char)*q < 0x20 || *q == 0x7f)
					*q = '?';
		}
		if (kend == key || *v != '=') {
			rc = gm__fail(-EINVAL, err, errlen,
				      "%s line %d: \"%s\" is not a setting; expected \"key = value\" (keys: visible_devices, num_devices, lock_dir, timeout, quiet, recheck_ms, idle_suspend_ms, gpu_time, enforce) or a # comment",
				      path, lineno, line);
			break;
		}
		*kend = '\0';
		v++;
		while (is_blank(*v))
			v++;
		for (k = 0; k < GM_CONF_NKEYS; k++)
			if (!strcmp(key, key_names[k]))
				break;
		if (k == GM_CONF_NKEYS) {
			rc = gm__fail(-EINVAL, err, errlen,
				      "%s line %d: unknown key \"%s\"; expected one of visible_devices, num_devices, lock_dir, timeout, quiet, recheck_ms, idle_suspend_ms, gpu_time, enforce",
				      path, lineno, key);
			break;
		}
		if (c->val[k]) {
			rc = gm__fail(-EINVAL, err, errlen,
				      "%s line %d: key \"%s\" was already set on line %d; expected each key at most once",
				      path, lineno, key, c->line[k]);
			break;
		}
		if (!why && !(why = malloc(GM_ERR_MAX))) {
			rc = gm__fail(-ENOMEM, err, errlen,
				      "cannot read %s: out of memory", path);
			break;
		}
		if (check_value(c, k, v, why, GM_ERR_MAX)) {
			rc = gm__fail(-EINVAL, err, errlen, "%s line %d: %s",
				      path, lineno, why);
			break;
		}
		c->val[k] = v;
		c->line[k] = lineno;
	}
	free(why);
	if (rc)
		return rc;
	if (c->enforce && !c->val[GM_CONF_VISIBLE_DEVICES])
		return gm__fail(-EINVAL, err, errlen,
				"%s line %d: enforce = yes needs visible_devices (the GPUs every process queues for); add a line such as \"visible_devices = 0,1\"",
				path, c->line[GM_CONF_ENFORCE]);
	return 0;
}

int gm_conf_load(const char *path, int system, struct gm_conf *c, char *err,
		 size_t errlen)
{
	int fd, rc;
	struct stat st;
	ssize_t n;
	size_t got = 0;
	uid_t me = geteuid();

	memset(c, 0, sizeof *c);
	fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC |
			O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT && system)
			return 1;
		if (e == ELOOP)
			return gm__fail(-ELOOP, err, errlen,
					"configuration file %s is a symbolic link; expected a regular file (links are not followed, so that nobody can point it elsewhere)",
					path);
		if (e == EACCES)
			return gm__fail(-EACCES, err, errlen,
					"configuration file %s cannot be read by uid %u; expected a file readable by every user (mode 0644)",
					path, (unsigned)me);
		return gm__fail(-e, err, errlen,
				"cannot open configuration file %s: %s", path,
				strerror(e));
	}
	if (gm__fstat(fd, &st) < 0) {
		rc = -errno;
		close(fd);
		return gm__fail(rc, err, errlen, "cannot stat %s: %s", path,
				strerror(-rc));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return gm__fail(-EINVAL, err, errlen,
				"configuration file %s is %s; expected a regular file",
				path, S_ISDIR(st.st_mode) ? "a directory" :
				S_ISFIFO(st.st_mode) ? "a FIFO" :
				"not a regular file");
	}
	if (st.st_uid != 0 && (system || st.st_uid != me)) {
		close(fd);
		return gm__fail(-EPERM, err, errlen,
				"configuration file %s is owned by uid %u, so it is not trusted; expected it owned by root%s (chown root)",
				path, (unsigned)st.st_uid,
				system ? "" : " or by this user");
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		close(fd);
		return gm__fail(-EPERM, err, errlen,
				"configuration file %s has mode %04o (writable by %s), so it is not trusted; expected it writable by its owner only (chmod go-w)",
				path, (unsigned)(st.st_mode & 07777),
				st.st_mode & S_IWOTH ? "everyone" : "its group");
	}
	if (st.st_size > GM_CONF_MAX) {
		close(fd);
		return gm__fail(-EFBIG, err, errlen,
				"configuration file %s is %lld bytes; expected at most %d",
				path, (long long)st.st_size, GM_CONF_MAX);
	}
	c->text = malloc(GM_CONF_MAX + 2);
	if (!c->text) {
		close(fd);
		return gm__fail(-ENOMEM, err, errlen,
				"cannot read %s: out of memory", path);
	}
	/* Up to the cap plus one byte: the file may grow after fstat. */
	while (got <= GM_CONF_MAX) {
		n = read(fd, c->text + got, GM_CONF_MAX + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			close(fd);
			gm_conf_free(c);
			return gm__fail(rc, err, errlen, "cannot read %s: %s",
					path, strerror(-rc));
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (got > GM_CONF_MAX) {
		gm_conf_free(c);
		return gm__fail(-EFBIG, err, errlen,
				"configuration file %s is over %d bytes; expected at most %d",
				path, GM_CONF_MAX, GM_CONF_MAX);
	}
	c->text[got] = '\0';
	c->present = 1;
	rc = gm_conf_parse(path, c->text, got, c, err, errlen);
	if (rc)
		gm_conf_free(c);
	return rc;
}

/* ---- File and environment together ------------------------------------ */

/* Set-user-ID and similar processes (AT_SECURE) run with an environment
 * chosen by the user who started them: they take no setting from it (a
 * GPUMUTEX_LOCK_DIR there would make a root process create files where
 * that user says), only from the system file. */
static const char *env_get(int secure, const char *name)
{
	return secure ? NULL : getenv(name);
}

static void note(struct gm_conf_info *info, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void note(struct gm_conf_info *info, const char *fmt, ...)
{
	size_t off = strlen(info->notes);
	va_list ap;

	if (off + 3 >= sizeof info->notes)
		return;
	if (off) {
		memcpy(info->notes + off, "; ", 3);
		off += 2;
	}
	va_start(ap, fmt);
	vsnprintf(info->notes + off, sizeof info->notes - off, fmt, ap);
	va_end(ap);
}

/* "/a/b/" and "/a/b" are one directory; anything else is compared as
 * written (a lock directory is named, not resolved: it may not exist). */
static int same_dir(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	while (la > 1 && a[la - 1] == '/')
		la--;
	while (lb > 1 && b[lb - 1] == '/')
		lb--;
	return la == lb && memcmp(a, b, la) == 0;
}

/* A value from the file, checked again in context: the message says
 * where it came from. */
static int file_fail(const struct gm_conf_info *info, const struct gm_conf *c,
		     int k, const char *why, char *err, size_t errlen)
{
	return gm__fail(-EINVAL, err, errlen, "%s line %d: %s", info->file,
			c->line[k], why);
}

/* Resolve with the file (c) read; see gm_config_resolve. */
static int resolve(struct gm_config *cfg, struct gm_conf_info *info,
		   struct gm_conf *c, int secure, char *why, char *err,
		   size_t errlen)
{
	const int enforce = info->enforce;
	const char *fv = c->val[GM_CONF_VISIBLE_DEVICES];
	const char *v;
	int managed[GM_MAX_DEVICES], nmanaged = 0, rc;

	/* The candidates. Empty is unset, as it always was. */
	v = env_get(secure, "GPUMUTEX_VISIBLE_DEVICES");
	if (v && !*v)
		v = NULL;
	if (fv && gm_parse_visible("visible_devices", fv, managed, &nmanaged,
				   why, GM_ERR_MAX))
		return file_fail(info, c, GM_CONF_VISIBLE_DEVICES, why, err,
				 errlen);
	if (v) {
		rc = gm_parse_visible("GPUMUTEX_VISIBLE_DEVICES", v,
				      cfg->devices, &cfg->ndevices, err, errlen);
		if (rc)
			return rc;
		info->from_env = 1;
		if (enforce) {
			uint64_t in = 0;
			int out = 0;
			for (int i = 0; i < nmanaged; i++)
				in |= UINT64_C(1) << managed[i];
			for (int i = 0; i < cfg->ndevices; i++)
				out |= !(in & (UINT64_C(1) << cfg->devices[i]));
			if (out) {
				note(info, "GPUMUTEX_VISIBLE_DEVICES=\"%s\" is refused: %s enforces visible_devices = %s and the environment may only name a subset of it",
				     v, info->file, fv);
				memcpy(cfg->devices, managed, sizeof managed);
				cfg->ndevices = nmanaged;
			}
		}
	} else if (fv) {
		memcpy(cfg->devices, managed, sizeof managed);
		cfg->ndevices = nmanaged;
	} else {
		return 1; /* configured by neither: pass through */
	}
	if (fv && (!v || enforce))
		info->from_file = 1;

	/* How many one job takes. */
	v = env_get(secure, "GPUMUTEX_NUM_DEVICES");
	if (v && enforce) {
		uint64_t n;
		if (gm_parse_uint(v, 10, UINT64_MAX, &n) == 0 &&
		    n > (uint64_t)nmanaged) {
			note(info, "GPUMUTEX_NUM_DEVICES=\"%s\" is refused: %s enforces visible_devices = %s, %d GPU%s",
			     v, info->file, fv, nmanaged, nmanaged == 1 ? "" : "s");
			v = NULL;
		}
	}
	if (v) {
		rc = gm_parse_want("GPUMUTEX_NUM_DEVICES", v, cfg->ndevices,
				   &cfg->want, err, errlen);
		if (rc)
			return rc;
		info->from_env = 1;
	} else if (c->val[GM_CONF_NUM_DEVICES]) {
		if (gm_parse_want("num_devices", c->val[GM_CONF_NUM_DEVICES],
				  cfg->ndevices, &cfg->want, why, GM_ERR_MAX)) {
			/* Most often the environment narrowed the GPUs
			 * below the file's job size: say so. */
			if (info->from_env)
				snprintf(why + strlen(why), GM_ERR_MAX - strlen(why),
					 " (GPUMUTEX_VISIBLE_DEVICES or the environment left %d; set GPUMUTEX_NUM_DEVICES too)",
					 cfg->ndevices);
			return file_fail(info, c, GM_CONF_NUM_DEVICES, why, err,
					 errlen);
		}
		info->from_file = 1;
	}

	/* Where the queue is: under enforce, only the file's. */
	{
		const char *fl = c->val[GM_CONF_LOCK_DIR];
		const char *fixed = fl ? fl : GM_DEFAULT_LOCK_DIR;

		v = env_get(secure, "GPUMUTEX_LOCK_DIR");
		if (enforce && v && !same_dir(v, fixed)) {
			note(info, "GPUMUTEX_LOCK_DIR=\"%s\" is refused: %s enforces lock_dir = %s",
			     v, info->file, fixed);
			v = NULL;
		}
		if (v) {
			rc = gm_check_lock_dir("GPUMUTEX_LOCK_DIR", v, err,
					       errlen);
			if (rc)
				return rc;
			info->from_env = 1;
		} else {
			v = fixed;
			info->from_file |= fl != NULL;
		}
		strcpy(cfg->lock_dir, v);
	}

	/* The rest only concern the process itself: the environment wins
	 * in both modes. */
	v = env_get(secure, "GPUMUTEX_TIMEOUT");
	if (v) {
		rc = gm_parse_timeout("GPUMUTEX_TIMEOUT", v, &cfg->timeout_s,
				      err, errlen);
		if (rc)
			return rc;
		info->from_env = 1;
	} else if (c->val[GM_CONF_TIMEOUT]) {
		gm_parse_timeout("timeout", c->val[GM_CONF_TIMEOUT],
				 &cfg->timeout_s, NULL, 0);
		info->from_file = 1;
	}

	v = env_get(secure, "GPUMUTEX_JOB");
	if (v) {
		rc = gm_job_check("GPUMUTEX_JOB", v, err, errlen);
		if (rc)
			return rc;
		strcpy(cfg->job, v);
	}

	v = env_get(secure, "GPUMUTEX_QUIET");
	if (v) {
		rc = gm_parse_quiet("GPUMUTEX_QUIET", v, &cfg->quiet, err,
				    errlen);
		if (rc)
			return rc;
		info->from_env = 1;
	} else if (c->val[GM_CONF_QUIET]) {
		parse_bool(c->val[GM_CONF_QUIET], &cfg->quiet);
		info->from_file = 1;
	}

	v = env_get(secure, "GPUMUTEX_RECHECK_MS");
	if (!v && c->val[GM_CONF_RECHECK_MS]) {
		v = c->val[GM_CONF_RECHECK_MS];
		info->from_file = 1;
	}
	if (v) {
		rc = gm_parse_recheck_ms("GPUMUTEX_RECHECK_MS", v,
					 &cfg->recheck_ms, err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

int gm_config_resolve_at(const char *system_path, struct gm_config *cfg,
			 struct gm_conf_info *info, int flags, char *err,
			 size_t errlen)
{
	struct gm_conf c;
	const int secure = getauxval(AT_SECURE) != 0;
	const char *user;
	char *why;
	int rc;

	memset(info, 0, sizeof *info);
	info->secure = secure;
	memset(cfg, 0, sizeof *cfg);
	cfg->want = 1;
	cfg->timeout_s = -1;
	cfg->recheck_ms = GM_DEFAULT_RECHECK_MS;

	rc = gm_conf_load(system_path, 1, &c, err, errlen);
	if (rc < 0)
		return rc;
	info->gpu_time_file = -1;
	if (c.val[GM_CONF_GPU_TIME]) {
		int b;

		if (parse_bool(c.val[GM_CONF_GPU_TIME], &b) == 0)
			info->gpu_time_file = b;
	}
	if (rc == 1 && (flags & GM_RESOLVE_INSTALLED))
		return gm__fail(-ENOENT, err, errlen,
				"this library was installed machine-wide (%s) but the configuration file %s is missing; restore it (gpumutex install --system) or take the library out (gpumutex uninstall --system)",
				GM_INSTALL_LIB, system_path);
	info->system_present = rc == 0;
	info->enforce = rc == 0 && c.enforce;
	if (rc == 0)
		snprintf(info->file, sizeof info->file, "%s", system_path);

	user = env_get(secure, "GPUMUTEX_CONFIG");
	if (user && *user) {
		if (info->enforce) {
			note(info, "GPUMUTEX_CONFIG=\"%s\" is ignored: %s enforces (enforce = yes)",
			     user, system_path);
		} else {
			gm_conf_free(&c);
			/* Any owner but root or this user, or a link, is
			 * refused: the settings of another user's file are
			 * not this user's choice. */
			rc = gm_conf_load(user, 0, &c, err, errlen);
			if (rc < 0)
				return rc;
			snprintf(info->file, sizeof info->file, "%s", user);
			info->user_file = 1;
		}
	}
	why = malloc(GM_ERR_MAX);
	if (!why) {
		gm_conf_free(&c);
		return gm__fail(-ENOMEM, err, errlen, "out of memory");
	}
	rc = resolve(cfg, info, &c, secure, why, err, errlen);
	free(why);
	info->idle_suspend_file_ms = UINT32_MAX;
	if (c.val[GM_CONF_IDLE_SUSPEND_MS]) {
		int ms;
		char e[GM_ERR_MAX];

		if (gm_parse_recheck_ms("idle_suspend_ms",
					c.val[GM_CONF_IDLE_SUSPEND_MS], &ms, e,
					sizeof e) == 0)
			info->idle_suspend_file_ms = (unsigned)ms;
	}
	info->gpu_time_file = -1;
	if (c.val[GM_CONF_GPU_TIME]) {
		int b;

		if (parse_bool(c.val[GM_CONF_GPU_TIME], &b) == 0)
			info->gpu_time_file = b;
	}
	if (rc == 1 && (flags & GM_RESOLVE_INSTALLED))
		rc = gm__fail(-EINVAL, err, errlen,
			      "this library was installed machine-wide (%s) but %s names no GPUs (no visible_devices)%s; add visible_devices to %s",
			      GM_INSTALL_LIB, info->file[0] ? info->file : system_path,
			      info->user_file ? ", and neither does GPUMUTEX_VISIBLE_DEVICES" : "",
			      system_path);
	gm_conf_free(&c);
	return rc;
}

int gm_config_resolve(struct gm_config *cfg, struct gm_conf_info *info,
		      int flags, char *err, size_t errlen)
{
	return gm_config_resolve_at(GM_SYSTEM_CONFIG, cfg, info, flags, err,
				    errlen);
}
