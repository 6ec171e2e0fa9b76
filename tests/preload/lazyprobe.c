/*
 * lazyprobe.c - device queries and first device work along one lookup
 * path, for tests/test_lazy_lease.py. Linked with -lcuda (the fake
 * driver), so the PLT path is there too.
 *
 *   lazyprobe PATH STEP...
 * PATH: how every driver function is found:
 *   plt      the dynamic linker's binding (the program's own references)
 *   dlsym    dlopen("libcuda.so.1") + dlsym(handle)
 *   default  dlsym(RTLD_DEFAULT)
 *   gpa2     cuGetProcAddress_v2(name, 13000, 0) (found with dlsym)
 *   gpa1     cuGetProcAddress(name, 12000, 0) (found with dlsym)
 * STEPs, in order:
 *   init     cuInit(0): prints "init=<rc> cvd=<CUDA_VISIBLE_DEVICES>"
 *   query    every pure query: prints "count= name= mem= major= uuid=
 *            bus= cur= dev= active= version="
 *   retain   cuDevicePrimaryCtxRetain(0) + cuCtxSetCurrent: "retain=<rc>"
 *   create   cuCtxCreate_v2(0): "create=<rc>"
 *   work     cuMemAlloc_v2 + cuLaunchKernel: "work=<rc>"
 *   release  cuDevicePrimaryCtxRelease_v2(0): "release=<rc>"
 *   destroy  cuCtxDestroy_v2 of the created context: "destroy=<rc>"
 *   line     print "waiting" and read one line from stdin
 *   eof      print "waiting" and wait for EOF on stdin
 *   race N   N threads: half run 50 rounds of queries, half retain +
 *            work; prints "queries-done working=<work threads not done>"
 *            once the query threads are done, then "race=<first failing
 *            rc or 0>"
 * Every line is flushed at once. Exit status 0, or 3 when a function
 * cannot be found.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;

/* The program's own references (the PLT path). */
CUresult cuInit(unsigned);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetName(char *, int, CUdevice);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuDeviceGetAttribute(int *, int, CUdevice);
CUresult cuDeviceGetUuid(unsigned char *, CUdevice);
CUresult cuDeviceGetPCIBusId(char *, int, CUdevice);
CUresult cuCtxGetCurrent(CUcontext *);
CUresult cuCtxGetDevice(CUdevice *);
CUresult cuDevicePrimaryCtxGetState(CUdevice, unsigned *, int *);
CUresult cuDriverGetVersion(int *);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuMemAlloc_v2(unsigned long long *, size_t);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned,
			unsigned, unsigned, unsigned, void *, void **, void **);

