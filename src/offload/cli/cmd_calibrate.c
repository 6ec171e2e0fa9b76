/*
 * cmd_calibrate.c - `gpu-offload calibrate`: measure this machine and
 * write the machine profile (src/offload/profile.h; docs/offload.md,
 * "Calibration").
 *
 * Runs the calibration workload (gpu-offload-calib) under the library
 * twice, every call forced to the CPU and then to the GPU, each pass
 * traced into a directory of its own with the workload's log beside it,
 * and fits from the two (calib-fit.c):
 *   - per operation and precision, a speed curve per device: one point
 *     per problem size, work / the lower quartile of its call times
 *     (on the GPU, of the call time less its copy times), from the calls
 *     of each point's accepted measurement whose info was 0 and, on the
 *     GPU, that the GPU ran without failing;
 *   - each copy direction: fixed + bytes / bandwidth, a least-squares
 *     line over the GPU calls' (bytes, copy time);
 *   - the GPU start-up cost: the trace's gpu-start event.
 * The CPU library is the one programs use: numpy's bundled OpenBLAS when
 * the `python3` here has a numpy wheel (--cpu-library says otherwise);
 * else the system's libblas.so.3 and liblapack.so.3. The GPU is the
 * CUDA backend next to the command (--backend another one).
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
#include <time.h>
#include <unistd.h>

#include "calib.h"
#include "cli.h"
#include "lease.h"
#include "policy.h"
#include "profile.h"

static double gpo__now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * numpy's bundled BLAS (numpy.libs/libscipy_openblas*.so of a wheel, or
 * numpy/.libs of older ones), asked of $GPU_OFFLOAD_PYTHON or python3:
 * the library numpy programs here run on. 0 with its path, or -1 (no
 * python3, no numpy, or a numpy on the system's BLAS).
 */
