/*
 * cmd_calibrate.c - `gpu-offload calibrate`: measure this machine and
 * write the machine profile (src/offload/profile.h).
 *
 * Runs the calibration workload (gpu-offload-calib) under the library
 * twice, every call forced to the CPU and then to the GPU, each pass
 * traced into a directory of its own, and fits from the two traces:
 *   - per operation and precision, a speed curve per device: one point
 *     per problem size, work / the lower quartile of its call times
 *     (on the GPU, of the call time less its copy times);
 *   - each copy direction: fixed + bytes / bandwidth, a least-squares
 *     line over the GPU calls' (bytes, copy time);
 *   - the GPU start-up cost: the trace's gpu-start event.
 * In this part the GPU is the test backend (libgpuoffload-test.so next
 * to the command, or --backend PATH); the CUDA backend of part 2 is
 * measured the same way.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "lease.h"
#include "policy.h"
#include "profile.h"
#include "trace.h"

struct gpo__pt {
	char op[17], prec;
	double flops;
	double *t;
	int n, cap;
};

struct gpo__fit {
	struct gpo__pt *pts;
	int n;
	double sx[2], sy[2], sxx[2], sxy[2], cnt[2]; /* copies in, out */
	double startup;
};

static int gpo__add(struct gpo__fit *f, const struct gpo_trace_rec *r,
		    double t)
{
	struct gpo__pt *p = NULL;

	for (int i = 0; i < f->n && !p; i++)
		if (f->pts[i].prec == r->prec && f->pts[i].flops == r->flops &&
		    strncmp(f->pts[i].op, r->opname, 16) == 0)
			p = &f->pts[i];
	if (!p) {
		struct gpo__pt *g = realloc(f->pts, (size_t)(f->n + 1) * sizeof *g);
		if (!g)
			return -1;
		f->pts = g;
		p = &f->pts[f->n++];
		memset(p, 0, sizeof *p);
		memcpy(p->op, r->opname, 16);
		p->prec = r->prec;
		p->flops = r->flops;
	}
	if (p->n == p->cap) {
		double *g = realloc(p->t, (size_t)(p->cap * 2 + 8) * sizeof *g);
		if (!g)
			return -1;
		p->t = g;
		p->cap = p->cap * 2 + 8;
	}
	p->t[p->n++] = t;
	return 0;
}

static void gpo__line(struct gpo__fit *f, int dir, double x, double y)
{
	f->sx[dir] += x;
	f->sy[dir] += y;
	f->sxx[dir] += x * x;
	f->sxy[dir] += x * y;
	f->cnt[dir] += 1;
}

/* Every record of the pass's traces in `dir` that ran on `device`. */
static int gpo__read(const char *dir, int device, struct gpo__fit *f)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		struct gpo_trace_header h;
		struct gpo_trace_rec r;
		FILE *fp;
		int fd;
		if (strncmp(e->d_name, "gpo-", 4) != 0)
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || !(fp = fdopen(fd, "rb"))) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (fread(&h, sizeof h, 1, fp) == 1 &&
		    memcmp(h.magic, GPO_TRACE_MAGIC, 8) == 0 &&
		    h.rec_size == GPO_TRACE_REC_SIZE) {
			while (fread(&r, sizeof r, 1, fp) == 1) {
				double t = r.dur_ns / 1e9;
				if (r.kind == GPO_TK_GPU_START &&
				    (f->startup <= 0 || t < f->startup))
					f->startup = t;
				if (r.kind != GPO_TK_CALL || r.device != device ||
				    !(r.flops > 0) || r.fail)
					continue;
				if (device == GPO_GPU) {
					t -= r.copy_in_s + r.copy_out_s;
					if (r.bytes_in > 0)
						gpo__line(f, 0, r.bytes_in, r.copy_in_s);
					if (r.bytes_out > 0)
						gpo__line(f, 1, r.bytes_out, r.copy_out_s);
				}
				if (t > 0 && gpo__add(f, &r, t) == 0)
					found++;
			}
		}
		fclose(fp);
	}
	closedir(d);
	return found;
}

static int gpo__cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int gpo__cmp_pt(const void *a, const void *b)
{
	const struct gpo__pt *x = a, *y = b;
	int c = strcmp(x->op, y->op);
	if (!c)
		c = x->prec - y->prec;
	if (!c)
		c = (x->flops > y->flops) - (x->flops < y->flops);
	return c;
}

