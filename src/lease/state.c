/*
 * state.c - read the lock directory's state for `gpumutex status`.
 *
 * Only F_OFD_GETLK probes and plain reads: a reader never takes a lock, so
 * it can never delay a claimant, a joiner or a waiter, and it works for any
 * user who can read the directory.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static int open_sub(int root, const char *name)
{
	return openat(root, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static int cmp_dev(const void *x, const void *y)
{
	const struct gm_state_device *a = x, *b = y;
	return (a->index > b->index) - (a->index < b->index);
}

static int cmp_waiter(const void *x, const void *y)
{
	const struct gm_state_waiter *a = x, *b = y;
	return (a->ticket > b->ticket) - (a->ticket < b->ticket);
}

static void read_devices(const struct gm__dir *d, struct gm_state *st)
{
	DIR *dir = gm__listdir(d->dev);
	struct dirent *de;

	if (!dir)
		return;
	while ((de = readdir(dir)) != NULL && st->ndevices < GM_MAX_DEVICES) {
		uint64_t idx;
		int fd, who;

		if (gm_parse_uint(de->d_name, 10, GM_MAX_DEVICES - 1, &idx))
			continue;
		fd = openat(d->dev, de->d_name,
			    O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		who = gm__probe(fd, F_WRLCK, 0);
		close(fd);
		st->devices[st->ndevices].index = (int)idx;
		st->devices[st->ndevices].lease = -1;
		st->devices[st->ndevices].state =
			who == F_RDLCK ? GM_DEV_HELD :
			who == F_WRLCK ? GM_DEV_GRANTING : GM_DEV_FREE;
		st->ndevices++;
	}
	closedir(dir);
	qsort(st->devices, (size_t)st->ndevices, sizeof st->devices[0], cmp_dev);
}

static const char *field(const char *text, const char *key, char *out,
			 size_t outlen)
{
	char pat[32];
	const char *p;
	size_t len;

	snprintf(pat, sizeof pat, "\n%s=", key);
	p = strstr(text, pat);
	if (!p) {
		out[0] = '\0';
		return NULL;
	}
	p += strlen(pat);
	len = strcspn(p, "\n");
	if (len >= outlen)
		len = outlen - 1;
	memcpy(out, p, len);
	out[len] = '\0';
	return out;
}

static int parse_lease(const char *text, struct gm_state_lease *l)
{
	char v[GM_CMD_MAX];
	const char *p = text;
	uint64_t n, writer_ns = 0;
	const uint64_t here = gm__pidns();

	memset(l, 0, sizeof *l);
	if (gm__record_parse(text, &l->lease_id, l->devices, &l->ndevices))
		return -EINVAL;
	field(text, "job", l->job, sizeof l->job);
	if (field(text, "uid", v, sizeof v) &&
	    gm_parse_uint(v, 10, UINT32_MAX, &n) == 0)
		l->uid = (uid_t)n;
	if (field(text, "start", v, sizeof v) &&
	    gm_parse_uint(v, 10, INT64_MAX, &n) == 0)
		l->start_ns = (int64_t)n;
	field(text, "cmd", l->cmd, sizeof l->cmd);
	/* Records written before candidates= existed: the granted devices
	 * are all that is known to be managed by the job. */
	if (!field(text, "candidates", v, sizeof v) ||
	    gm_parse_devices("candidates", v, l->candidates, &l->ncandidates,
			     NULL, 0) != 0) {
		memcpy(l->candidates, l->devices, sizeof l->devices);
		l->ncandidates = l->ndevices;
	}
	/* PIDs of members in another PID namespace than ours (a container
	 * sharing the lock directory) would name other processes here:
	 * they are counted in nhidden instead. Records without namespaces
	 * (older versions) are taken as ours. */
	if (field(text, "pidns", v, sizeof v) &&
	    gm_parse_uint(v, 10, UINT64_MAX, &n) == 0)
		writer_ns = n;
	while ((p = strstr(p, "\nmember=")) != NULL) {
		pid_t pid = 0;
		uint64_t ns = writer_ns;
		const char *end = p;
		int dup = 0;

		p += 8;
		if (gm_scan_uint(p, 10, INT32_MAX, &n, &end) == 0)
			pid = (pid_t)n;
		if (strncmp(end, " ns=", 4) == 0)
			gm_scan_uint(end + 4, 10, UINT64_MAX, &ns, NULL);
		if (pid > 0 && ns && here && ns != here) {
			l->nhidden++;
			continue;
		}
		for (int i = 0; i < l->npids; i++)
			dup |= l->pids[i] == pid;
		if (!dup && pid > 0 &&
		    l->npids < (int)(sizeof l->pids / sizeof l->pids[0]))
			l->pids[l->npids++] = pid;
	}
	return 0;
}

