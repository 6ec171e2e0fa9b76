/*
 * activity.c - what each member process of a lease publishes about its GPU
 * activity (the preload library's idle-suspension thread writes it, `gpumutex
 * status` reads it): one small file per process, job/<user>/act.<pid>.<PID
 * namespace> (own_name), one line "gm1act key=value ...", replaced in place
 * on each change.
 *
 * Its writer holds an OFD write lock on byte 0 of it for as long as it
 * lives (the kernel drops it at death, SIGKILL too). A process opening its
 * own file removes those of its user's processes that are gone: unlocked
 * and their PID not alive. That keeps the folder at about one file per
 * live process, with no daemon and no exit hook (a killed process runs
 * none).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "lease.h"

/*
 * This process's file name: act.<pid>.<PID namespace> (act.<pid> where the
 * namespace cannot be read). With the namespace, processes of one user in
 * two containers that share the lock directory, which may have one PID
 * number, never share a file.
 */
static void own_name(char *buf, size_t len)
{
	unsigned long long ns = gm__pidns();

	if (ns)
		snprintf(buf, len, "act.%d.%llu", (int)getpid(), ns);
	else
		snprintf(buf, len, "act.%d", (int)getpid());
}

/*
 * Whether the writer of activity file `name` may be gone, before its lock
 * is tried: a file of our PID namespace (or of an older
 * version, whose name has none) whose PID names no process here (a live
 * one of another user is alive); a file of another namespace, whose PID
 * means nothing here, is left to its lock alone (every writer that names
 * its namespace holds one).
 */
