/*
 * evlog.c - read every user's event log and rebuild leases and waits
 * (docs/report.md, "Ends" says how each lease's end is found).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "evlog.h"
#include "lease.h"

#define NS 1000000000LL

void gm_mask_list(uint64_t m, char *out, size_t len)
{
	int v[64], n = 0;

	for (int d = 0; d < 64; d++)
		if (m & (UINT64_C(1) << d))
			v[n++] = d;
	if (n == 0)
		snprintf(out, len, "-");
	else
		gm_format_list(out, len, v, n);
}

int gm_job_prefix(const char *want, const char *job)
{
	size_t n = strlen(want);

	/* The short form as shown ("3f9a0c1b22d..."): its prefix. */
	if (n > 3 && !strcmp(want + n - 3, "..."))
		n -= 3;
	return n > 0 && !strncmp(want, job, n);
}

void gm_user_name(unsigned uid, char *out, size_t len)
{
	struct passwd pw, *res = NULL;
	char buf[1024];

	if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
		snprintf(out, len, "%s", res->pw_name);
	else
		snprintf(out, len, "%u", uid);
}

long gm_cli_uid_of(const char *name)
{
	struct passwd pw, *res = NULL;
	char buf[1024];

	if (getpwnam_r(name, &pw, buf, sizeof buf, &res) == 0 && res)
		return (long)res->pw_uid;
	return -1;
}

void gm_clock(int64_t real_ns, char *out, size_t len, int with_date)
{
	time_t s = (time_t)(real_ns / NS);
	struct tm tm;

	localtime_r(&s, &tm);
	strftime(out, len, with_date ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S", &tm);
}

void gm_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

int gm_parse_since(const char *text, int64_t now, int64_t *real_ns)
{
	uint64_t n;
	const char *end;

	if (text[0] == '@')
		return gm_parse_uint(text + 1, 10, UINT64_C(1) << 40, &n) ? -EINVAL :
			(*real_ns = (int64_t)n * NS, 0);
	if (gm_scan_uint(text, 10, UINT64_C(1) << 32, &n, &end) == 0 &&
	    (!strcmp(end, "s") || !strcmp(end, "m") || !strcmp(end, "h") ||
	     !strcmp(end, "d"))) {
		int64_t unit = *end == 's' ? 1 : *end == 'm' ? 60 :
			*end == 'h' ? 3600 : 86400;
		*real_ns = now - (int64_t)n * unit * NS;
		return 0;
	}
	{
		struct tm tm;
		const char *r;
		memset(&tm, 0, sizeof tm);
		r = strptime(text, "%Y-%m-%d", &tm);
		if (r && *r)
			r = strptime(r, " %H:%M", &tm);
		if (r && *r == ':')
			r = strptime(r, ":%S", &tm);
		if (!r || *r)
			return -EINVAL;
		tm.tm_isdst = -1;
		*real_ns = (int64_t)mktime(&tm) * NS;
		return 0;
	}
}

/* ---- Parsing ------------------------------------------------------------ */

static uint64_t parse_mask(const char *v)
{
	uint64_t m = 0, n;
	const char *end;

	while (*v && gm_scan_uint(v, 10, 63, &n, &end) == 0) {
		m |= UINT64_C(1) << n;
		v = *end == ',' ? end + 1 : end;
		if (*end != ',')
			break;
	}
	return m;
}

static int64_t num(const char *v)
{
	uint64_t n;
	int neg = *v == '-';

	if (gm_parse_uint(v + neg, 10, INT64_MAX, &n))
		return 0;
	return neg ? -(int64_t)n : (int64_t)n;
}

/* The fields of a gputime record (docs/report.md, "GPU time"). */
static void gt_fields(struct gm_ev *e, const char *k, const char *v)
{
	static const char *const names[] = { "held", "busy", "gpubusy",
					     "kernel", "copy", "idlemax" };
	int64_t *slots[] = { &e->held, &e->busy, &e->gpubusy, &e->kernel,
			     &e->copy, &e->idlemax };

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(k, names[i]))
			*slots[i] = num(v);
	if (!strcmp(k, "final"))
		e->final = (int)num(v);
}

