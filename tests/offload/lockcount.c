/*
 * liblockcount.so - preloaded before libgpuoffload.so in a test: counts
 * the calls of every blocking primitive threads share (pthread mutexes,
 * read-write locks, spin locks, semaphores) that any object makes through
 * its PLT, per thread and in all. lockcount_self() is the calling
 * thread's count, found by the test program with dlsym. Test code only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <time.h>

static __thread unsigned long lc_self;
static unsigned long lc_all;

__attribute__((visibility("default"))) unsigned long lockcount_self(void);
__attribute__((visibility("default"))) unsigned long lockcount_all(void);

unsigned long lockcount_self(void)
{
	return lc_self;
}

unsigned long lockcount_all(void)
{
	return __atomic_load_n(&lc_all, __ATOMIC_RELAXED);
}

static void lc_one(void)
{
	lc_self++;
	__atomic_fetch_add(&lc_all, 1, __ATOMIC_RELAXED);
}

/* One wrapper: count, then the next object's function (looked up once;
 * two threads looking at once find the same). */
#define LC_WRAP(ret, name, params, args)                                   \
	ret name params                                                    \
	{                                                                  \
		static ret (*real) params;                                 \
		if (!real)                                                 \
			*(void **)&real = dlsym(RTLD_NEXT, #name);         \
		lc_one();                                                  \
		return real args;                                          \
	}

LC_WRAP(int, pthread_mutex_lock, (pthread_mutex_t *m), (m))
LC_WRAP(int, pthread_mutex_trylock, (pthread_mutex_t *m), (m))
LC_WRAP(int, pthread_mutex_timedlock,
	(pthread_mutex_t *m, const struct timespec *t), (m, t))
LC_WRAP(int, pthread_rwlock_rdlock, (pthread_rwlock_t *l), (l))
LC_WRAP(int, pthread_rwlock_wrlock, (pthread_rwlock_t *l), (l))
LC_WRAP(int, pthread_rwlock_tryrdlock, (pthread_rwlock_t *l), (l))
LC_WRAP(int, pthread_rwlock_trywrlock, (pthread_rwlock_t *l), (l))
LC_WRAP(int, pthread_spin_lock, (pthread_spinlock_t *l), (l))
LC_WRAP(int, pthread_spin_trylock, (pthread_spinlock_t *l), (l))
LC_WRAP(int, sem_wait, (sem_t *s), (s))
LC_WRAP(int, sem_trywait, (sem_t *s), (s))
LC_WRAP(int, sem_timedwait, (sem_t *s, const struct timespec *t), (s, t))
