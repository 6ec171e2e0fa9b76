/*
 * model-unit - unit tests of the policy's pure parts (src/offload/model.c,
 * profile.c) with synthetic profiles. Run by tests/offload/test_policy.py,
 * one test per argument:
 *   numbers      gpo_scan_double, gpo_ln, gpo_exp against libm
 *   parse        the profile format: a round trip, and each error named
 *   interp       log-log interpolation, flat outside the points
 *   levels       the right device for given sizes at each level 1..10
 *   ski          ski-rental: a short program never starts the GPU, a long
 *                one does, after savings of level-factor x start-up
 *   converge     correction factors converge to observed / predicted
 *   probe        a CPU probe every 16 offloadable calls, and one right
 *                after the GPU starts when the CPU was never observed
 *   fastcpu      a CPU faster than profiled is noticed through the
 *                probes and takes the work back
 * Prints "ok NAME" and exits 0, or a message naming the check and 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "profile.h"

static int failed;
#define CHECK(cond, ...) do { if (!(cond)) { \
	fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); failed = 1; } \
} while (0)

/* The op ids this test uses; the model only needs id and name. */
enum { OP_GEMM = 1, OP_GETRF = 2 };

/* A machine: CPU 1e11 flop/s flat for gemm, GPU 1e13, copies 1e10 B/s
 * with 1e-5 s fixed, start-up 0.5 s. */
static const char *machine =
	"gpu-offload-profile 1\n"
	"# synthetic\n"
	"source model-unit\n"
	"startup 0.5\n"
	"h2d 1e-5 1e10\n"
	"d2h 1e-5 1e10\n"
	"cpu dgemm 1e6:1e11 1e12:1e11\n"
	"gpu dgemm 1e6:1e13 1e12:1e13\n"
	"cpu sgetrf 1e6:1e9 1e9:4e10 1e12:5e10   # a curve with a knee\n"
	"gpu sgetrf 1e6:1e8 1e9:1e12 1e12:4e12\n";

static struct gpo_profile prof;

static void load(void)
{
	char err[256];
	int rc = gpo_profile_parse(machine, strlen(machine), &prof, err,
				   sizeof err);
	if (rc) {
		fprintf(stderr, "FAIL: the test profile: %s\n", err);
		exit(1);
	}
}

/* A square dgemm of size n: 2n^3 flops, three n x n operands in, one out. */
static struct gpo_call gemm(double n)
{
	struct gpo_call c;
	memset(&c, 0, sizeof c);
	c.op = OP_GEMM;
	c.prec = 'd';
	c.level = 3;
	c.dims[0] = c.dims[1] = c.dims[2] = (int64_t)n;
	c.flops = 2 * n * n * n;
	c.bytes_in = 3 * n * n * 8;
	c.bytes_out = n * n * 8;
	return c;
}