static int gpo__numpy_blas(char *out, size_t len)
{
	const char *py = getenv("GPU_OFFLOAD_PYTHON");
	static const char script[] =
		"import glob, os, numpy\n"
		"d = os.path.dirname(numpy.__file__)\n"
		"c = sorted(glob.glob(os.path.join(d + '.libs', 'lib*openblas*.so*')) +\n"
		"           glob.glob(os.path.join(d, '.libs', 'lib*openblas*.so*')))\n"
		"print(c[0] if c else '')\n";
	int p[2], st;
	pid_t pid;
	size_t got = 0;

	if (pipe2(p, O_CLOEXEC) != 0)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(p[1], 1);
		if (null >= 0)
			dup2(null, 2);
		unsetenv("LD_PRELOAD");
		execlp(py && *py ? py : "python3", "python3", "-c", script,
		       (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		ssize_t n = read(p[0], out + got, len - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (got += (size_t)n) >= len - 1)
			break;
	}
	close(p[0]);
	out[got] = '\0';
	out[strcspn(out, "\n")] = '\0';
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 && out[0] == '/' ? 0 : -1;
}

struct gpo__opts {
	const char *lib, *calib, *backend, *cpulibs, *ops;
	long max, reps;
	double cap, budget;
	int thorough;
};

/* One pass: the workload under the library, forced to `force`, traced
 * into dir/trace, its log in dir/log. 0 or -1. */
static int gpo__pass(const struct gpo__opts *o, const char *force,
		     const char *dir, const char *plan, double deadline)
{
	char tr[PATH_MAX], log[PATH_MAX], a[4][32];
	pid_t pid;
	int st;

	snprintf(tr, sizeof tr, "%s/trace", dir);
	snprintf(log, sizeof log, "%s/log", dir);
	if ((mkdir(dir, 0700) != 0 && errno != EEXIST) ||
	    (mkdir(tr, 0700) != 0 && errno != EEXIST))
		return -1;
	snprintf(a[0], sizeof a[0], "%ld", o->max);
	snprintf(a[1], sizeof a[1], "%ld", o->reps);
	snprintf(a[2], sizeof a[2], "%ld", (long)(o->cap * 1000 + 0.5));
	snprintf(a[3], sizeof a[3], "%ld", (long)(deadline + 1));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		const char *old = getenv("LD_PRELOAD");
		char pre[2 * PATH_MAX + 2];
		snprintf(pre, sizeof pre, "%s%s%s", o->lib, old && *old ? ":" : "",
			 old && *old ? old : "");
		setenv("LD_PRELOAD", pre, 1);
		setenv("GPU_OFFLOAD_FORCE", force, 1);
		setenv("GPU_OFFLOAD_TRACE", tr, 1);
		setenv("GPU_OFFLOAD_PROFILE", "none", 1);
		/* every size measured, below the small-call threshold too */
		setenv("GPU_OFFLOAD_MIN_FLOPS", "1", 1);
		setenv("GPU_OFFLOAD_BACKEND", o->backend, 1);
		setenv("GPO_CALIB_LIBS", o->cpulibs, 1);
		setenv("GPO_CALIB_LOG", log, 1);
		if (o->ops)
			setenv("GPO_CALIB_OPS", o->ops, 1);
		if (plan)
			setenv("GPO_CALIB_PLAN", plan, 1);
		unsetenv("GPU_OFFLOAD_VERIFY");
		execl(o->calib, o->calib, a[0], a[1], a[2], a[3], (char *)NULL);
		fprintf(stderr, GPO_PROG ": cannot run %s: %s\n", o->calib, strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void gpo__rmtree(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char sub[PATH_MAX];
		if (e->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
		if (unlink(sub) != 0 && depth < 3)
			gpo__rmtree(sub, depth + 1);
	}
	closedir(d);
	rmdir(dir);
}

/* The CPU pass's largest size per curve, "dgemm=8192,...", for the GPU
 * pass, which measures the same points. */
static char *gpo__plan(const struct gpo_clog *l)
{
	size_t len = 1, used = 0;
	char *s;

	for (int i = 0; i < l->npts; i++)
		len += strlen(l->pts[i].name) + 16;
	s = malloc(len);
	if (!s)
		return NULL;
	s[0] = '\0';
	for (int i = 0; i < l->npts; i++) {
		int last = 1;
		for (int j = i + 1; j < l->npts; j++)
			if (strcmp(l->pts[j].name, l->pts[i].name) == 0)
				last = 0;
		if (last)
			used += (size_t)snprintf(s + used, len - used, "%s%s=%d",
						 used ? "," : "", l->pts[i].name,
						 l->pts[i].n);
	}
	return s;
}

/* What a pass's log says: repeated points, noisy ones, the budget. */
static int gpo__report(const char *pass, const struct gpo_clog *l,
		       const struct gpo_cstats *st, double secs, int *rep)
{
	int repeated = 0, noisy = 0;

	for (int i = 0; i < l->npts; i++) {
		repeated += l->pts[i].attempts > 1;
		noisy += !l->pts[i].clean;
	}
	fprintf(stderr, GPO_PROG ": %s pass: %.0f s, %d points, %d measured again after a slow canary%s",
		pass, secs, l->npts, repeated, repeated ? ":" : "");
	for (int i = 0, k = 0; i < l->npts && k < 12; i++)
		if (l->pts[i].attempts > 1) {
			fprintf(stderr, " %s %d", l->pts[i].name, l->pts[i].n);
			if (++k == 12 && repeated > 12)
				fprintf(stderr, " ...");
		}
	fprintf(stderr, "; %d calls used, %d left out (info != 0: %d, GPU failed or declined: %d)\n",
		st->used, st->info + st->gpu_failed, st->info, st->gpu_failed);
	if (noisy)
		fprintf(stderr, GPO_PROG ": %s pass: %d points kept although the canary was still slow after the last try\n",
			pass, noisy);
	if (l->budget[0])
		fprintf(stderr, GPO_PROG ": %s pass: the time budget left these sizes and larger unmeasured: %s\n",
			pass, l->budget);
	if (l->missing[0])
		fprintf(stderr, GPO_PROG ": the CPU library lacks %s\n", l->missing);
	/* Where the pass's time went: what a faster calibration must cut. */
	fprintf(stderr, GPO_PROG ": %s pass: %.1f s in the measured calls, %.1f s making matrices, %.1f s in canaries, repeats and queries; the costliest point %s (%.1f s)\n",
		pass, l->calls_s, l->prep_s, l->other_s,
		l->worst[0] ? l->worst : "-", l->worst_s);
	if (l->smooth[0])
		fprintf(stderr, GPO_PROG ": %s pass: curves smooth enough to stop before these sizes: %s\n",
			pass, l->smooth);
	*rep += repeated;
	return 0;
}

/* The fit's predicted-vs-measured error (gpo_cfit_error), one line. */
static void gpo__error(const char *pass, const struct gpo_cfit *f)
{
	double med, p90, max;
	char worst[64];
	int n = gpo_cfit_error(f, &med, &p90, &max, worst, sizeof worst);

	fprintf(stderr, GPO_PROG ": %s fit, predicted vs measured (each point from its neighbours, as the model interpolates): median %.1f%%, 90th percentile %.1f%%, worst %.1f%% (%s), %d points\n",
		pass, med * 100, p90 * 100, max * 100, worst[0] ? worst : "-", n);
}

static int gpo__options(int argc, char **argv, struct gpo__opts *o,
			const char **output, const char **be)
{
	for (int i = 1; i < argc; i++) {
		const char *v;
		uint64_t x;
		if (gpo_cli_is_help(argv[i])) {
			gpo_cli_usage("calibrate", stdout);
			return -1;
		}
		if (strcmp(argv[i], "--thorough") == 0)
			o->thorough = 1;
		else if ((v = gpo_cli_opt(argc, argv, &i, "--output")))
			*output = v;
		else if ((v = gpo_cli_opt(argc, argv, &i, "--backend")))
			*be = v;
		else if ((v = gpo_cli_opt(argc, argv, &i, "--cpu-library")))
			o->cpulibs = v;
		else if ((v = gpo_cli_opt(argc, argv, &i, "--ops")))
			o->ops = v;
		else if ((v = gpo_cli_opt(argc, argv, &i, "--max-size"))) {
			if (gm_parse_uint(v, 10, 65536, &x) || x < 64) {
				fprintf(stderr, GPO_PROG ": --max-size takes 64 to 65536\n");
				return 2;
			}
			o->max = (long)x;
		} else if ((v = gpo_cli_opt(argc, argv, &i, "--reps"))) {
			if (gm_parse_uint(v, 10, 64, &x) || x < 1) {
				fprintf(stderr, GPO_PROG ": --reps takes 1 to 64\n");
				return 2;
			}
			o->reps = (long)x;
		} else if ((v = gpo_cli_opt(argc, argv, &i, "--budget"))) {
			if (gm_parse_uint(v, 10, 86400, &x) || x < 1) {
				fprintf(stderr, GPO_PROG ": --budget takes 1 to 86400 seconds\n");
				return 2;
			}
			o->budget = (double)x;
		} else {
			return gpo_cli_unknown("calibrate", argv[i]);
		}
	}
	return 0;
}

/* Write `p` to `out` (its directory made), through a rename. 0 or -1. */
static int gpo__write(const struct gpo_profile *p, const char *out)
{
	char tmpout[PATH_MAX + 8], d[PATH_MAX];
	size_t n = gpo_profile_format(p, NULL, 0);
	char *text = malloc(n + 1);
	FILE *f;
	int rc = 0;

	if (!text)
		return -1;
	gpo_profile_format(p, text, n + 1);
	snprintf(d, sizeof d, "%s", out);
	for (char *s = d + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			mkdir(d, 0755);
			*s = '/';
		}
	snprintf(tmpout, sizeof tmpout, "%s.tmp", out);
	f = fopen(tmpout, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmpout, out) != 0) {
		fprintf(stderr, GPO_PROG ": cannot write %s: %s\n", out, strerror(errno));
		rc = -1;
	}
	free(text);
	return rc;
}

int gpo_cmd_calibrate(int argc, char **argv)
{
	char lib[PATH_MAX], calib[PATH_MAX], backend[PATH_MAX], out[PATH_MAX];
	char tmp[] = "/tmp/gpu-offload-calib.XXXXXX", dc[PATH_MAX], dg[PATH_MAX];
	char npy[PATH_MAX], log[PATH_MAX + 8];
	struct gpo__opts o = { NULL, NULL, NULL, NULL, NULL, 8192, 4, 0, 300, 0 };
	const char *output = NULL, *be = NULL;
	struct gpo_clog lc, lg;
	struct gpo_cstats sc, sg;
	struct gpo_cfit *fc = gpo_cfit_new(), *fg = gpo_cfit_new();
	struct gpo_profile p;
	char *plan = NULL;
	double t0, t1, t2;
	int rc = 1, repeated = 0;

	memset(&lc, 0, sizeof lc);
	memset(&lg, 0, sizeof lg);
	memset(&sc, 0, sizeof sc);
	memset(&sg, 0, sizeof sg);
	memset(&p, 0, sizeof p);
	if (!fc || !fg)
		goto early;
	if ((rc = gpo__options(argc, argv, &o, &output, &be)) != 0) {
		if (rc < 0)     /* --help */
			rc = 0;
		goto early;
	}
	rc = 1;
	/* A call above this stops its curve growing: the biggest sizes of
	 * the slow operations would take the budget alone. */
	o.cap = o.budget / 300;
	if (gpo_cli_beside("GPU_OFFLOAD_LIBRARY", "libgpuoffload.so", lib, sizeof lib) ||
	    gpo_cli_beside(NULL, "gpu-offload-calib", calib, sizeof calib))
		goto early;
	if (be) {
		if (gpo_cli_abs(be, backend, sizeof backend)) {
			rc = 2;
			goto early;
		}
	} else if (gpo_cli_beside("GPU_OFFLOAD_BACKEND", "libgpuoffload-cuda.so",
				  backend, sizeof backend)) {
		goto early;
	}
	if (access(backend, R_OK) != 0) {
		fprintf(stderr, GPO_PROG ": no GPU backend at %s (--backend PATH names one)\n", backend);
		rc = be ? 2 : 1;
		goto early;
	}
	if (!o.cpulibs || strcmp(o.cpulibs, "numpy") == 0) {
		if (gpo__numpy_blas(npy, sizeof npy) == 0)
			o.cpulibs = npy;
		else if (o.cpulibs) {
			fprintf(stderr, GPO_PROG ": --cpu-library numpy: no numpy with a bundled OpenBLAS found by %s\n",
				getenv("GPU_OFFLOAD_PYTHON") ? getenv("GPU_OFFLOAD_PYTHON") : "python3");
			rc = 2;
			goto early;
		}
	}
	if (!o.cpulibs || strcmp(o.cpulibs, "system") == 0)
		o.cpulibs = "libblas.so.3:liblapack.so.3";
	o.lib = lib;
	o.calib = calib;
	o.backend = backend;
	if (output) {
		if (gpo_cli_abs(output, out, sizeof out)) {
			rc = 2;
			goto early;
		}
	} else if (gpo_profile_path(out, sizeof out)) {
		fprintf(stderr, GPO_PROG ": where to write the profile? give --output PATH\n");
		rc = 2;
		goto early;
	}
	if (!mkdtemp(tmp)) {
		fprintf(stderr, GPO_PROG ": cannot make a directory in /tmp: %s\n", strerror(errno));
		goto early;
	}
	snprintf(dc, sizeof dc, "%s/cpu", tmp);
	snprintf(dg, sizeof dg, "%s/gpu", tmp);
	fprintf(stderr, GPO_PROG ": calibrating %s against %s (sizes 64 to %ld, %ld repetitions, budget %.0f s%s)\n",
		o.cpulibs, backend, o.max, o.reps, o.budget,
		o.thorough ? ", thorough: every point, every repetition" : "");
	/* The workload's own switch (calib-workload.c), for both passes. */
	if (o.thorough)
		setenv("GPO_CALIB_THOROUGH", "1", 1);
	else
		unsetenv("GPO_CALIB_THOROUGH");
	t0 = gpo__now();
	/* The CPU pass gets most of the budget: the CPU is the slow side
	 * (on the H200, with pageable copies, the GPU pass of the same
	 * points took half the CPU pass's time). */
	if (gpo__pass(&o, "cpu", dc, NULL, o.budget * 0.6)) {
		fprintf(stderr, GPO_PROG ": the calibration workload failed (CPU pass)\n");
		goto out;
	}
	t1 = gpo__now();
	snprintf(log, sizeof log, "%s/log", dc);
	if (gpo_clog_read(log, &lc) || !(plan = gpo__plan(&lc)))
		goto out;
	if (gpo__pass(&o, "gpu", dg, plan, o.budget - (t1 - t0) > o.budget * 0.3 ?
		      o.budget - (t1 - t0) : o.budget * 0.3)) {
		fprintf(stderr, GPO_PROG ": the calibration workload failed (GPU pass)\n");
		goto out;
	}
	t2 = gpo__now();
	snprintf(log, sizeof log, "%s/log", dg);
	if (gpo_clog_read(log, &lg))
		goto out;
	snprintf(dc + strlen(dc), sizeof dc - strlen(dc), "/trace");
	snprintf(dg + strlen(dg), sizeof dg - strlen(dg), "/trace");
	if (gpo_cfit_read(fc, dc, GPO_CPU, &lc, &sc) <= 0 ||
	    gpo_cfit_read(fg, dg, GPO_GPU, &lg, &sg) <= 0) {
		fprintf(stderr, GPO_PROG ": the traces hold no %s calls to fit (is the GPU leased by another job, or the backend failing?)\n",
			sc.used ? "GPU" : "CPU");
		goto out;
	}
	fprintf(stderr, GPO_PROG ": CPU library %s (names %s)\n", lc.library, lc.scheme);
	gpo__report("CPU", &lc, &sc, t1 - t0, &repeated);
	gpo__report("GPU", &lg, &sg, t2 - t1, &repeated);
	{
		const char *slash = strrchr(backend, '/');
		time_t now = time(NULL);
		struct tm tm;
		char when[32] = "?";
		if (gmtime_r(&now, &tm))
			strftime(when, sizeof when, "%Y-%m-%dT%H:%MZ", &tm);
		snprintf(p.source, sizeof p.source, "calibrate %.40s",
			 slash ? slash + 1 : backend);
		snprintf(p.cpu_library, sizeof p.cpu_library, "%.255s", lc.library);
		snprintf(p.calibration, sizeof p.calibration,
			 "%s, %.0f s, %d+%d points, %d measured again, %d calls left out",
			 when, t2 - t0, lc.npts, lg.npts, repeated,
			 sc.info + sc.gpu_failed + sg.info + sg.gpu_failed);
	}
	if (gpo_cfit_profile(fc, 'c', &p) || gpo_cfit_profile(fg, 'g', &p) ||
	    gpo__write(&p, out))
		goto out;
	gpo__error("CPU", fc);
	gpo__error("GPU", fg);
	fprintf(stderr, GPO_PROG ": calibration took %.0f s (CPU pass %.0f s, GPU pass %.0f s)%s\n",
		t2 - t0, t1 - t0, t2 - t1, o.thorough ? ", thorough" : "");
	fprintf(stderr, GPO_PROG ": the profile is %s\n", out);
	printf("%s\n", out);
	rc = 0;
out:
	gpo__rmtree(tmp, 0);
early:
	free(plan);
	gpo_clog_free(&lc);
	gpo_clog_free(&lg);
	gpo_cfit_free(fc);
	gpo_cfit_free(fg);
	gpo_profile_free(&p);
	return rc;
}