static const struct {
	const char *name;
	void *plt;
} table[] = {
	{ "cuInit", (void *)cuInit },
	{ "cuDeviceGetCount", (void *)cuDeviceGetCount },
	{ "cuDeviceGet", (void *)cuDeviceGet },
	{ "cuDeviceGetName", (void *)cuDeviceGetName },
	{ "cuDeviceTotalMem_v2", (void *)cuDeviceTotalMem_v2 },
	{ "cuDeviceGetAttribute", (void *)cuDeviceGetAttribute },
	{ "cuDeviceGetUuid", (void *)cuDeviceGetUuid },
	{ "cuDeviceGetPCIBusId", (void *)cuDeviceGetPCIBusId },
	{ "cuCtxGetCurrent", (void *)cuCtxGetCurrent },
	{ "cuCtxGetDevice", (void *)cuCtxGetDevice },
	{ "cuDevicePrimaryCtxGetState", (void *)cuDevicePrimaryCtxGetState },
	{ "cuDriverGetVersion", (void *)cuDriverGetVersion },
	{ "cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain },
	{ "cuDevicePrimaryCtxRelease_v2", (void *)cuDevicePrimaryCtxRelease_v2 },
	{ "cuCtxSetCurrent", (void *)cuCtxSetCurrent },
	{ "cuCtxCreate_v2", (void *)cuCtxCreate_v2 },
	{ "cuCtxDestroy_v2", (void *)cuCtxDestroy_v2 },
	{ "cuMemAlloc_v2", (void *)cuMemAlloc_v2 },
	{ "cuLaunchKernel", (void *)cuLaunchKernel },
};

static const char *path;

static void *get(const char *name)
{
	static void *h;
	void *p = NULL;
	int st = -1;

	if (!h)
		h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!strcmp(path, "plt")) {
		for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
			if (!strcmp(table[i].name, name))
				p = table[i].plt;
	} else if (!strcmp(path, "dlsym")) {
		p = dlsym(h, name);
	} else if (!strcmp(path, "default")) {
		p = dlsym(RTLD_DEFAULT, name);
	} else if (!strcmp(path, "gpa2")) {
		CUresult (*g)(const char *, void **, int, unsigned long long,
			      int *);
		*(void **)&g = dlsym(h, "cuGetProcAddress_v2");
		if (g && g(name, &p, 13000, 0, &st))
			p = NULL;
	} else if (!strcmp(path, "gpa1")) {
		CUresult (*g)(const char *, void **, int, unsigned long long);
		*(void **)&g = dlsym(h, "cuGetProcAddress");
		if (g && g(name, &p, 12000, 0))
			p = NULL;
	}
	if (!p) {
		fprintf(stderr, "lazyprobe: %s: no %s\n", path, name);
		exit(3);
	}
	return p;
}

#define CALL(type, name, ...) (((type)get(name))(__VA_ARGS__))

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static int query(void)
{
	int count = -1, major = -1, active = -1, version = -1;
	CUdevice dev = -1, cdev = -1;
	char name[64] = "", bus[32] = "";
	unsigned char uuid[16] = { 0 };
	size_t mem = 0;
	unsigned flags = 0;
	CUcontext cur = (CUcontext)1;
	int rc = 0;

	rc |= CALL(CUresult (*)(int *), "cuDeviceGetCount", &count);
	rc |= CALL(CUresult (*)(CUdevice *, int), "cuDeviceGet", &dev, 0);
	rc |= CALL(CUresult (*)(char *, int, CUdevice), "cuDeviceGetName",
		   name, sizeof name, dev);
	rc |= CALL(CUresult (*)(size_t *, CUdevice), "cuDeviceTotalMem_v2",
		   &mem, dev);
	rc |= CALL(CUresult (*)(int *, int, CUdevice), "cuDeviceGetAttribute",
		   &major, 75, dev);
	rc |= CALL(CUresult (*)(unsigned char *, CUdevice), "cuDeviceGetUuid",
		   uuid, dev);
	rc |= CALL(CUresult (*)(char *, int, CUdevice), "cuDeviceGetPCIBusId",
		   bus, sizeof bus, dev);
	rc |= CALL(CUresult (*)(CUcontext *), "cuCtxGetCurrent", &cur);
	/* No context: 201, as the runtime sees it. */
	(void)CALL(CUresult (*)(CUdevice *), "cuCtxGetDevice", &cdev);
	rc |= CALL(CUresult (*)(CUdevice, unsigned *, int *),
		   "cuDevicePrimaryCtxGetState", dev, &flags, &active);
	rc |= CALL(CUresult (*)(int *), "cuDriverGetVersion", &version);
	say("count=%d name=%s mem=%zu major=%d uuid=%02x%02x bus=%s cur=%s dev=%d active=%d version=%d qrc=%d",
	    count, strchr(name, ' ') ? "Fake_GPU" : name, mem, major, uuid[0],
	    uuid[1], bus, cur ? "set" : "null", cdev, active, version, rc);
	return rc;
}

static CUcontext created;

static int retain(void)
{
	CUcontext c = NULL;
	int rc = CALL(CUresult (*)(CUcontext *, CUdevice),
		      "cuDevicePrimaryCtxRetain", &c, 0);

	if (!rc)
		rc = CALL(CUresult (*)(CUcontext), "cuCtxSetCurrent", c);
	return rc;
}

