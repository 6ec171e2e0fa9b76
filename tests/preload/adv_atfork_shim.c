/*
 * adv_atfork_shim.c - test instrument for adv_forkwin.c, preloaded before
 * libgpumutex.so. It interposes __register_atfork (what pthread_atfork
 * calls) so that a test can hold one thread inside the gate's call to
 * pthread_atfork, i.e. between taking the gate's mutex and marking the
 * gate busy, while another thread forks.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>

static int armed, in_window, released;

void adv_shim_arm(void) { __atomic_store_n(&armed, 1, __ATOMIC_SEQ_CST); }
int adv_shim_in_window(void) { return __atomic_load_n(&in_window, __ATOMIC_SEQ_CST); }
void adv_shim_release(void) { __atomic_store_n(&released, 1, __ATOMIC_SEQ_CST); }

int __register_atfork(void (*prepare)(void), void (*parent)(void),
		      void (*child)(void), void *dso)
{
	int (*real)(void (*)(void), void (*)(void), void (*)(void), void *);

	*(void **)&real = dlvsym(RTLD_NEXT, "__register_atfork", "GLIBC_2.3.2");
	if (__atomic_exchange_n(&armed, 0, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&in_window, 1, __ATOMIC_SEQ_CST);
		while (!__atomic_load_n(&released, __ATOMIC_SEQ_CST))
			sched_yield();
	}
	return real ? real(prepare, parent, child, dso) : -1;
}
