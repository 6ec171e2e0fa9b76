/* review: completion protocol under changing thread counts (GPU on/off:
 * 4 vs 8 threads via gpo_pcopy_cpus), populate jobs between gathers,
 * several caller threads, fork children; every byte checked. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "frontend.h"
#include "pcopy.h"
#define N 1024
static int bad;
static void *caller(void *arg)
{
	int id = (int)(intptr_t)arg;
	double *src = malloc(sizeof(double) * N * N);
	for (size_t i = 0; i < (size_t)N * N; i++) src[i] = (double)i + id * 1e7;
	for (int it = 0; it < 16; it++) {
		size_t bytes = ((size_t)N * N * 8) + ((size_t)(it % 5) << 23);
		double *dst = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (id == 0) gpo_pcopy_gpu(it & 1);
		for (int64_t j = 0; j < N; j++)
			if (!gpo_pcopy(N, src + j, N, dst + j * N, 1, 8))
				for (int64_t i = 0; i < N; i++) dst[j * N + i] = src[j + i * N];
		for (int64_t j = 0; j < N; j++)
			for (int64_t i = 0; i < N; i++)
				if (dst[j * N + i] != src[j + i * N]) { __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED); goto out; }
	out:
		munmap(dst, bytes);
		if (id == 1 && it % 10 == 5) {
			pid_t p = fork();
			if (p == 0) {
				double *d2 = malloc(sizeof(double) * N * N);
				for (int64_t j = 0; j < N; j++)
					if (!gpo_pcopy(N, src + j, N, d2 + j * N, 1, 8))
						for (int64_t i = 0; i < N; i++) d2[j * N + i] = src[j + i * N];
				for (int64_t j = 0; j < N; j++)
					for (int64_t i = 0; i < N; i++)
						if (d2[j * N + i] != src[j + i * N]) _exit(3);
				_exit(0);
			}
			int st; waitpid(p, &st, 0);
			if (!WIFEXITED(st) || WEXITSTATUS(st)) { printf("child status %d\n", st); bad++; }
		}
	}
	free(src);
	return NULL;
}
int main(void)
{
	pthread_t th[3];
	gpo_pcopy_min_n = 64;
	gpo_pcopy_cpus = 12;   /* 8 threads on the CPU, 12 with the GPU */
	for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, caller, (void *)(intptr_t)i);
	for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
	printf("stress: %d bad\n", bad);
	return bad != 0;
}