int gm_ev_parse(const char *line, struct gm_ev *e)
{
	static const struct { const char *n; enum gm_evkind k; } kinds[] = {
		{ "wait", EV_WAIT }, { "grant", EV_GRANT }, { "join", EV_JOIN },
		{ "giveup", EV_GIVEUP }, { "exit", EV_EXIT }, { "util", EV_UTIL },
		{ "suspend", EV_SUSPEND }, { "resume", EV_RESUME },
		{ "gputime", EV_GPUTIME },
	};
	char *copy, *p, *tok, *save = NULL;
	const char *cmd;
	int have_t = 0;

	memset(e, 0, sizeof *e);
	e->gpu = e->memutil = -1;
	if (strncmp(line, "gm1 ", 4) != 0)
		return -1;
	cmd = strstr(line, " cmd=");
	copy = strndup(line + 4, cmd ? (size_t)(cmd - line - 4) : strlen(line + 4));
	if (!copy)
		return -1;
	p = copy;
	tok = strtok_r(p, " ", &save);
	if (!tok) {
		free(copy);
		return -1;
	}
	snprintf(e->name, sizeof e->name, "%s", tok);
	e->kind = EV_OTHER;
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (!strcmp(tok, kinds[i].n))
			e->kind = kinds[i].k;
	while ((tok = strtok_r(NULL, " ", &save)) != NULL) {
		char *v = strchr(tok, '=');
		uint64_t x;
		if (!v)
			continue;
		*v++ = '\0';
		if (!strcmp(tok, "t"))
			e->t = num(v), have_t = 1;
		else if (!strcmp(tok, "mono"))
			e->mono = num(v);
		else if (!strcmp(tok, "uid"))
			e->uid = (unsigned)num(v);
		else if (!strcmp(tok, "pid"))
			e->pid = (int)num(v);
		else if (!strcmp(tok, "job"))
			snprintf(e->job, sizeof e->job, "%s", v);
		else if (!strcmp(tok, "lease") && gm_parse_uint(v, 16, UINT64_MAX, &x) == 0)
			e->lease = x;
		else if (!strcmp(tok, "ticket"))
			e->ticket = (uint64_t)num(v);
		else if (!strcmp(tok, "dev"))
			e->dev = parse_mask(v);
		else if (!strcmp(tok, "cand"))
			e->cand = parse_mask(v);
		else if (!strcmp(tok, "usable"))
			e->usable = parse_mask(v);
		else if (!strcmp(tok, "rang"))
			e->rang = parse_mask(v);
		else if (!strcmp(tok, "want"))
			e->want = (int)num(v);
		else if (!strcmp(tok, "place"))
			e->place = (int)num(v);
		else if (!strcmp(tok, "queued"))
			e->queued = (int)num(v);
		else if (!strcmp(tok, "ahead"))
			e->ahead = (int)num(v);
		else if (!strcmp(tok, "head"))
			e->head = (int)num(v);
		else if (!strcmp(tok, "errno"))
			e->err = (int)num(v);
		else if (!strcmp(tok, "arrived"))
			e->arrived = num(v);
		else if (!strcmp(tok, "waited"))
			e->waited = num(v);
		else if (!strcmp(tok, "woke"))
			e->woke = num(v);
		else if (!strcmp(tok, "why"))
			snprintf(e->why, sizeof e->why, "%s", v);
		else if (!strcmp(tok, "gpu"))
			e->gpu = (int)num(v);
		else if (!strcmp(tok, "memutil"))
			e->memutil = (int)num(v);
		else if (!strcmp(tok, "used"))
			e->used = (uint64_t)num(v);
		else if (!strcmp(tok, "total"))
			e->total = (uint64_t)num(v);
		else if (!strcmp(tok, "mem"))
			e->used = (uint64_t)num(v);
		else if (!strcmp(tok, "ckpt"))
			e->took = num(v);
		else if (!strcmp(tok, "idle") || !strcmp(tok, "suspended"))
			e->dur = num(v);
		else
			gt_fields(e, tok, v);
	}
	free(copy);
	if (!have_t || !e->mono)
		return -1;
	e->cmd = strdup(cmd ? cmd + 5 : "");
	return e->cmd ? 0 : -1;
}

