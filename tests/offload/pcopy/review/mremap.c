/* review: the hint splits the program's mapping into several VMAs, so a
 * later mremap of the whole mapping (grow, or shrink) fails with EFAULT. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "frontend.h"
#include "pcopy.h"
#define N 1024
int main(void)
{
	size_t bytes = (size_t)64 << 20;
	double *src = malloc(sizeof(double) * N * N);
	for (size_t i = 0; i < (size_t)N * N; i++) src[i] = (double)i;
	/* an arena the program grows with mremap; its 8 MiB matrix gathered into it */
	double *dst = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int taken = 0;
	gpo_pcopy_min_n = N;
	for (int64_t j = 0; j < N; j++)
		taken += gpo_pcopy(N, src + j, N, dst + j * N, 1, 8);
	char cmd[200];
	snprintf(cmd, sizeof cmd, "grep -c '' /proc/%d/maps >/dev/null; awk -v a=%lx 'BEGIN{}' /dev/null", getpid(), (unsigned long)dst);
	FILE *f = fopen("/proc/self/maps", "r"); char line[512]; int vmas = 0;
	while (fgets(line, sizeof line, f)) { unsigned long a, b; sscanf(line, "%lx-%lx", &a, &b); if (a >= (uintptr_t)dst && b <= (uintptr_t)dst + bytes) vmas++; }
	fclose(f);
	errno = 0;
	void *p = mremap(dst, bytes, 2 * bytes, MREMAP_MAYMOVE);
	printf("engine took %d of %d columns; the mapping is %d VMAs; mremap grow: %s\n", taken, N, vmas,
	       p == MAP_FAILED ? strerror(errno) : "ok");
	if (p != MAP_FAILED) { dst = p; bytes *= 2; }
	p = mremap(dst, bytes, bytes / 2, 0);
	printf("mremap shrink: %s\n", p == MAP_FAILED ? strerror(errno) : "ok");
	return 0;
}
