/*
 * gilhold.c - libgilhold.so, for the GIL scenario: called through
 * ctypes.PyDLL, gil_hold_init() keeps the GIL while it waits for a thread
 * it created, and that thread calls cuInit. An update of os.environ that
 * waited for the GIL would deadlock here.
 */
#include <dlfcn.h>
#include <pthread.h>

int gil_hold_init(void);

static int result = -1;

static void *worker(void *arg)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int (*init)(unsigned int) = 0;

	(void)arg;
	if (h)
		*(void **)&init = dlsym(h, "cuInit");
	result = init ? init(0) : -2;
	return 0;
}

int gil_hold_init(void)
{
	pthread_t t;

	if (pthread_create(&t, 0, worker, 0) != 0)
		return -3;
	pthread_join(t, 0);
	return result;
}