/* ---- Reading ------------------------------------------------------------ */

static int add_ev(struct gm_log *log, int *cap, const struct gm_ev *e)
{
	if (log->nev == *cap) {
		int n = *cap ? *cap * 2 : 1024;
		struct gm_ev *v = realloc(log->ev, (size_t)n * sizeof *v);
		if (!v)
			return -ENOMEM;
		log->ev = v;
		*cap = n;
	}
	log->ev[log->nev++] = *e;
	return 0;
}

/* One log file of user `uid` in directory `dfd` (`dname` for messages). */
static int read_file(struct gm_log *log, int *cap, int dfd, const char *dname,
		     const char *name, unsigned uid, FILE *notes)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
			O_CLOEXEC | O_NOCTTY);
	struct stat st;
	FILE *f;
	char *line = NULL;
	size_t len = 0;
	ssize_t n;

	if (fd < 0) {
		if (errno == ELOOP && notes)
			fprintf(notes, "%s: job/%s/%s: a symbolic link, not a log file; refused, its records are left out\n",
				gm_cli_prog, dname, name);
		else if (errno != ENOENT && notes)
			fprintf(notes, "%s: job/%s/%s: cannot open it (%s); its records are left out\n",
				gm_cli_prog, dname, name, strerror(errno));
		if (errno != ENOENT)
			log->refused++;
		return 0;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid) {
		if (notes)
			fprintf(notes, "%s: job/%s/%s: not a regular file of user %u (%s, owner %u); refused, its records are left out\n",
				gm_cli_prog, dname, name, uid,
				S_ISFIFO(st.st_mode) ? "a FIFO" :
				S_ISDIR(st.st_mode) ? "a directory" :
				S_ISREG(st.st_mode) ? "a regular file" : "a special file",
				(unsigned)st.st_uid);
		log->refused++;
		close(fd);
		return 0;
	}
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	log->files++;
	while ((n = getline(&line, &len, f)) > 0) {
		struct gm_ev e;
		if (line[n - 1] != '\n')
			break; /* being written */
		line[n - 1] = '\0';
		/* The owner of the file, not the line, says whose it is. */
		if (gm_ev_parse(line, &e) != 0)
			continue;
		if (e.uid != uid) {
			free(e.cmd);
			continue;
		}
		if (add_ev(log, cap, &e)) {
			free(e.cmd);
			break;
		}
	}
	free(line);
	fclose(f);
	return 0;
}

static int by_time(const void *a, const void *b)
{
	const struct gm_ev *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->mono < y->mono ? -1 : x->mono > y->mono;
}

static int read_all(const char *lock_dir, FILE *notes, struct gm_log *log)
{
	char path[4200];
	DIR *dir;
	struct dirent *de;
	int cap = 0, jfd;

	snprintf(path, sizeof path, "%s/job", lock_dir);
	jfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (jfd < 0)
		return -errno;
	dir = fdopendir(dup(jfd));
	if (!dir) {
		close(jfd);
		return -errno;
	}
	while ((de = readdir(dir)) != NULL) {
		uint64_t uid;
		const char *end;
		struct stat sb;
		int fd;

		if (gm_scan_uint(de->d_name, 10, UINT32_MAX, &uid, &end) ||
		    (*end != '\0' && *end != '.'))
			continue;
		fd = openat(jfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			    O_CLOEXEC);
		if (fd < 0)
			continue;
		/* As gm_state_read believes a user's directory. */
		if (fstat(fd, &sb) == 0 && sb.st_uid == (uid_t)uid &&
		    !(sb.st_mode & (S_IWGRP | S_IWOTH))) {
			read_file(log, &cap, fd, de->d_name, "events.log.1",
				  (unsigned)uid, notes);
			read_file(log, &cap, fd, de->d_name, "events.log",
				  (unsigned)uid, notes);
		}
		close(fd);
	}
	closedir(dir);
	close(jfd);
	qsort(log->ev, (size_t)log->nev, sizeof *log->ev, by_time);
	return 0;
}

