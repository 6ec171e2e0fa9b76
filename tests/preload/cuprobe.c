/*
 * cuprobe.c - reach cuInit along one path and report, for test_preload*.py.
 *
 * Not linked with libcuda: every mode finds the driver at run time, the way
 * the CUDA runtime does. Prints "rc=<cuInit result>" and
 * "cvd=<CUDA_VISIBLE_DEVICES after it>" on stdout. Usage:
 *   cuprobe dlopen            dlopen(libcuda.so.1, RTLD_LOCAL) + dlsym(h)
 *   cuprobe default           dlopen(RTLD_GLOBAL) + dlsym(RTLD_DEFAULT)
 *   cuprobe dlvsym VERSION    dlvsym(h, "cuInit", VERSION)
 *   cuprobe gpa2 VER FLAGS    dlsym(h, cuGetProcAddress_v2)("cuInit", ...)
 *   cuprobe gpa1 VER FLAGS    dlsym(h, cuGetProcAddress)("cuInit", ...)
 *   cuprobe fallback          like the CUDA runtime: cuGetProcAddress_v2
 *                             ("cuInit"), and plain dlsym when that fails
 *   cuprobe self VER          cuGetProcAddress_v2("cuGetProcAddress", VER),
 *                             then cuInit through the returned function,
 *                             called with the ABI VER implies
 *   cuprobe errno             errno is the same before and after cuInit
 *   cuprobe fds               after cuInit, list the descriptors above 2:
 *                             "fd=<target> cloexec=<0|1>"
 *   cuprobe threads N         N threads call cuInit at the same moment
 *   cuprobe work K            cuInit, use device 0 for K ticks, release
 *   cuprobe hold              cuInit, use device 0, print "ready", wait
 *                             for EOF on stdin, release
 *   cuprobe fork              cuInit, fork; the child calls cuInit again,
 *                             prints "child-rc=", waits for EOF on stdin;
 *                             the parent exits at once
 *   cuprobe spawn PROG ARGS   cuInit, then fork+exec PROG and wait for it
 *   cuprobe closefds MODE...  close every descriptor above 2, then MODE
 * With CUPROBE_TOUCH=1, every cuInit above is followed by a first device
 * call (cuMemGetInfo_v2, which needs no context to take the lease): the
 * lease is taken there (docs/preload.md, "When the lease is taken"), and
 * its gate error (1 or 100) is reported as the rc when it has one.
 * Exit status 0 unless the probe itself could not run (3).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*init_fn)(unsigned int);
typedef int (*gpa1_fn)(const char *, void **, int, unsigned long long);
typedef int (*gpa2_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*retain_fn)(void **, int);
typedef int (*setcur_fn)(void *);
typedef int (*sync_fn)(void);
typedef int (*release_fn)(int);

static void *lib;

static void *must(void *p, const char *what)
{
	if (!p) {
		fprintf(stderr, "cuprobe: %s: %s\n", what, dlerror());
		exit(3);
	}
	return p;
}

static void *driver(int flags)
{
	if (!lib)
		lib = must(dlopen("libcuda.so.1", RTLD_NOW | flags), "dlopen");
	return lib;
}

static void *fn(const char *name)
{
	void *p;
	*(void **)&p = must(dlsym(driver(RTLD_LOCAL), name), name);
	return p;
}

static void report(int rc)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	printf("rc=%d\ncvd=%s\n", rc, cvd ? cvd : "-unset-");
	fflush(stdout);
}

static void tick(int n)
{
	sync_fn sync;
	*(void **)&sync = fn("cuCtxSynchronize");
	for (int i = 0; i < n; i++) {
		struct timespec ts = { 0, 1000000 };
		sync();
		nanosleep(&ts, NULL);
	}
}

/* Use device 0 (the first visible one): primary context, current. */
static int use_device(void)
{
	retain_fn retain;
	setcur_fn setcur;
	void *ctx = NULL;
	int rc;

	*(void **)&retain = fn("cuDevicePrimaryCtxRetain");
	*(void **)&setcur = fn("cuCtxSetCurrent");
	rc = retain(&ctx, 0);
	if (rc == 0)
		rc = setcur(ctx);
	return rc;
}

