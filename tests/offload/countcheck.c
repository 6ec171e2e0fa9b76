/*
 * countcheck - a known number of calls, for the exit summary's counts
 * (test_offload_frontend.py): each round is one ddot_ (small), one
 * dgetrs_ of libcountlib.so (small, and its 4 nested BLAS calls) and one
 * dgeqrf_ workspace query: 7 calls, 2 small, 4 nested, 1 workspace.
 *   countcheck A R C D: A rounds in the main thread, then 3 threads of R
 *   rounds each (joined), then a fork whose child makes C rounds and
 *   exits (its own summary), then D more rounds in the parent.
 * Prints "ok" on stdout when every result was right, errno included: the
 * caller's across ddot_ (which leaves it alone), 42 after dgetrs_ (which
 * sets it).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

double ddot_(const int *, const double *, const int *, const double *,
	     const int *);
void dgetrs_(const char *, const int *, const int *, const double *,
	     const int *, const int *, double *, const int *, int *, size_t);
void dgeqrf_(const int *, const int *, double *, const int *, double *,
	     double *, const int *, int *);

static int bad;

static void *rounds(void *arg)
{
	long k = (long)arg;
	double x[8] = { 1, 1, 1, 1, 1, 1, 1, 1 }, a = 1, b, w, tau;
	int eight = 8, one = 1, m1 = -1, ipiv = 1, info;

	for (long i = 0; i < k; i++) {
		b = 0;
		errno = 9;
		if (ddot_(&eight, x, &one, x, &one) != 8 || errno != 9)
			__atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
		errno = 7;
		dgetrs_("N", &one, &one, &a, &one, &ipiv, &b, &one, &info, 1);
		if (b != 1 || info || errno != 42)
			__atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
		w = 0;
		dgeqrf_(&one, &one, &a, &one, &tau, &w, &m1, &info);
		if (w != 1)
			__atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[3];
	int st;
	pid_t pid;

	if (argc != 5)
		return 2;
	rounds((void *)atol(argv[1]));
	for (int i = 0; i < 3; i++)
		if (pthread_create(&th[i], NULL, rounds, (void *)atol(argv[2])))
			return 3;
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return 4;
	if (pid == 0) {
		rounds((void *)atol(argv[3]));
		exit(bad ? 1 : 0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		bad = 1;
	rounds((void *)atol(argv[4]));
	printf("%s\n", bad ? "bad" : "ok");
	return bad;
}