/* The pass's points as curves of `p`, device `dev`. */
static int gpo__curves(struct gpo__fit *f, char dev, struct gpo_profile *p)
{
	qsort(f->pts, (size_t)f->n, sizeof *f->pts, gpo__cmp_pt);
	for (int i = 0; i < f->n;) {
		struct gpo_curve c;
		int j = i;
		struct gpo_curve *g;
		memset(&c, 0, sizeof c);
		c.dev = dev;
		c.prec = f->pts[i].prec;
		memcpy(c.op, f->pts[i].op, sizeof c.op - 1);
		for (; j < f->n && f->pts[j].prec == c.prec &&
		       strcmp(f->pts[j].op, c.op) == 0; j++) {
			struct gpo__pt *pt = &f->pts[j];
			double q;
			if (c.n == GPO_CURVE_MAX)
				continue;
			qsort(pt->t, (size_t)pt->n, sizeof *pt->t, gpo__cmp);
			q = pt->t[pt->n / 4]; /* the lower quartile */
			c.work[c.n] = pt->flops;
			c.speed[c.n++] = pt->flops / q;
		}
		i = j;
		g = realloc(p->curves, (size_t)(p->ncurves + 1) * sizeof *g);
		if (!g)
			return -1;
		p->curves = g;
		p->curves[p->ncurves++] = c;
	}
	return 0;
}

static void gpo__copy(const struct gpo__fit *f, int dir, double *fixed,
		      double *bw)
{
	double n = f->cnt[dir], den = n * f->sxx[dir] - f->sx[dir] * f->sx[dir];
	double slope = den > 0 ? (n * f->sxy[dir] - f->sx[dir] * f->sy[dir]) / den : 0;
	double icpt = n > 0 ? (f->sy[dir] - slope * f->sx[dir]) / n : 0;

	*fixed = icpt > 0 ? icpt : 0;
	/* A copy that costs nothing per byte (or too few points to tell):
	 * a bandwidth no bus has, so copies cost only their fixed part. */
	*bw = slope > 0 ? 1 / slope : 1e15;
}