static void unuse_device(void)
{
	release_fn release;
	*(void **)&release = fn("cuDevicePrimaryCtxRelease");
	release(0);
}

static void wait_stdin_eof(void)
{
	char buf[64];
	while (read(0, buf, sizeof buf) > 0)
		;
}

static int touch(int rc)
{
	typedef int (*info_fn)(size_t *, size_t *);
	const char *t = getenv("CUPROBE_TOUCH");
	info_fn info;
	size_t a, b;
	int r;

	if (rc || !t || strcmp(t, "1"))
		return rc;
	*(void **)&info = fn("cuMemGetInfo_v2");
	r = info(&a, &b);
	return r == 1 || r == 100 ? r : 0;
}

static int init_dlopen(void)
{
	init_fn f;
	*(void **)&f = fn("cuInit");
	return touch(f(0));
}

static pthread_barrier_t barrier;
static int thread_rc[64];

static void *thread_main(void *arg)
{
	int i = (int)(long)arg;
	pthread_barrier_wait(&barrier);
	thread_rc[i] = init_dlopen();
	return NULL;
}

static void close_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int keep = d ? dirfd(d) : -1, fds[1024], n = 0;

	while (d && (e = readdir(d)) && n < 1024) {
		int fd = atoi(e->d_name);
		if (fd > 2 && fd != keep)
			fds[n++] = fd;
	}
	if (d)
		closedir(d);
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static int run(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "dlopen")) {
		report(init_dlopen());
	} else if (!strcmp(mode, "default")) {
		init_fn f;
		driver(RTLD_GLOBAL);
		*(void **)&f = must(dlsym(RTLD_DEFAULT, "cuInit"), "RTLD_DEFAULT");
		report(f(0));
	} else if (!strcmp(mode, "dlvsym") && argc > 2) {
		init_fn f;
		*(void **)&f = must(dlvsym(driver(RTLD_LOCAL), "cuInit", argv[2]),
				    "dlvsym");
		report(f(0));
	} else if (!strcmp(mode, "gpa2") && argc > 3) {
		gpa2_fn g;
		init_fn f = NULL;
		int st = -1, rc;
		*(void **)&g = fn("cuGetProcAddress_v2");
		rc = g("cuInit", (void **)&f, atoi(argv[2]),
		       strtoull(argv[3], NULL, 0), &st);
		printf("gpa-rc=%d status=%d\n", rc, st);
		report(f ? f(0) : -1);
	} else if (!strcmp(mode, "gpa1") && argc > 3) {
		gpa1_fn g;
		init_fn f = NULL;
		int rc;
		*(void **)&g = fn("cuGetProcAddress");
		rc = g("cuInit", (void **)&f, atoi(argv[2]),
		       strtoull(argv[3], NULL, 0));
		printf("gpa-rc=%d\n", rc);
		report(f ? f(0) : -1);
	} else if (!strcmp(mode, "fallback")) {
		gpa2_fn g;
		init_fn f = NULL;
		int st = -1, rc = -1;
		*(void **)&g = dlsym(driver(RTLD_LOCAL), "cuGetProcAddress_v2");
		if (g)
			rc = g("cuInit", (void **)&f, 2000, 0, &st);
		printf("gpa-rc=%d\n", rc);
		if (rc != 0 || !f)
			*(void **)&f = fn("cuInit");
		report(f(0));
	} else if (!strcmp(mode, "self") && argc > 2) {
		int ver = atoi(argv[2]), st = -1, rc;
		gpa2_fn g;
		void *p = NULL;
		init_fn f = NULL;
		Dl_info info;
		*(void **)&g = fn("cuGetProcAddress_v2");
		rc = g("cuGetProcAddress", &p, ver, 0, &st);
		if (rc || !p) {
			printf("self-rc=%d\n", rc);
			report(-1);
			return 0;
		}
		printf("self-from=%s\n",
		       dladdr(p, &info) && info.dli_fname ? info.dli_fname : "?");
		/* Which ABI came back: the same function dlsym gives for the
		 * 4-argument or for the 5-argument name. */
		printf("self-is-v1=%d\nself-is-v2=%d\n",
		       p == dlsym(driver(RTLD_LOCAL), "cuGetProcAddress"),
		       p == dlsym(driver(RTLD_LOCAL), "cuGetProcAddress_v2"));
		/* The ABI the version implies, as the CUDA runtime assumes. */
		if (ver >= 12000)
			rc = ((gpa2_fn)p)("cuInit", (void **)&f, ver, 0, &st);
		else
			rc = ((gpa1_fn)p)("cuInit", (void **)&f, ver, 0);
		printf("gpa-rc=%d\n", rc);
		printf("init-from=%s\n",
		       f && dladdr((void *)f, &info) && info.dli_fname ?
		       info.dli_fname : "?");
		report(f ? f(0) : -1);
	} else if (!strcmp(mode, "errno")) {
		init_fn f;
		int rc;
		*(void **)&f = fn("cuInit");
		errno = 4242;
		rc = f(0);
		printf("errno-after=%d\n", errno);
		report(rc);
	} else if (!strcmp(mode, "fds")) {
		DIR *d;
		struct dirent *e;
		report(init_dlopen());
		d = opendir("/proc/self/fd");
		while (d && (e = readdir(d))) {
			char path[64], target[4096], info[4096];
			int fd = atoi(e->d_name), cloexec = 0;
			ssize_t n;
			FILE *fi;
			if (fd <= 2 || fd == dirfd(d))
				continue;
			snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
			n = readlink(path, target, sizeof target - 1);
			target[n > 0 ? n : 0] = '\0';
			snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
			fi = fopen(path, "r");
			while (fi && fgets(info, sizeof info, fi))
				if (!strncmp(info, "flags:", 6))
					cloexec = (strtol(info + 6, NULL, 8) & 02000000) != 0;
			if (fi)
				fclose(fi);
			printf("fd=%s cloexec=%d\n", target, cloexec);
		}
		if (d)
			closedir(d);
	} else if (!strcmp(mode, "threads") && argc > 2) {
		int n = atoi(argv[2]);
		pthread_t t[64];
		if (n < 1 || n > 64)
			return 3;
		driver(RTLD_LOCAL);
		pthread_barrier_init(&barrier, NULL, (unsigned)n);
		for (int i = 0; i < n; i++)
			pthread_create(&t[i], NULL, thread_main, (void *)(long)i);
		for (int i = 0; i < n; i++)
			pthread_join(t[i], NULL);
		for (int i = 0; i < n; i++)
			printf("thread-rc=%d\n", thread_rc[i]);
		report(thread_rc[0]);
	} else if (!strcmp(mode, "work") && argc > 2) {
		int rc = init_dlopen();
		report(rc);
		if (rc == 0 && use_device() == 0) {
			tick(atoi(argv[2]));
			unuse_device();
		}
	} else if (!strcmp(mode, "hold")) {
		int rc = init_dlopen();
		report(rc);
		if (rc == 0 && use_device() == 0)
			tick(1);
		printf("ready %d\n", (int)getpid());
		fflush(stdout);
		wait_stdin_eof();
		if (rc == 0) {
			tick(1);
			unuse_device();
		}
	} else if (!strcmp(mode, "fork")) {
		int rc = init_dlopen();
		pid_t pid;
		report(rc);
		pid = fork();
		if (pid == 0) {
			printf("child-rc=%d\nchild-pid=%d\n", init_dlopen(),
			       (int)getpid());
			fflush(stdout);
			wait_stdin_eof();
			_exit(0);
		}
		printf("parent-done\n");
	} else if (!strcmp(mode, "spawn") && argc > 2) {
		int rc = init_dlopen(), status = 0;
		pid_t pid;
		report(rc);
		pid = fork();
		if (pid == 0) {
			execv(argv[2], argv + 2);
			_exit(127);
		}
		waitpid(pid, &status, 0);
		printf("spawn-status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	} else if (!strcmp(mode, "closefds") && argc > 2) {
		close_fds();
		return run(argc - 1, argv + 1);
	} else {
		fprintf(stderr, "cuprobe: bad arguments\n");
		return 3;
	}
	return 0;
}

int main(int argc, char **argv)
{
	return run(argc, argv);
}
