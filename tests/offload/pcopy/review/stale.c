/* review: a run's cached mapping outlives the mapping (stale run).
 *  stale shared   : gather half into anon A, replace A by MAP_SHARED file
 *                   (MAP_FIXED), gather the second half: file pages beyond
 *                   the written half resident/allocated?
 *  stale ro       : replace by a read-only private anon mapping: pop_off?
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>
#include "frontend.h"
#include "pcopy.h"


#define N 4096
#define BYTES ((size_t)192 << 20)

static long resident(void *p, size_t len)
{
	size_t pg = 4096, np = len / pg; long r = 0;
	unsigned char *v = malloc(np);
	if (mincore(p, len, v) != 0) { perror("mincore"); return -1; }
	for (size_t i = 0; i < np; i++) r += v[i] & 1;
	free(v);
	return r;
}

int main(int argc, char **argv)
{
	const char *kind = argc > 1 ? argv[1] : "shared";
	double *src = malloc(sizeof(double) * N * N), *dst;
	int fd;
	struct stat st;

	gpo_pcopy_min_n = N;
	for (size_t i = 0; i < (size_t)N * N; i++) src[i] = (double)i;
	dst = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	/* first half of the gather: a run, its mapping [dst, dst+64M) cached */
	for (int64_t j = 0; j < 2; j++)
		if (!gpo_pcopy(N, src + j, N, dst + j * N, 1, 8)) { printf("not taken\n"); return 2; }
	char path[] = "/tmp/review-staleXXXXXX";
	fd = mkstemp(path);
	unlink(path);
	if (ftruncate(fd, BYTES) != 0) return 2;
	if (!strcmp(kind, "private")) {
		/* freed, and a file mapped privately (copy-on-write: until this
		 * process writes a page, it reads the file's current content) */
		/* MAP_FIXED: the kernel would often pick the freed address
		 * itself, not always; the case is the address reused */
		void *f = mmap(dst, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
		if (f != dst) { printf("not at the address\n"); return 2; }
		for (int64_t j = 2; j < N; j++)
			if (!gpo_pcopy(N, src + j, N, dst + j * N, 1, 8)) return 2;
		/* another writer updates the file after the program's last byte */
		char pat[4096];
		memset(pat, 0x77, sizeof pat);
		off_t at = (off_t)140 << 20;
		if (pwrite(fd, pat, sizeof pat, at) != (ssize_t)sizeof pat) return 2;
		unsigned char seen = ((unsigned char *)dst)[at];
		printf("private file mapping: the file now holds 0x77 at 140 MiB; the program reads 0x%02x there (%s)\n",
		       seen, seen == 0x77 ? "the file's content" : "a copy made behind its back");
		return 0;
	}
	if (!strcmp(kind, "shared")) {
		/* replaced by a file mapping at the same address */
		void *f = mmap(dst, BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
		printf("file mapped %s the freed buffer's address\n", f == dst ? "at" : "NOT at");
		if (f != dst) return 2;
	} else {
		if (mmap(dst, BYTES, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != dst) return 2;
		/* a copy somewhere else still ascending into... the ro memory can't be written;
		 * use a separate anonymous destination above */
	}
	if (!strcmp(kind, "shared")) {
		/* the program writes the second half itself... through the engine */
		for (int64_t j = 2; j < N; j++)
			if (!gpo_pcopy(N, src + j, N, dst + j * N, 1, 8)) { printf("not taken %ld\n", (long)j); return 2; }
		msync(dst, BYTES, MS_SYNC);
		fstat(fd, &st);
		off_t end = (off_t)N * N * 8, d = lseek(fd, end, SEEK_DATA), h = d >= 0 ? lseek(fd, d, SEEK_HOLE) : -1;
		printf("shared file of %zu MiB: the program wrote [0.0625, %lld) MiB; file blocks %lld KiB; data after the last byte written: [%.1f, %.1f) MiB\n",
		       BYTES >> 20, (long long)end >> 20, (long long)st.st_blocks / 2,
		       d < 0 ? -1.0 : d / 1048576.0, h < 0 ? -1.0 : h / 1048576.0);
	}
	return 0;
}
