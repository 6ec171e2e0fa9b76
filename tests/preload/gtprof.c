/*
 * gtprof.c - libgtprof.so, a profiler library as PyTorch's is laid out:
 * linked with CUPTI (the fake, tests/fakecupti) and loaded by its program
 * with dlopen(RTLD_LOCAL), so CUPTI is in its local scope only and its
 * calls go through its PLT (tests/test_gputime.py, gtprobe's "local").
 */
#include <stdint.h>

int cuptiSubscribe(void **, void *, void *);
int gtprof_subscribe(void);

/* cuptiSubscribe through the PLT: its result. */
int gtprof_subscribe(void)
{
	void *s = 0;

	return cuptiSubscribe(&s, 0, 0);
}
