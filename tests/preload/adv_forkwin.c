/*
 * adv_forkwin.c - fork in one thread while another thread is in the
 * middle of the process's first cuInit, for test_preload_adversarial.py.
 * Run with LD_PRELOAD="adv_atfork_shim.so:libgpumutex.so".
 *
 * Thread A calls cuInit (the pointer dlsym handed out). The shim stops A
 * inside the gate's pthread_atfork call; the main thread then forks, and
 * lets A go. The child calls cuInit and prints "child-rc=N"; alarm(20)
 * turns a deadlock into SIGALRM. Output: "window=0|1" (whether A was
 * stopped there at all), "a-rc=N", "child-status=exit:N|signal:N".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*init_fn)(unsigned int);
static init_fn init;
static int a_done, a_rc = -1;

static void *thread_a(void *arg)
{
	(void)arg;
	a_rc = init(0);
	__atomic_store_n(&a_done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	void (*arm)(void), (*release)(void);
	int (*in_window)(void);
	pthread_t t;
	pid_t pid;
	int st, window;

	*(void **)&arm = dlsym(RTLD_DEFAULT, "adv_shim_arm");
	*(void **)&release = dlsym(RTLD_DEFAULT, "adv_shim_release");
	*(void **)&in_window = dlsym(RTLD_DEFAULT, "adv_shim_in_window");
	if (!h || !(init = (init_fn)dlsym(h, "cuInit")) || !arm) {
		fprintf(stderr, "adv_forkwin: setup failed\n");
		return 3;
	}
	arm();
	pthread_create(&t, NULL, thread_a, NULL);
	while (!in_window() && !__atomic_load_n(&a_done, __ATOMIC_SEQ_CST))
		sched_yield();
	window = in_window();
	printf("window=%d\n", window);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		alarm(20); /* a deadlock ends as SIGALRM, never as a hang */
		printf("child-rc=%d\n", init(0));
		fflush(stdout);
		_exit(0);
	}
	release();
	pthread_join(t, NULL);
	printf("a-rc=%d\n", a_rc);
	waitpid(pid, &st, 0);
	if (WIFSIGNALED(st))
		printf("child-status=signal:%d\n", WTERMSIG(st));
	else
		printf("child-status=exit:%d\n", WEXITSTATUS(st));
	return 0;
}