static void t_numbers(void)
{
	static const char *in[] = { "1", "0.5", ".25", "1e3", "2.5E-3",
				    "123456789012345678901234", "1e-300",
				    "7.", "3.14159265358979" };
	for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
		double v;
		const char *end;
		CHECK(gpo_scan_double(in[i], &v, &end) == 0 && *end == '\0',
		      "%s", in[i]);
		CHECK(fabs(v - atof(in[i])) <= 1e-14 * fabs(atof(in[i])),
		      "%s read as %.17g", in[i], v);
	}
	{
		double v;
		const char *end;
		CHECK(gpo_scan_double("", &v, &end) < 0, "empty");
		CHECK(gpo_scan_double("-1", &v, &end) < 0, "sign");
		CHECK(gpo_scan_double("inf", &v, &end) < 0, "inf");
		CHECK(gpo_scan_double("1e", &v, &end) == 0 && *end == 'e',
		      "a bare e is not an exponent");
		CHECK(gpo_scan_double("2:3", &v, &end) == 0 && *end == ':' &&
		      v == 2, "stops at the colon");
	}
	for (double x = 1e-300; x < 1e300; x *= 7.3) {
		CHECK(fabs(gpo_ln(x) - log(x)) <= 4e-16 * fabs(log(x)) + 1e-16,
		      "ln %g = %.17g, libm %.17g", x, gpo_ln(x), log(x));
	}
	for (double x = -700; x < 700; x += 3.7)
		CHECK(fabs(gpo_exp(x) - exp(x)) <= 2e-15 * exp(x),
		      "exp %g = %.17g, libm %.17g", x, gpo_exp(x), exp(x));
	/* The ends: finite up to ln of the largest double (709.78), the
	 * subnormal results down to -745 (there to an ulp of 2^-1074). */
	for (double x = 700; x < 709.7827; x += 0.0137)
		CHECK(fabs(gpo_exp(x) - exp(x)) <= 2e-15 * exp(x),
		      "exp %.17g = %.17g, libm %.17g", x, gpo_exp(x), exp(x));
	CHECK(isinf(gpo_exp(709.79)), "exp 709.79 = %g: inf", gpo_exp(709.79));
	for (double x = -745; x < -700; x += 0.0137)
		CHECK(fabs(gpo_exp(x) - exp(x)) <= 2e-15 * exp(x) + 4.95e-324,
		      "exp %.17g = %.17g, libm %.17g", x, gpo_exp(x), exp(x));
}

static void t_parse(void)
{
	static struct {
		const char *text, *want;
	} bad[] = {
		{ "", "empty profile" },
		{ "gpu-offload-profile 2\n", "line 1: a profile of another format version" },
		{ "something else\n", "line 1: the first line" },
		{ "gpu-offload-profile 1\nstartup\n", "line 2: startup takes" },
		{ "gpu-offload-profile 1\nh2d 1e-5\n", "line 2: a copy cost" },
		{ "gpu-offload-profile 1\nh2d 1e-5 0\n", "line 2: a copy cost" },
		{ "gpu-offload-profile 1\n\ncpu dgemm 1e6\n", "line 3: a point is WORK:SPEED" },
		{ "gpu-offload-profile 1\ncpu dgemm 1e9:1 1e6:1\n", "line 2: points need" },
		{ "gpu-offload-profile 1\ncpu xgemm 1e9:1\n", "line 2: a curve needs a name" },
		{ "gpu-offload-profile 1\ncpu dGEMM 1e9:1\n", "line 2: an operation name" },
		{ "gpu-offload-profile 1\ncpu dgemm\n", "line 2: a curve needs a point" },
		{ "gpu-offload-profile 1\ncpu dgemm 1:1\ncpu dgemm 1:1\n", "line 3: a second curve" },
	};
	char err[256], *buf;
	struct gpo_profile p, q;
	size_t n;

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = gpo_profile_parse(bad[i].text, strlen(bad[i].text), &p,
					   err, sizeof err);
		CHECK(rc < 0 && strstr(err, bad[i].want), "%s: got %d \"%s\"",
		      bad[i].want, rc, err);
	}
	/* Unknown keywords (a newer writer's) are skipped. */
	CHECK(gpo_profile_parse("gpu-offload-profile 1\nnvml yes\n", 32, &p,
				err, sizeof err) == 0, "%s", err);
	gpo_profile_free(&p);
	/* A round trip keeps everything. */
	n = gpo_profile_format(&prof, NULL, 0);
	buf = malloc(n + 1);
	gpo_profile_format(&prof, buf, n + 1);
	CHECK(gpo_profile_parse(buf, n, &q, err, sizeof err) == 0, "%s", err);
	CHECK(q.ncurves == prof.ncurves && q.startup_s == 0.5 &&
	      q.h2d_bw == 1e10 && q.d2h_fixed == 1e-5 &&
	      strcmp(q.source, "model-unit") == 0, "round trip:\n%s", buf);
	for (int i = 0; i < q.ncurves && i < prof.ncurves; i++)
		CHECK(q.curves[i].n == prof.curves[i].n &&
		      q.curves[i].speed[q.curves[i].n - 1] ==
		      prof.curves[i].speed[prof.curves[i].n - 1],
		      "curve %d", i);
	gpo_profile_free(&q);
	free(buf);
}