/* The live leases among the records in `dirfd` owned by `owner`. */
/*
 * The next record name of user directory `dirfd`: from its listing, or,
 * with `held` (devices), only those its holder files name (held.<d>), so
 * that the cost does not depend on how many jobs the user has.
 */
/* The first line of regular file `name` (a holder file, lease.c): its
 * length, NUL-terminated in buf, or -1. Never blocks, never follows. */
static ssize_t read_small(int dirfd, const char *name, char *buf, size_t len)
{
	struct stat st;
	ssize_t n = -1;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
			O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (gm__fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	n = (ssize_t)strcspn(buf, "\n");
	buf[n] = '\0';
	return n;
}

static const char *next_record(DIR *dir, int dirfd, uint64_t *held,
			       char *buf, size_t len)
{
	struct dirent *de;

	if (held) {
		while (*held) {
			int dev = __builtin_ctzll(*held);
			char link[32];
			ssize_t n;

			*held &= *held - 1;
			snprintf(link, sizeof link, GM_HELD_FILE "%d", dev);
			n = read_small(dirfd, link, buf, len);
			if (n > 0 && !memchr(buf, '/', (size_t)n))
				return buf;
		}
		return NULL;
	}
	de = dir ? readdir(dir) : NULL;
	return de ? de->d_name : NULL;
}

static int read_records(const struct gm__dir *d, int dirfd, uid_t owner,
			uint64_t held, struct gm_state *st, int *cap)
{
	DIR *dir = held ? NULL : gm__listdir(dirfd);
	char link[GM_JOB_MAX + 16];
	const char *nm;

	if (!held && !dir)
		return 0;
	while ((nm = next_record(dir, dirfd, held ? &held : NULL, link,
				 sizeof link)) != NULL) {
		size_t len = strlen(nm);
		char *buf;
		struct gm_state_lease l;
		int bad, dup = 0;
		uid_t by;

		if (len <= 6 || strcmp(nm + len - 6, ".lease") != 0)
			continue;
		if (gm__read_record(dirfd, nm, &buf, &by) != 0)
			continue;
		if (owner != (uid_t)-1 && by != owner) {
			free(buf);
			continue;
		}
		bad = parse_lease(buf, &l);
		free(buf);
		for (int i = 0; !bad && i < st->nleases; i++)
			dup |= st->leases[i].lease_id == l.lease_id;
		if (bad || dup ||
		    gm__lease_alive(d, l.lease_id, l.devices, l.ndevices) != 1)
			continue;
		if (st->nleases == *cap) {
			int nc = *cap ? *cap * 2 : 16;
			void *nv = realloc(st->leases, (size_t)nc * sizeof l);
			if (!nv) {
				closedir(dir);
				return -ENOMEM;
			}
			st->leases = nv;
			*cap = nc;
		}
		st->leases[st->nleases++] = l;
	}
	if (dir)
		closedir(dir);
	return 0;
}

/* Records live in each user's directory, job/<uid> or job/<uid>.<hex>
 * (records.c); one whose owner is not the user its name says was made by
 * someone else and is not read. Records directly in job/ are those of an
 * older version, still read while its jobs run. */
/* The live leases: every record, or with `held` (devices) those that the
 * users' holder files name for these devices (older versions' flat
 * records, which have no links, are then not looked at). */
static int read_leases(const struct gm__dir *d, uint64_t held,
		       struct gm_state *st)
{
	DIR *dir = gm__listdir(d->job);
	struct dirent *de;
	int cap = 0;
	int rc = held ? 0 : read_records(d, d->job, (uid_t)-1, 0, st, &cap);

	if (!dir)
		return rc;
	while (rc == 0 && (de = readdir(dir)) != NULL) {
		const char *end;
		uint64_t uid;
		struct stat sb;
		int fd;

		if (gm_scan_uint(de->d_name, 10, UINT32_MAX, &uid, &end) ||
		    (*end != '\0' && *end != '.'))
			continue;
		fd = openat(d->job, de->d_name,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (gm__fstat(fd, &sb) == 0 && sb.st_uid == (uid_t)uid &&
		    !(sb.st_mode & (S_IWGRP | S_IWOTH)))
			rc = read_records(d, fd, (uid_t)uid, held, st, &cap);
		close(fd);
	}
	closedir(dir);
	return rc;
}

static int read_waiters(const struct gm__dir *d, struct gm_state *st)
{
	DIR *dir = gm__listdir(d->queue);
	struct dirent *de;
	int cap = 0;

	if (!dir)
		return 0;
	while ((de = readdir(dir)) != NULL) {
		struct gm_state_waiter w;
		unsigned uid;
		int pid, fd, live, have_sb;
		uint64_t mask;
		struct stat sb;

		memset(&w, 0, sizeof w);
		if (gm__ticket_parse(de->d_name, &w.ticket, &uid, &pid,
				     &w.want, &mask, w.job, sizeof w.job))
			continue;
		/* Only tickets the protocol made (queue.c): not a file of
		 * someone else's under such a name. */
		fd = gm__ticket_open(d->queue, de->d_name, uid, NULL, 0);
		if (fd < 0)
			continue;
		live = gm__probe(fd, F_WRLCK, 0) == F_WRLCK;
		have_sb = live && gm__fstat(fd, &sb) == 0;
		if (have_sb) {
			w.uid = sb.st_uid; /* the owner, not the name, says who */
			w.since_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 +
				     sb.st_ctim.tv_nsec;
		}
		close(fd);
		if (!live)
			continue;
		w.pid = (pid_t)pid;
		for (int i = 0; i < GM_MAX_DEVICES; i++)
			if (mask & (UINT64_C(1) << i))
				w.devices[w.ndevices++] = i;
		/* The name's PID is the waiter's in its own namespace: shown
		 * (with the command from /proc) only if it can be this one. */
		w.pid_hidden = !gm__pid_here(w.pid, w.uid, w.since_ns,
					      have_sb ? &sb : NULL);
		if (!w.pid_hidden)
			gm__cmdline(w.pid, w.cmd, sizeof w.cmd);
		if (st->nwaiters == cap) {
			int nc = cap ? cap * 2 : 16;
			void *nv = realloc(st->waiters, (size_t)nc * sizeof w);
			if (!nv) {
				closedir(dir);
				return -ENOMEM;
			}
			st->waiters = nv;
			cap = nc;
		}
		st->waiters[st->nwaiters++] = w;
	}
	closedir(dir);
	if (st->nwaiters > 1)
		qsort(st->waiters, (size_t)st->nwaiters, sizeof *st->waiters, cmp_waiter);
	return 0;
}

/* The pool `gpumutex init` declared (gm_lockdir_declare), if any. */
static void read_pool(const struct gm__dir *d, struct gm_state *st)
{
	char *buf, list[GM_MAX_DEVICES * 4];
	const char *p;
	size_t len;

	if (gm__read_record(d->root, GM_POOL_FILE, &buf, NULL) != 0)
		return;
	if (strncmp(buf, "gpumutex-pool 1\n", 16) != 0 ||
	    !(p = strstr(buf, "\ndevices="))) {
		free(buf);
		return;
	}
	p += 9;
	len = strcspn(p, "\n");
	if (len >= sizeof list) {
		free(buf);
		return;
	}
	memcpy(list, p, len);
	list[len] = '\0';
	free(buf);
	if (gm_parse_devices("devices", list, st->pool, &st->npool, NULL, 0))
		st->npool = 0;
}

static uint64_t mask_of(const int *v, int n)
{
	uint64_t m = 0;

	for (int i = 0; i < n; i++)
		m |= UINT64_C(1) << v[i];
	return m;
}

/* Keep in devices[] those someone manages now (see lease.h), move the
 * others' indices to unmanaged[]. */
static void split_managed(struct gm_state *st)
{
	uint64_t managed = mask_of(st->pool, st->npool);
	int n = 0;

	for (int i = 0; i < st->nleases; i++)
		managed |= mask_of(st->leases[i].candidates,
				   st->leases[i].ncandidates) |
			   mask_of(st->leases[i].devices, st->leases[i].ndevices);
	for (int i = 0; i < st->nwaiters; i++)
		managed |= mask_of(st->waiters[i].devices,
				   st->waiters[i].ndevices);
	for (int i = 0; i < st->ndevices; i++) {
		const struct gm_state_device *dev = &st->devices[i];

		if (dev->state != GM_DEV_FREE ||
		    (managed & (UINT64_C(1) << dev->index)))
			st->devices[n++] = *dev;
		else
			st->unmanaged[st->nunmanaged++] = dev->index;
	}
	st->ndevices = n;
}

/* all: everything; else only the leases holding devices `held`. */
static int state_read(const char *lock_dir, struct gm_state *st, int all,
		      uint64_t held, char *err, size_t errlen)
{
	struct gm__dir d = { -1, -1, -1, -1, -1, "" };
	int rc;

	memset(st, 0, sizeof *st);
	st->now_ns = gm__real_ns();
	d.root = open(lock_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (d.root < 0) {
		rc = -errno;
		if (rc == -ENOENT)
			return gm__fail(rc, err, errlen,
					"lock directory %s does not exist: no job has used gpumutex here yet",
					lock_dir);
		if (rc == -ELOOP)
			return gm__fail(rc, err, errlen,
					"%s is a symbolic link; gpumutex refuses to follow it",
					lock_dir);
		return gm__fail(rc, err, errlen, "cannot open %s: %s", lock_dir,
				strerror(-rc));
	}
	d.dev = open_sub(d.root, "dev");
	d.queue = open_sub(d.root, "queue");
	d.job = open_sub(d.root, "job");
	if (all)
		read_pool(&d, st);
	if (all && d.dev >= 0)
		read_devices(&d, st);
	rc = d.job >= 0 && d.dev >= 0 ? read_leases(&d, all ? 0 : held, st) :
		0;
	if (!rc && all && d.queue >= 0)
		rc = read_waiters(&d, st);
	gm__dir_close(&d);
	if (rc) {
		gm_state_free(st);
		return gm__fail(rc, err, errlen, "out of memory");
	}
	if (!all)
		return 0;
	split_managed(st);
	/* Map each held device to the live lease that names it. */
	for (int i = 0; i < st->ndevices; i++)
		for (int j = 0; j < st->nleases; j++)
			for (int k = 0; k < st->leases[j].ndevices; k++)
				if (st->leases[j].devices[k] == st->devices[i].index &&
				    st->devices[i].state == GM_DEV_HELD)
					st->devices[i].lease = j;
	return 0;
}

int gm_state_read(const char *lock_dir, struct gm_state *st, char *err,
		  size_t errlen)
{
	return state_read(lock_dir, st, 1, 0, err, errlen);
}

int gm_state_read_holders(const char *lock_dir, const int *devices,
			  int ndevices, struct gm_state *st, char *err,
			  size_t errlen)
{
	uint64_t held = 0;

	for (int i = 0; i < ndevices; i++)
		if (devices[i] >= 0 && devices[i] < GM_MAX_DEVICES)
			held |= UINT64_C(1) << devices[i];
	if (!held) {
		memset(st, 0, sizeof *st);
		return 0;
	}
	return state_read(lock_dir, st, 0, held, err, errlen);
}

void gm_state_free(struct gm_state *st)
{
	free(st->leases);
	free(st->waiters);
	st->leases = NULL;
	st->waiters = NULL;
	st->nleases = st->nwaiters = 0;
}
