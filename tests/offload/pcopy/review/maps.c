/* review: gpo_pcopy_anon_vma against odd /proc/self/maps lines */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#include "pcopy.h"
#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
static int bad;
static void check(const char *what, void *p, size_t len, int want)
{
	uintptr_t lo = 0, hi = 0;
	int heap = 0;
	int rc = gpo_pcopy_anon_vma((uintptr_t)p + 100, &lo, &hi, &heap);
	int ok = rc == want && (rc != 0 || (lo == (uintptr_t)p && hi == (uintptr_t)p + len));
	if (!ok) bad++;
	printf("%-28s rc %d want %d %s\n", what, rc, want, ok ? "ok" : "WRONG");
}
int main(void)
{
	char dir[8192] = "/tmp/rvmaps";
	size_t pg = 4096, len = 16 * pg;
	mkdir(dir, 0700);
	/* a path of ~4000 bytes (longer than vma.c's 1536-byte buffer) */
	while (strlen(dir) < 3900) {
		strcat(dir, "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa with space");
		mkdir(dir, 0700);
	}
	char path[8192];
	snprintf(path, sizeof path, "%s/f (deleted)", dir);
	int fd = open(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0) { perror(path); return 2; }
	ftruncate(fd, 1 << 20);
	unlink(path);
	/* many long-path file mappings, each followed by an anon mapping, guard pages between */
	void *anon[40];
	for (int i = 0; i < 40; i++) {
		char *r = mmap(NULL, len + 2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		mmap(r, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);      /* long path line, rw-p */
		mprotect(r + pg, len, PROT_READ | PROT_WRITE);
		anon[i] = r + pg;
		if (i % 3 == 0)
			prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)anon[i], len, (unsigned long)"my buffer");
	}
	for (int i = 0; i < 40; i++) {
		char w[32]; snprintf(w, sizeof w, "anon %d%s", i, i % 3 == 0 ? " [anon:..]" : "");
		check(w, anon[i], len, 0);
		check("long-path file (rw-p)", (char *)anon[i] - pg, pg, -1);
	}
	/* memfd private: "/memfd:x (deleted)" */
	int mfd = memfd_create("x y", 0); ftruncate(mfd, len);
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, mfd, 0);
	check("memfd private", m, len, -1);
	void *hp = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (hp != MAP_FAILED) check("hugetlb anon", hp, 2 << 20, -1);
	printf("%d wrong\n", bad);
	return bad != 0;
}