static void t_interp(void)
{
	const struct gpo_curve *c = gpo_profile_curve(&prof, 'c', 's', "getrf");

	CHECK(c != NULL, "sgetrf cpu curve");
	if (!c)
		return;
	CHECK(gpo_curve_speed(c, 1) == 1e9, "flat below");
	CHECK(gpo_curve_speed(c, 1e15) == 5e10, "flat above");
	CHECK(fabs(gpo_curve_speed(c, 1e9) - 4e10) < 1, "at a point");
	/* halfway in log(work) between 1e6 and 1e9: the geometric mean */
	CHECK(fabs(gpo_curve_speed(c, pow(10, 7.5)) - sqrt(1e9 * 4e10)) <
	      1e-6 * sqrt(1e9 * 4e10), "log-log: %g",
	      gpo_curve_speed(c, pow(10, 7.5)));
	CHECK(fabs(gpo_curve_speed(c, 1e7) - 1e9 * pow(40, 1.0 / 3)) <
	      1e-3, "a third of the way: %g", gpo_curve_speed(c, 1e7));
	/* A prepared copy (ln of its points taken once) answers as the
	 * curve as read (ln taken per call) to the last bits. */
	CHECK(!c->ln_ready, "the reader leaves the curve unprepared");
	{
		struct gpo_curve ready = *c;
		gpo_curve_prepare(&ready);
		CHECK(ready.ln_ready, "prepared");
		for (double w = 0.5; w < 1e16; w *= 3.1) {
			double a = gpo_curve_speed(&ready, w), b = gpo_curve_speed(c, w);
			CHECK(fabs(a - b) <= 1e-14 * b, "prepared %.17g, raw %.17g at %g",
			      a, b, w);
		}
	}
}

/*
 * For the gemm machine: T_cpu = 2n^3 / 1e11, T_gpu = 2n^3 / 1e13 +
 * 2e-5 + 32 n^2 / 1e10. The speedup T_cpu / T_gpu grows with n; each
 * level's threshold is crossed at some n. Check, for each level, a size
 * just below and one just above the crossing.
 */
static double speedup_at(double n)
{
	struct gpo_model m;
	struct gpo_call c = gemm(n);
	double tc, tg;

	gpo_model_init(&m, &prof, 5);
	gpo_model_predict(&m, &c, "gemm", 0, &tc, &tg);
	return tc / tg;
}

static void t_levels(void)
{
	for (int level = 1; level <= 10; level++) {
		const struct gpo_level *lv = gpo_level_get(level);
		double lo = 1, hi = 1e5;
		/* the size where the speedup crosses the level's */
		for (int i = 0; i < 200; i++) {
			double mid = sqrt(lo * hi);
			if (speedup_at(mid) < lv->speedup)
				lo = mid;
			else
				hi = mid;
		}
		for (int side = 0; side < 2; side++) {
			struct gpo_model m;
			struct gpo_decision d;
			struct gpo_call c = gemm(side ? hi * 1.01 : lo * 0.99);
			enum gpo_verdict v;
			gpo_model_init(&m, &prof, level);
			m.ops[OP_GEMM][1].cpu_seen = 1;
			v = gpo_model_decide(&m, &c, "gemm", 1, &d);
			CHECK(v == (side ? GPO_V_GPU : GPO_V_CPU) &&
			      d.reason == (side ? GPO_R_MODEL_GPU : GPO_R_MODEL_CPU),
			      "level %d, n=%g: verdict %d reason %d (speedup %g, needed %g)",
			      level, (double)c.dims[0], v, d.reason,
			      d.t_cpu / d.t_gpu, lv->speedup);
		}
	}
	/* the table itself, spot checks */
	CHECK(gpo_level_get(1)->speedup == 3.0 && gpo_level_get(5)->speedup == 1.3 &&
	      gpo_level_get(10)->speedup == 0.9, "speedups");
	CHECK(gpo_level_get(5)->reserve == 0.30 && gpo_level_get(10)->start == 0.75 &&
	      gpo_level_get(1)->busy == 0.30, "reserve, start, busy");
	CHECK(gpo_level_get(0) == gpo_level_get(1) &&
	      gpo_level_get(11) == gpo_level_get(10), "clamped");
	/* an operation the profile does not know stays on the CPU */
	{
		struct gpo_model m;
		struct gpo_decision d;
		struct gpo_call c = gemm(4000);
		c.prec = 'z';
		gpo_model_init(&m, &prof, 10);
		CHECK(gpo_model_decide(&m, &c, "gemm", 1, &d) == GPO_V_CPU &&
		      d.t_cpu == 0 && d.reason == GPO_R_MODEL_CPU, "zgemm");
	}
}

