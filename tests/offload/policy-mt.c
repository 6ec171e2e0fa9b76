/*
 * policy-mt - the policy under threads, built with ThreadSanitizer: eight
 * threads decide and observe at once (small calls on the lock-free path,
 * big ones through the model), while, with gpumutex configured, the
 * watcher thread looks for waiters and gives the lease back to the
 * lease-holders test_policy.py starts meanwhile. Prints the summary
 * (GPU_OFFLOAD_SUMMARY=1) and "done"; TSan reports fail the test.
 *
 * `policy-mt learn`: learning under threads. Eight threads each decide
 * 2000 dgemm calls of 1e10 flops whose predicted CPU time (0.1 s with
 * test_policy.py's profile LEARN) is a quarter of what they report
 * (0.4 s), while the GPU's (0.09 s with the copies) is right: the CPU's
 * correction factor must reach 4, the verdict turn from CPU to GPU, and
 * the GPU start. Then one more decision from the main thread: prints
 * "learnt t_cpu=T device=D" and "done".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "policy.h"
const char *gpo_op_name(unsigned op)
{
	(void)op;
	return "gemm";
}

void gpo_gpu_atfork(void)
{
}

int gpo_gpu_start(void)
{
	return 0;
}

void gpo_gpu_stop(void)
{
}

int gpo_gpu_memory(uint64_t *free_bytes, uint64_t *total_bytes)
{
	(void)free_bytes;
	(void)total_bytes;
	return -1;
}

static double buf[1000];
static void *work(void *arg)
{
	(void)arg;
	for (int i = 0; i < 20000; i++) {
		struct gpo_call c;
		struct gpo_decision d;
		int dev;

		memset(&c, 0, sizeof c);
		c.op = 1;
		c.prec = 'd';
		c.flops = i % 3 ? 1.6e10 : 1e3;
		c.bytes_in = 9.6e7;
		c.bytes_out = 3.2e7;
		c.nbuf = 1;
		c.buf[0].ptr = buf;
		c.buf[0].bytes = sizeof buf;
		c.buf[0].in = 1;
		if (i % 3 == 0) {
			memset(&d, 0, sizeof d);
			d.reason = GPO_R_SMALL;
			gpo_policy_observe(&c, &d, GPO_CPU, 0, 0, 0, 0);
			continue;
		}
		dev = gpo_policy_decide(&c, &d);
		gpo_policy_observe(&c, &d, dev, dev ? 0.013 : 0.16, 0.001,
				   0.001, 0);
	}
	return NULL;
}

static struct gpo_call learn_call(void)
{
	struct gpo_call c;

	memset(&c, 0, sizeof c);
	c.op = 1;
	c.prec = 'd';
	c.flops = 1e10;
	c.bytes_in = 8.9e8;
	c.nbuf = 1;
	c.buf[0].ptr = buf;
	c.buf[0].bytes = sizeof buf;
	c.buf[0].in = 1;
	return c;
}

static void *learn(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2000; i++) {
		struct gpo_call c = learn_call();
		struct gpo_decision d;
		int dev = gpo_policy_decide(&c, &d);

		gpo_policy_observe(&c, &d, dev, dev ? 0.09 : 0.4, 0, 0, 0);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[8];
	int lrn = argc > 1 && strcmp(argv[1], "learn") == 0;

	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, lrn ? learn : work, NULL);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	if (lrn) {
		struct gpo_call c = learn_call();
		struct gpo_decision d;
		int dev = gpo_policy_decide(&c, &d);

		gpo_policy_observe(&c, &d, dev, dev ? 0.09 : 0.4, 0, 0, 0);
		printf("learnt t_cpu=%.9f device=%d\n", d.t_cpu, dev);
	}
	puts("done");
	return 0;
}
