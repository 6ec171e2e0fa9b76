/*
 * policy-mt - the policy under threads, built with ThreadSanitizer: eight
 * threads decide and observe at once (small calls on the lock-free path,
 * big ones through the model), while, with gpumutex configured, the
 * watcher thread looks for waiters and gives the lease back to the
 * lease-holders test_policy.py starts meanwhile. Prints the summary
 * (GPU_OFFLOAD_SUMMARY=1) and "done"; TSan reports fail the test.
 */
#include <pthread.h>
#include <stdio.h>
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

int main(void)
{
	pthread_t t[8];

	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, work, NULL);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	puts("done");
	return 0;
}
