/*
 * policy-driver - the policy (src/offload/policy.c and what it uses)
 * behind a stand-in frontend, for tests/offload/test_olease*.py and
 * test_trace*.py: decisions, leases, give-back, traces and the summary
 * without the generated wrappers.
 *
 * The stand-in GPU backend is the fake NVIDIA driver (tests/fakecuda),
 * found as libcuda.so.1 through LD_LIBRARY_PATH and its symbols through
 * dlsym, as a CUDA backend would (so a preloaded libgpumutex.so sees its
 * cuInit): start = cuInit, cuDeviceGet(0), cuCtxCreate (journal: begin);
 * each GPU call = cuCtxSynchronize (tick); stop = cuCtxDestroy (end).
 * POLICY_DRIVER_BACKEND=none makes the start fail as a missing backend.
 *
 * Commands, one a line on stdin; each answers one line on stdout:
 *   call N OP PREC FLOPS BYTES_IN BYTES_OUT T_CPU T_GPU
 *       N calls of op OP (gemm, getrf, syrk) on two buffers of the
 *       driver's (A in, C in+out, each BYTES_IN / 2 bytes; C copied
 *       back as BYTES_OUT): decide, "run" (T_* seconds are reported as taken, no
 *       time passes), observe. A call run on the GPU changes C.
 *   until-stop ...   the same arguments without N: calls until the policy
 *                    stops the GPU (it gave the lease back), or 60 s
 *   touch            change A's contents
 *   fork-hold        fork a child that keeps running (it pauses) and
 *                    holds whatever descriptors it inherited
 *   exit
 * Answer: "gpu=G cpu=C starts=S stops=T reasons=name:count,..." for the
 * calls of that command, "child=PID" for fork-hold.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "policy.h"
#include "trace.h"

static const char *const ops[] = { "?", "gemm", "getrf", "syrk" };

const char *gpo_op_name(unsigned op)
{
	return op < sizeof ops / sizeof ops[0] ? ops[op] : "?";
}

static int (*cu_sync)(void);
static int (*cu_destroy)(void *);
static void *ctx;
static int starts, stops;

void gpo_gpu_atfork(void)
{
}

int gpo_gpu_start(void)
{
	const char *b = getenv("POLICY_DRIVER_BACKEND");
	int (*init)(unsigned), (*devget)(int *, int);
	int (*create)(void **, unsigned, int);
	void *h;
	int dev;

	if (b && strcmp(b, "none") == 0) {
		fprintf(stderr, "gpu-offload: no GPU backend (test)\n");
		return GPO_R_NO_BACKEND;
	}
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h)
		return GPO_R_NO_BACKEND;
	init = (int (*)(unsigned))dlsym(h, "cuInit");
	devget = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
	create = (int (*)(void **, unsigned, int))dlsym(h, "cuCtxCreate_v2");
	cu_sync = (int (*)(void))dlsym(h, "cuCtxSynchronize");
	cu_destroy = (int (*)(void *))dlsym(h, "cuCtxDestroy_v2");
	if (!init || !devget || !create || !cu_sync || !cu_destroy ||
	    init(0) != 0 || devget(&dev, 0) != 0 || create(&ctx, 0, dev) != 0) {
		fprintf(stderr, "gpu-offload: the fake driver did not start\n");
		return GPO_R_NO_BACKEND;
	}
	starts++;
	return 0;
}

void gpo_gpu_stop(void)
{
	if (ctx) {
		cu_destroy(ctx);
		ctx = NULL;
		stops++;
	}
}

int gpo_gpu_memory(uint64_t *free_bytes, uint64_t *total_bytes)
{
	(void)free_bytes;
	(void)total_bytes;
	return -1;
}

static double *bufa, *bufc;
static size_t na, nc;

static int run(const char *op, char prec, double flops, double bin,
	       double bout, double tc, double tg, unsigned long *counts)
{
	struct gpo_call c;
	struct gpo_decision d;
	unsigned o = 0;
	int dev;

	for (unsigned i = 1; i < sizeof ops / sizeof ops[0]; i++)
		if (strcmp(ops[i], op) == 0)
			o = i;
	if (na < (size_t)(bin / 2 / 8) + 1) {
		na = (size_t)(bin / 2 / 8) + 1;
		free(bufa);
		bufa = calloc(na, 8);
		if (!bufa)
			abort();
	}
	if (nc < (size_t)(bin / 2 / 8) + 1) {
		nc = (size_t)(bin / 2 / 8) + 1;
		free(bufc);
		bufc = calloc(nc, 8);
		if (!bufc)
			abort();
	}
	memset(&c, 0, sizeof c);
	c.op = (uint16_t)o;
	c.prec = prec;
	c.level = o == 2 ? 4 : 3;
	c.flops = flops;
	c.bytes_in = bin;
	c.bytes_out = bout;
	c.site = __builtin_return_address(0);
	c.nbuf = 2;
	c.buf[0].ptr = bufa;
	c.buf[0].bytes = (uint64_t)(bin / 2);
	c.buf[0].in = 1;
	c.buf[1].ptr = bufc;
	c.buf[1].bytes = (uint64_t)(bin / 2);
	c.buf[1].in = 1;
	c.buf[1].out = 1;
	dev = gpo_policy_decide(&c, &d);
	if (dev == GPO_GPU) {
		cu_sync();
		bufc[0] += 1; /* the result the GPU copies back */
	}
	gpo_policy_observe(&c, &d, dev, dev == GPO_GPU ? tg : tc,
			   dev == GPO_GPU ? tg / 4 : 0,
			   dev == GPO_GPU ? tg / 4 : 0, 0);
	counts[dev]++;
	counts[2 + (d.reason < GPO_R_MAX ? d.reason : 0)]++;
	return dev;
}