/* n = 2000: T_cpu = 0.16 s, T_gpu ~ 0.0029 s: saves ~0.157 s a call. */
static void t_ski(void)
{
	for (int level = 1; level <= 10; level++) {
		struct gpo_model m;
		struct gpo_decision d;
		struct gpo_call c = gemm(2000);
		const struct gpo_level *lv = gpo_level_get(level);
		double tc, tg, need;
		int calls = 0, started = 0;

		gpo_model_init(&m, &prof, level);
		gpo_model_predict(&m, &c, "gemm", 0, &tc, &tg);
		need = lv->start * 0.5;
		/* a short program: savings below the threshold */
		while ((calls + 1) * (tc - tg) < need * 0.999) {
			CHECK(gpo_model_decide(&m, &c, "gemm", 0, &d) == GPO_V_CPU &&
			      d.reason == GPO_R_SKI_RENTAL, "level %d call %d",
			      level, calls);
			calls++;
		}
		/* a long one: the call that brings them to the threshold */
		for (int i = 0; i < 3 && !started; i++)
			started = gpo_model_decide(&m, &c, "gemm", 0, &d) == GPO_V_START;
		CHECK(started && calls + 3 >= (int)(need / (tc - tg)),
		      "level %d: started after %d calls", level, calls);
		/* a failed start counts from zero again */
		gpo_model_reset_savings(&m);
		CHECK(need < tc - tg ||
		      gpo_model_decide(&m, &c, "gemm", 0, &d) == GPO_V_CPU,
		      "level %d after reset", level);
	}
	/* calls that do not pay add nothing: never started */
	{
		struct gpo_model m;
		struct gpo_decision d;
		struct gpo_call c = gemm(40);
		gpo_model_init(&m, &prof, 5);
		for (int i = 0; i < 100000; i++)
			CHECK(gpo_model_decide(&m, &c, "gemm", 0, &d) == GPO_V_CPU,
			      "small gemm %d", i);
		CHECK(m.saved == 0, "saved %g", m.saved);
	}
}

static void t_converge(void)
{
	struct gpo_model m;
	struct gpo_call c = gemm(1000);
	double tc, tg, rc, rg;

	gpo_model_init(&m, &prof, 5);
	gpo_model_predict(&m, &c, "gemm", 1, &rc, &rg);
	/* the CPU is 3x slower, the GPU 2x faster than profiled */
	for (int i = 0; i < 40; i++) {
		gpo_model_observe(&m, &c, "gemm", GPO_CPU, rc * 3);
		gpo_model_observe(&m, &c, "gemm", GPO_GPU, rg / 2);
	}
	gpo_model_predict(&m, &c, "gemm", 0, &tc, &tg);
	CHECK(fabs(tc / rc - 3) < 1e-6 && fabs(tg / rg - 0.5) < 1e-6,
	      "factors %g %g", tc / rc, tg / rg);
	/* halfway per observation, in ratio terms */
	gpo_model_observe(&m, &c, "gemm", GPO_CPU, rc * 12);
	gpo_model_predict(&m, &c, "gemm", 0, &tc, &tg);
	CHECK(fabs(tc / rc - 6) < 1e-6, "halfway: %g", tc / rc);
	/* per operation and precision: sgetrf untouched */
	{
		struct gpo_call g = c;
		double a, b, ra, rb;
		g.op = OP_GETRF;
		g.prec = 's';
		gpo_model_predict(&m, &g, "getrf", 0, &a, &b);
		gpo_model_predict(&m, &g, "getrf", 1, &ra, &rb);
		CHECK(a == ra && b == rb, "getrf corrected");
	}
	/* an outlier moves it by a bounded factor */
	gpo_model_init(&m, &prof, 5);
	gpo_model_observe(&m, &c, "gemm", GPO_CPU, rc * 1e9);
	gpo_model_predict(&m, &c, "gemm", 0, &tc, &tg);
	CHECK(tc / rc < 32, "outlier: %g", tc / rc);
}