static int maybe_gone(const char *name)
{
	uint64_t pid, ns = 0;
	const char *end;

	if (strncmp(name, "act.", 4) != 0 ||
	    gm_scan_uint(name + 4, 10, INT32_MAX, &pid, &end) || pid == 0)
		return 0;
	if (*end == '.' && (gm_scan_uint(end + 1, 10, UINT64_MAX, &ns, &end) ||
			    ns == 0))
		return 0;
	if (*end != '\0')
		return 0;
	if (ns && ns != gm__pidns())
		return 1;
	return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Remove the act.* files of `user` (our user's folder) whose writer is
 * gone. Taking the lock before the unlink is what keeps a new process of
 * a reused PID safe: it locks the file it opened, then checks that the
 * name still is that file, and opens anew when not. */
static void sweep(int user, const char *own)
{
	DIR *dir = gm__listdir(user);
	struct dirent *de;

	if (!dir)
		return;
	while ((de = readdir(dir)) != NULL) {
		int fd;

		if (strcmp(de->d_name, own) == 0 || !maybe_gone(de->d_name))
			continue;
		fd = gm__track(openat(user, de->d_name, O_WRONLY | O_NOFOLLOW |
				      O_NONBLOCK | O_CLOEXEC));
		if (fd < 0)
			continue;
		if (gm__lock(fd, F_OFD_SETLK, F_WRLCK, 0) == 0 &&
		    gm__still_linked(user, de->d_name, fd))
			unlinkat(user, de->d_name, 0);
		gm__close(fd);
	}
	closedir(dir);
}

int gm_activity_open(const char *lock_dir, int *fd, char *err, size_t errlen)
{
	struct gm__dir d;
	char name[64];
	int rc;

	*fd = -1;
	rc = gm__dir_open(lock_dir, 0, &d, err, errlen);
	if (rc)
		return rc;
	rc = gm__user_dir_find(&d, err, errlen);
	if (rc == 0) {
		own_name(name, sizeof name);
		sweep(d.user, name);
		/* A sweeper that found a file of this PID's dead predecessor
		 * holds its lock only to unlink it: open anew, a few times,
		 * waiting 1, 2, 4, ... ms (a sweeper preempted there). */
		for (int tries = 0; tries < 8 && *fd < 0 && rc == 0; tries++) {
			struct timespec ts = { 0, 1000000L << tries };
			int f = gm__track(openat(d.user, name, O_WRONLY | O_CREAT |
						 O_NOFOLLOW | O_CLOEXEC, 0644));
			if (f < 0) {
				rc = gm__fail(-errno, err, errlen,
					      "cannot write job/%s/%s",
					      d.user_name, name);
				break;
			}
			if (gm__lock(f, F_OFD_SETLK, F_WRLCK, 0) == 0 &&
			    gm__still_linked(d.user, name, f)) {
				/* Ours now: a dead predecessor's line (this
				 * PID's) must not speak for us. An empty file
				 * says nothing to readers. */
				if (ftruncate(f, 0) == 0) {
					gm__untrack(f);
					*fd = f;
					break;
				}
			}
			gm__close(f);
			nanosleep(&ts, NULL);
		}
		if (*fd < 0 && rc == 0)
			rc = gm__fail(-EAGAIN, err, errlen,
				      "cannot lock job/%s/%s", d.user_name, name);
	}
	gm__dir_close(&d);
	return rc;
}

int gm_activity_write(int fd, const char *line)
{
	size_t n = strlen(line);
	/* In place and padded to a fixed size: a reader sees the old line
	 * or the new one, never an empty file. */
	char buf[GM_ACT_LINE];

	memset(buf, ' ', sizeof buf);
	memcpy(buf, line, n < sizeof buf - 1 ? n : sizeof buf - 1);
	buf[sizeof buf - 1] = '\n';
	return pwrite(fd, buf, sizeof buf, 0) == (ssize_t)sizeof buf ? 0 : -EIO;
}

static const char *field(const char *text, const char *key, char *out,
			 size_t len)
{
	size_t kl = strlen(key);
	const char *p = text;

	while ((p = strstr(p, key)) != NULL) {
		if ((p == text || p[-1] == ' ') && p[kl] == '=') {
			size_t i = 0;
			p += kl + 1;
			while (p[i] && p[i] != ' ' && p[i] != '\n' && i + 1 < len) {
				out[i] = p[i];
				i++;
			}
			out[i] = '\0';
			return out;
		}
		p += kl;
	}
	return NULL;
}

static int parse(const char *text, struct gm_activity *a)
{
	char v[GM_JOB_MAX + 1];
	uint64_t u;

	memset(a, 0, sizeof *a);
	if (strncmp(text, "gm1act ", 7) != 0)
		return -1;
	if (!field(text, "pid", v, sizeof v) ||
	    gm_parse_uint(v, 10, INT32_MAX, &u))
		return -1;
	a->pid = (pid_t)u;
	if (!field(text, "lease", v, sizeof v) ||
	    gm_parse_uint(v, 10, UINT64_MAX, &a->lease_id))
		return -1;
	if (!field(text, "job", a->job, sizeof a->job) ||
	    !field(text, "state", a->state, sizeof a->state))
		return -1;
	if (field(text, "idle_since", v, sizeof v) &&
	    !gm_parse_uint(v, 10, INT64_MAX, &u))
		a->idle_since_ns = (int64_t)u;
	if (field(text, "since", v, sizeof v) &&
	    !gm_parse_uint(v, 10, INT64_MAX, &u))
		a->since_ns = (int64_t)u;
	if (field(text, "mem", v, sizeof v))
		(void)gm_parse_uint(v, 10, UINT64_MAX, &a->mem);
	if (!field(text, "why", a->why, sizeof a->why))
		snprintf(a->why, sizeof a->why, "-");
	{
		/* every index of a full machine fits; one cut off is no list */
		char dv[GM_MAX_DEVICES * 4 + 1], e[8];
		if (!field(text, "devs", dv, sizeof dv) ||
		    strlen(dv) == sizeof dv - 1 || strcmp(dv, "-") == 0 ||
		    gm_parse_devices("devs", dv, a->devices, &a->ndevices, e,
				     sizeof e))
			a->ndevices = 0;
	}
	return 0;
}

/* The act.* files of one user's directory (owned by that user). */
static int read_dir(int dirfd, uid_t owner, struct gm_activity **out, int *n,
		    int *cap)
{
	DIR *dir = gm__listdir(dirfd);
	struct dirent *de;

	if (!dir)
		return 0;
	while ((de = readdir(dir)) != NULL) {
		char buf[GM_ACT_LINE + 1];
		struct stat sb;
		ssize_t r;
		int fd;

		if (strncmp(de->d_name, "act.", 4) != 0)
			continue;
		fd = openat(dirfd, de->d_name,
			    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		r = (gm__fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
		     sb.st_uid == owner) ? pread(fd, buf, GM_ACT_LINE, 0) : -1;
		close(fd);
		if (r <= 0)
			continue;
		buf[r] = '\0';
		if (*n == *cap) {
			int nc = *cap ? *cap * 2 : 8;
			void *nv = realloc(*out, (size_t)nc * sizeof **out);
			if (!nv) {
				closedir(dir);
				return -ENOMEM;
			}
			*out = nv;
			*cap = nc;
		}
		if (parse(buf, &(*out)[*n]) == 0) {
			(*out)[*n].uid = owner;
			(*n)++;
		}
	}
	closedir(dir);
	return 0;
}

int gm_activity_read(const char *lock_dir, struct gm_activity **out, int *n,
		     char *err, size_t errlen)
{
	struct gm__dir d;
	struct dirent *de;
	DIR *dir;
	int rc, cap = 0;

	*out = NULL;
	*n = 0;
	rc = gm__dir_open(lock_dir, 0, &d, err, errlen);
	if (rc)
		return rc;
	dir = gm__listdir(d.job);
	while (rc == 0 && dir && (de = readdir(dir)) != NULL) {
		const char *end;
		uint64_t uid;
		struct stat sb;
		int fd;

		if (gm_scan_uint(de->d_name, 10, UINT32_MAX, &uid, &end) ||
		    (*end != '\0' && *end != '.'))
			continue;
		fd = openat(d.job, de->d_name,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (gm__fstat(fd, &sb) == 0 && sb.st_uid == (uid_t)uid &&
		    !(sb.st_mode & (S_IWGRP | S_IWOTH)))
			rc = read_dir(fd, (uid_t)uid, out, n, &cap);
		close(fd);
	}
	if (dir)
		closedir(dir);
	gm__dir_close(&d);
	return rc;
}