static void answer(const unsigned long *counts, int s0, int t0)
{
	int first = 1;

	printf("gpu=%lu cpu=%lu starts=%d stops=%d reasons=", counts[GPO_GPU],
	       counts[GPO_CPU], starts - s0, stops - t0);
	for (int r = 1; r < GPO_R_MAX; r++)
		if (counts[2 + r]) {
			printf("%s%s:%lu", first ? "" : ",", gpo_reason_name((unsigned)r),
			       counts[2 + r]);
			first = 0;
		}
	printf("\n");
	fflush(stdout);
}

int main(void)
{
	char line[512];

	while (fgets(line, sizeof line, stdin)) {
		unsigned long counts[2 + GPO_R_MAX] = { 0 };
		char op[32], prec;
		double f, bi, bo, tc, tg;
		long n;
		int s0 = starts, t0 = stops;

		if (sscanf(line, "call %ld %31s %c %lf %lf %lf %lf %lf", &n, op,
			   &prec, &f, &bi, &bo, &tc, &tg) == 8) {
			for (long i = 0; i < n; i++)
				run(op, prec, f, bi, bo, tc, tg, counts);
			answer(counts, s0, t0);
		} else if (sscanf(line, "until-stop %31s %c %lf %lf %lf %lf %lf",
				  op, &prec, &f, &bi, &bo, &tc, &tg) == 7) {
			/* 60 s: a hang guard only, so that a policy that
			 * never gives the GPU back fails the test. */
			time_t end = time(NULL) + 60;
			while (stops == t0 && time(NULL) < end)
				run(op, prec, f, bi, bo, tc, tg, counts);
			answer(counts, s0, t0);
		} else if (strncmp(line, "touch", 5) == 0) {
			if (bufa)
				bufa[0] += 1;
			printf("touched\n");
			fflush(stdout);
		} else if (strncmp(line, "fork-hold", 9) == 0) {
			pid_t p = fork();
			if (p == 0) {
				for (;;)
					pause();
			}
			printf("child=%d\n", (int)p);
			fflush(stdout);
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		} else {
			fprintf(stderr, "policy-driver: bad command %s", line);
			return 2;
		}
	}
	return 0;
}