static void t_probe(void)
{
	struct gpo_model m;
	struct gpo_decision d;
	struct gpo_call c = gemm(2000);
	int since = 0, probes = 0, first = -1;

	gpo_model_init(&m, &prof, 5);
	/* GPU started before the CPU ran this op: probe at once */
	for (int i = 0; i < 200; i++) {
		enum gpo_verdict v = gpo_model_decide(&m, &c, "gemm", 1, &d);
		if (v == GPO_V_CPU) {
			CHECK(d.reason == GPO_R_PROBE, "reason %d", d.reason);
			CHECK(probes == 0 || since == GPO_PROBE_EVERY,
			      "probe after %d GPU calls", since);
			if (first < 0)
				first = i;
			probes++;
			since = 0;
			gpo_model_observe(&m, &c, "gemm", GPO_CPU, d.t_cpu);
		} else {
			CHECK(v == GPO_V_GPU, "verdict %d", v);
			since++;
			gpo_model_observe(&m, &c, "gemm", GPO_GPU, d.t_gpu);
		}
	}
	CHECK(first == 0, "first probe at call %d", first);
	CHECK(probes == 1 + (200 - 1) / (GPO_PROBE_EVERY + 1), "%d probes",
	      probes);
}

static void t_fastcpu(void)
{
	struct gpo_model m;
	struct gpo_decision d;
	struct gpo_call c = gemm(2000);
	int gpu_after = 0;
	double rc, rg;

	gpo_model_init(&m, &prof, 5);
	gpo_model_predict(&m, &c, "gemm", 1, &rc, &rg);
	/* This CPU is 100x faster than profiled: T_cpu 0.0016 s < 1.3 T_gpu.
	 * Only probes can show it; after a few, the work stays on the CPU. */
	for (int i = 0; i < 400; i++) {
		enum gpo_verdict v = gpo_model_decide(&m, &c, "gemm", 1, &d);
		if (v == GPO_V_CPU)
			gpo_model_observe(&m, &c, "gemm", GPO_CPU, rc / 100);
		else
			gpo_model_observe(&m, &c, "gemm", GPO_GPU, rg);
		if (i >= 200 && v != GPO_V_CPU)
			gpu_after++;
	}
	CHECK(gpu_after == 0, "%d GPU calls after learning", gpu_after);
	CHECK(d.reason == GPO_R_MODEL_CPU, "reason %d", d.reason);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{ "numbers", t_numbers }, { "parse", t_parse },
		{ "interp", t_interp }, { "levels", t_levels },
		{ "ski", t_ski }, { "converge", t_converge },
		{ "probe", t_probe }, { "fastcpu", t_fastcpu },
	};
	load();
	for (int a = 1; a < argc; a++) {
		int found = 0;
		for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
			if (strcmp(argv[a], tests[i].name) == 0) {
				found = 1;
				failed = 0;
				tests[i].fn();
				if (failed)
					return 1;
				printf("ok %s\n", argv[a]);
			}
		if (!found) {
			fprintf(stderr, "no test %s\n", argv[a]);
			return 2;
		}
	}
	gpo_profile_free(&prof);
	return 0;
}