static int work(void)
{
	unsigned long long p = 0;
	int rc = CALL(CUresult (*)(unsigned long long *, size_t),
		      "cuMemAlloc_v2", &p, 4096);

	if (!rc)
		rc = CALL(CUresult (*)(void *, unsigned, unsigned, unsigned,
				       unsigned, unsigned, unsigned, unsigned,
				       void *, void **, void **),
			  "cuLaunchKernel", NULL, 1, 1, 1, 1, 1, 1, 0, NULL,
			  NULL, NULL);
	return rc;
}

static int race_working;   /* work threads not done yet */
static int race_rc;
static pthread_mutex_t race_lock = PTHREAD_MUTEX_INITIALIZER;

static void *race_query(void *arg)
{
	(void)arg;
	for (int i = 0; i < 50; i++) {
		int n;

		if (CALL(CUresult (*)(int *), "cuDeviceGetCount", &n))
			break;
		if (query())
			break;
	}
	return NULL;
}

static void *race_work(void *arg)
{
	int rc = retain();

	(void)arg;
	if (!rc)
		rc = work();
	pthread_mutex_lock(&race_lock);
	if (rc && !race_rc)
		race_rc = rc;
	race_working--;
	pthread_mutex_unlock(&race_lock);
	return NULL;
}

static void wait_line(int eof)
{
	char buf[256];

	say("waiting");
	if (eof) {
		while (fread(buf, 1, sizeof buf, stdin) > 0)
			;
	} else if (!fgets(buf, sizeof buf, stdin)) {
		return;
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: lazyprobe PATH STEP...\n");
		return 3;
	}
	path = argv[1];
	for (int i = 2; i < argc; i++) {
		const char *s = argv[i];

		if (!strcmp(s, "init")) {
			const char *cvd;
			int rc = CALL(CUresult (*)(unsigned), "cuInit", 0);

			cvd = getenv("CUDA_VISIBLE_DEVICES");
			say("init=%d cvd=%s", rc, cvd ? cvd : "-unset-");
		} else if (!strcmp(s, "query")) {
			query();
		} else if (!strcmp(s, "retain")) {
			say("retain=%d", retain());
		} else if (!strcmp(s, "create")) {
			say("create=%d", CALL(CUresult (*)(CUcontext *, unsigned,
							   CUdevice),
					      "cuCtxCreate_v2", &created, 0, 0));
		} else if (!strcmp(s, "work")) {
			say("work=%d", work());
		} else if (!strcmp(s, "release")) {
			say("release=%d",
			    CALL(CUresult (*)(CUdevice),
				 "cuDevicePrimaryCtxRelease_v2", 0));
		} else if (!strcmp(s, "destroy")) {
			say("destroy=%d", CALL(CUresult (*)(CUcontext),
					       "cuCtxDestroy_v2", created));
		} else if (!strcmp(s, "line")) {
			wait_line(0);
		} else if (!strcmp(s, "eof")) {
			wait_line(1);
		} else if (!strcmp(s, "race") && i + 1 < argc) {
			int n = atoi(argv[++i]);
			pthread_t t[64];

			if (n < 2 || n > 64)
				return 3;
			race_working = (n + 1) / 2;
			for (int k = 0; k < n; k++)
				pthread_create(&t[k], NULL,
					       k % 2 ? race_query : race_work,
					       NULL);
			/* The query threads first: they finish while the work
			 * threads may still wait for the lease. */
			for (int k = 1; k < n; k += 2)
				pthread_join(t[k], NULL);
			pthread_mutex_lock(&race_lock);
			say("queries-done working=%d", race_working);
			pthread_mutex_unlock(&race_lock);
			for (int k = 0; k < n; k += 2)
				pthread_join(t[k], NULL);
			say("race=%d", race_rc);
		} else {
			fprintf(stderr, "lazyprobe: bad step %s\n", s);
			return 3;
		}
	}
	return 0;
}
