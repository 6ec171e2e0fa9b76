/*
 * adv_forkbusy.c - fork while another thread waits in the gate (the GPU
 * is held by another job). Descriptor 2 is a pipe read here until the
 * waiting line shows thread A is inside the gate, taking the lease at its
 * first device call (cuInit, then cuDevicePrimaryCtxRetain); then N
 * children are forked, each calls cuInit and retains the primary context
 * (alarm(30): a deadlock ends as SIGALRM) and exits with 0 if both
 * returned 0, else 1. Prints "forked" once all
 * are started, then "a-rc=N" and one "child-status=..." per child.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*init_fn)(unsigned int);
typedef int (*retain_fn)(void **, int);
static init_fn init;
static retain_fn retain;
static int a_rc = -1;

/* cuInit, then the first device call, which takes the lease. */
static int use(void)
{
	void *ctx;
	int rc = init(0);

	return rc ? rc : retain(&ctx, 0);
}

static void *thread_a(void *arg)
{
	(void)arg;
	a_rc = use();
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 4, p[2], err = dup(2);
	char buf[4096];
	size_t got = 0;
	pid_t kids[32];
	void *h;
	pthread_t t;

	if (n > 32)
		n = 32;
	if (pipe(p) || dup2(p[1], 2) < 0)
		return 3;
	close(p[1]);
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h || !(init = (init_fn)dlsym(h, "cuInit")) ||
	    !(retain = (retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain")))
		return 3;
	pthread_create(&t, NULL, thread_a, NULL);
	while (got + 1 < sizeof buf) {
		ssize_t r = read(p[0], buf + got, sizeof buf - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
		buf[got] = '\0';
		if (strstr(buf, "waits for") && strchr(strstr(buf, "waits for"), '\n'))
			break;
	}
	(void)!write(err, buf, got);
	if (!strstr(buf, "waits for"))
		return 4;
	dup2(err, 2); /* children's messages go to the real stderr */
	for (int i = 0; i < n; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			alarm(30);
			_exit(use() == 0 ? 0 : 1);
		}
	}
	printf("forked\n");
	fflush(stdout);
	pthread_join(t, NULL);
	printf("a-rc=%d\n", a_rc);
	for (int i = 0; i < n; i++) {
		int st;
		waitpid(kids[i], &st, 0);
		if (WIFSIGNALED(st))
			printf("child-status=signal:%d\n", WTERMSIG(st));
		else
			printf("child-status=exit:%d\n", WEXITSTATUS(st));
	}
	return 0;
}