/* ---- Rebuilding --------------------------------------------------------- */

/* A record's monotonic time `m` in real time (the record's own offset). */
static int64_t real_of(const struct gm_ev *e, int64_t m)
{
	return m + (e->t - e->mono);
}

static int span_of(struct gm_log *log, uint64_t lease)
{
	for (int i = log->nspans - 1; i >= 0; i--)
		if (log->spans[i].lease == lease)
			return i;
	return -1;
}

static int is_live(const uint64_t *live, int nlive, uint64_t lease)
{
	for (int i = 0; i < nlive; i++)
		if (live[i] == lease)
			return 1;
	return 0;
}

static void rebuild(struct gm_log *log, const uint64_t *live, int nlive)
{
	int *grant_ev;
	int64_t *exit_t, *exit_m;

	log->spans = calloc((size_t)log->nev + 1, sizeof *log->spans);
	log->waits = calloc((size_t)log->nev + 1, sizeof *log->waits);
	grant_ev = calloc((size_t)log->nev + 1, sizeof *grant_ev);
	exit_t = calloc((size_t)log->nev + 1, sizeof *exit_t);
	exit_m = calloc((size_t)log->nev + 1, sizeof *exit_m);
	if (!log->spans || !log->waits || !grant_ev || !exit_t || !exit_m)
		goto out;
	/* Leases, from grants; members' joins and exits. */
	for (int i = 0; i < log->nev; i++) {
		const struct gm_ev *e = &log->ev[i];
		int s;

		if (e->kind == EV_GRANT && span_of(log, e->lease) < 0) {
			struct gm_span *p = &log->spans[log->nspans];
			p->lease = e->lease;
			p->uid = e->uid;
			p->pid = e->pid;
			snprintf(p->job, sizeof p->job, "%s", e->job);
			p->cmd = e->cmd;
			p->dev = e->dev;
			p->start = e->t;
			p->start_mono = e->mono;
			p->lower = e->t;
			p->waited = e->waited;
			p->queued = e->queued;
			p->place = e->place;
			p->members = 1;
			grant_ev[log->nspans++] = i;
		} else if ((e->kind == EV_JOIN || e->kind == EV_EXIT) &&
			   (s = span_of(log, e->lease)) >= 0) {
			struct gm_span *p = &log->spans[s];
			if (e->t > p->lower)
				p->lower = e->t;
			if (e->kind == EV_JOIN)
				p->members++;
			else if (e->t > exit_t[s])
				exit_t[s] = e->t, exit_m[s] = e->mono;
		}
	}
	/* Ends: the first exact evidence, else a bound (docs/report.md). */
	for (int s = 0; s < log->nspans; s++) {
		struct gm_span *p = &log->spans[s];
		int64_t woke = 0, wokem = 0, next = 0, nextm = 0;
		uint64_t seen = 0;

		/* The next holder of each of our devices. */
		for (int k = s + 1; k < log->nspans && seen != p->dev; k++) {
			const struct gm_span *q = &log->spans[k];
			const struct gm_ev *g = &log->ev[grant_ev[k]];
			if (!(q->dev & p->dev & ~seen))
				continue;
			seen |= q->dev & p->dev;
			if (!next)
				next = q->start, nextm = q->start_mono;
			/* The next holder of a device of ours slept on its
			 * doorbell until our last member had gone. */
			if ((g->rang & p->dev) && g->woke > p->start_mono &&
			    (!woke || real_of(g, g->woke) < woke)) {
				woke = real_of(g, g->woke);
				wokem = g->woke;
				log->spans[k].handoff = 1;
			}
		}
		if (is_live(live, nlive, p->lease)) {
			p->end = log->now;
			p->end_mono = 0;
			p->how = "live";
		} else if (woke) {
			p->end = woke, p->end_mono = wokem;
			p->how = "woken";
			p->exact = 1;
		} else if (exit_t[s]) {
			p->end = exit_t[s], p->end_mono = exit_m[s];
			p->how = "exit";
			p->exact = 1;
		} else if (next) {
			p->end = next, p->end_mono = nextm;
			p->how = "next-grant";
		} else {
			p->end = p->lower;
			p->end_mono = p->start_mono + (p->lower - p->start);
			p->how = "last-seen";
		}
		if (p->end < p->start)
			p->end = p->start;
	}
	/* Waits: claims that queued (wait records) or gave up. */
	for (int i = 0; i < log->nev; i++) {
		const struct gm_ev *e = &log->ev[i];
		struct gm_wait *w;

		if (e->kind != EV_WAIT && e->kind != EV_GIVEUP &&
		    !(e->kind == EV_GRANT && e->queued))
			continue;
		w = NULL;
		for (int k = log->nwaits - 1; k >= 0; k--)
			if (log->waits[k].ticket == e->ticket &&
			    log->waits[k].uid == e->uid &&
			    log->waits[k].pid == e->pid) {
				w = &log->waits[k];
				break;
			}
		if (!w) {
			w = &log->waits[log->nwaits++];
			w->uid = e->uid;
			w->pid = e->pid;
			snprintf(w->job, sizeof w->job, "%s", e->job);
			w->cmd = e->cmd;
			w->cand = e->cand;
			w->want = e->want;
			w->ticket = e->ticket;
			w->start = real_of(e, e->arrived);
			w->outcome = "waiting";
		}
		if (e->kind == EV_WAIT) {
			w->place = e->ahead;
			continue;
		}
		w->end = e->t;
		w->outcome = e->kind == EV_GRANT ? "granted" :
			!strcmp(e->why, "timeout") ? "timeout" : "error";
		if (e->kind == EV_GRANT)
			w->place = e->place;
	}
	/* A wait with no end whose process is not waiting now died: its
	 * end is not known; it is counted to the last record of its user's
	 * log after it (a bound), else not at all. */
	for (int k = 0; k < log->nwaits; k++) {
		struct gm_wait *w = &log->waits[k];
		if (strcmp(w->outcome, "waiting") != 0)
			continue;
		if (kill(w->pid, 0) == 0 || errno == EPERM)
			continue; /* still there (or a reused pid: said as waiting) */
		w->outcome = "died";
		w->end = w->start;
	}
out:
	free(grant_ev);
	free(exit_t);
	free(exit_m);
}

int gm_log_read(const char *lock_dir, const uint64_t *live, int nlive,
		FILE *notes, struct gm_log *log)
{
	struct timespec ts;
	int rc;

	memset(log, 0, sizeof *log);
	clock_gettime(CLOCK_REALTIME, &ts);
	log->now = (int64_t)ts.tv_sec * NS + ts.tv_nsec;
	rc = read_all(lock_dir, notes, log);
	if (rc)
		return rc;
	rebuild(log, live, nlive);
	return 0;
}

void gm_log_free(struct gm_log *log)
{
	for (int i = 0; i < log->nev; i++)
		free(log->ev[i].cmd);
	free(log->ev);
	free(log->spans);
	free(log->waits);
	memset(log, 0, sizeof *log);
}