static int gpo__pass(const char *lib, const char *calib, const char *backend,
		     const char *force, const char *dir, const char *max,
		     const char *reps)
{
	pid_t pid;
	int st;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		const char *old = getenv("LD_PRELOAD");
		char pre[2 * PATH_MAX + 2];
		snprintf(pre, sizeof pre, "%s%s%s", lib, old && *old ? ":" : "",
			 old && *old ? old : "");
		setenv("LD_PRELOAD", pre, 1);
		setenv("GPU_OFFLOAD_FORCE", force, 1);
		setenv("GPU_OFFLOAD_TRACE", dir, 1);
		setenv("GPU_OFFLOAD_PROFILE", "none", 1);
		/* every size measured, below the small-call threshold too */
		setenv("GPU_OFFLOAD_MIN_FLOPS", "1", 1);
		setenv("GPU_OFFLOAD_BACKEND", backend, 1);
		unsetenv("GPU_OFFLOAD_VERIFY");
		execl(calib, calib, max, reps, (char *)NULL);
		fprintf(stderr, GPO_PROG ": cannot run %s: %s\n", calib, strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void gpo__rmtree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	rmdir(dir);
}

int gpo_cmd_calibrate(int argc, char **argv)
{
	char lib[PATH_MAX], calib[PATH_MAX], backend[PATH_MAX], out[PATH_MAX];
	char tmp[] = "/tmp/gpu-offload-calib.XXXXXX", dc[PATH_MAX], dg[PATH_MAX];
	char tmpout[PATH_MAX + 8];
	const char *max = "256", *reps = "4", *output = NULL, *be = NULL;
	struct gpo__fit fc, fg;
	struct gpo_profile p;
	char *text;
	size_t n;
	FILE *f;
	int rc = 1;

	for (int i = 1; i < argc; i++) {
		const char *v;
		uint64_t x;
		if ((v = gpo_cli_opt(argc, argv, &i, "--output")))
			output = v;
		else if ((v = gpo_cli_opt(argc, argv, &i, "--backend")))
			be = v;
		else if ((v = gpo_cli_opt(argc, argv, &i, "--max-size"))) {
			if (gm_parse_uint(v, 10, 65536, &x) || x < 64) {
				fprintf(stderr, GPO_PROG ": --max-size takes 64 to 65536\n");
				return 2;
			}
			max = v;
		} else if ((v = gpo_cli_opt(argc, argv, &i, "--reps"))) {
			if (gm_parse_uint(v, 10, 1000, &x) || x < 1) {
				fprintf(stderr, GPO_PROG ": --reps takes 1 to 1000\n");
				return 2;
			}
			reps = v;
		} else {
			fprintf(stderr, "usage: " GPO_PROG " calibrate [--output PATH] [--backend PATH] [--max-size N] [--reps N]\n");
			return 2;
		}
	}
	if (gpo_cli_beside("GPU_OFFLOAD_LIBRARY", "libgpuoffload.so", lib, sizeof lib) ||
	    gpo_cli_beside(NULL, "gpu-offload-calib", calib, sizeof calib))
		return 1;
	if (be) {
		if (gpo_cli_abs(be, backend, sizeof backend))
			return 2;
	} else if (gpo_cli_beside("GPU_OFFLOAD_BACKEND", "libgpuoffload-test.so",
				  backend, sizeof backend)) {
		return 1;
	}
	if (output) {
		if (gpo_cli_abs(output, out, sizeof out))
			return 2;
	} else if (gpo_profile_path(out, sizeof out)) {
		fprintf(stderr, GPO_PROG ": where to write the profile? give --output PATH\n");
		return 2;
	}
	if (!mkdtemp(tmp)) {
		fprintf(stderr, GPO_PROG ": cannot make a directory in /tmp: %s\n", strerror(errno));
		return 1;
	}
	snprintf(dc, sizeof dc, "%s/cpu", tmp);
	snprintf(dg, sizeof dg, "%s/gpu", tmp);
	memset(&fc, 0, sizeof fc);
	memset(&fg, 0, sizeof fg);
	memset(&p, 0, sizeof p);
	fprintf(stderr, GPO_PROG ": calibrating with %s (sizes up to %s, %s repetitions)\n", backend, max, reps);
	if (gpo__pass(lib, calib, backend, "cpu", dc, max, reps) ||
	    gpo__pass(lib, calib, backend, "gpu", dg, max, reps)) {
		fprintf(stderr, GPO_PROG ": the calibration workload failed\n");
		goto out;
	}
	if (gpo__read(dc, GPO_CPU, &fc) <= 0 || gpo__read(dg, GPO_GPU, &fg) <= 0) {
		fprintf(stderr, GPO_PROG ": the traces hold no %s calls (is the GPU leased by another job, or the backend missing?)\n",
			fc.n ? "GPU" : "CPU");
		goto out;
	}
	{
		const char *slash = strrchr(backend, '/');
		snprintf(p.source, sizeof p.source, "calibrate %.40s",
			 slash ? slash + 1 : backend);
	}
	p.startup_s = fg.startup > 0 ? fg.startup : 0;
	gpo__copy(&fg, 0, &p.h2d_fixed, &p.h2d_bw);
	gpo__copy(&fg, 1, &p.d2h_fixed, &p.d2h_bw);
	if (gpo__curves(&fc, 'c', &p) || gpo__curves(&fg, 'g', &p))
		goto out;
	n = gpo_profile_format(&p, NULL, 0);
	text = malloc(n + 1);
	if (!text)
		goto out;
	gpo_profile_format(&p, text, n + 1);
	{
		/* mkdir -p of the profile's directory */
		char d[PATH_MAX];
		snprintf(d, sizeof d, "%s", out);
		for (char *s = d + 1; *s; s++)
			if (*s == '/') {
				*s = '\0';
				mkdir(d, 0755);
				*s = '/';
			}
	}
	snprintf(tmpout, sizeof tmpout, "%s.tmp", out);
	f = fopen(tmpout, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmpout, out) != 0) {
		fprintf(stderr, GPO_PROG ": cannot write %s: %s\n", out, strerror(errno));
		free(text);
		goto out;
	}
	free(text);
	printf("%s\n", out);
	rc = 0;
out:
	for (int i = 0; i < fc.n; i++)
		free(fc.pts[i].t);
	for (int i = 0; i < fg.n; i++)
		free(fg.pts[i].t);
	free(fc.pts);
	free(fg.pts);
	gpo_profile_free(&p);
	gpo__rmtree(dc);
	gpo__rmtree(dg);
	rmdir(tmp);
	return rc;
}
