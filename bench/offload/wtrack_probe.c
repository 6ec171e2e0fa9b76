/*
 * wtrack_probe.c - the write-tracking candidates on this machine: does
 * src/offload/wtrack (async userfaultfd write-protect + PAGEMAP_SCAN) see
 * every kind of write the residency must see, and what do it, soft-dirty
 * bits and hashing cost? `make bench-wtrack` (bench/offload/module.mk)
 * builds and runs it; docs/offload-residency.md has its figures.
 *
 * Output: one line per case, "case ok|FAIL", then one line per timing,
 * "time <what> <value> <unit>". Exit status 1 if a case failed.
 * Needs Linux 6.7 or later (say so and exit 77 when the mechanism is
 * missing). Cases only, no timings: --cases.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

#include "wtrack/wtrack.h"

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

static int fails;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void check(const char *name, int ok)
{
	printf("%-44s %s\n", name, ok ? "ok" : "FAIL");
	fflush(stdout);
	if (!ok)
		fails++;
}

static char *anon(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

/* Protected and clean, as a case's start. */
static int armed(char *p, size_t len)
{
	return gpo_wt_protect(p, len) == 0 && gpo_wt_clean(p, len);
}

static void *writer(void *arg)
{
	((char *)arg)[12345] ^= 1;
	return NULL;
}

#define MB (1024u * 1024u)

static void cases(void)
{
	size_t len = 16 * MB;
	char *p = anon(len), *q;
	int fd[2];
	pthread_t t;

	memset(p, 1, len);
	check("fresh range clean after protect", armed(p, len));
	check("still clean (reading does not count)", p[100] == 1 && gpo_wt_clean(p, len));
	p[len - 1] = 2;
	check("write, same thread: seen", !gpo_wt_clean(p, len));
	check("write: unaffected part still clean", gpo_wt_clean(p, len / 2));
	check("re-armed clean", armed(p, len));
	pthread_create(&t, NULL, writer, p);
	pthread_join(t, NULL);
	check("write, other thread: seen", !gpo_wt_clean(p, len));

	/* The kernel's writes: read(2), recv, pread. */
	check("re-armed", armed(p, len));
	if (pipe(fd) == 0) {
		ssize_t n = write(fd[1], "xyz", 3);
		check("read(2) into the range succeeds",
		      n == 3 && read(fd[0], p + 8 * MB, 3) == 3 && p[8 * MB] == 'x');
		check("read(2): seen", !gpo_wt_clean(p, len));
		close(fd[0]);
		close(fd[1]);
	}
	check("re-armed", armed(p, len));
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0) {
		ssize_t n = send(fd[1], "abc", 3, 0);
		check("recv into the range succeeds",
		      n == 3 && recv(fd[0], p + 4 * MB + 7, 3, 0) == 3 &&
		      p[4 * MB + 7] == 'a');
		check("recv: seen", !gpo_wt_clean(p, len));
		close(fd[0]);
		close(fd[1]);
	}
	check("re-armed", armed(p, len));
	{
		char path[] = "/tmp/wtprobeXXXXXX";
		int f = mkstemp(path);
		ssize_t n = f >= 0 ? write(f, "pqr", 3) : -1;
		check("pread into the range succeeds",
		      n == 3 && pread(f, p + 12 * MB, 3, 0) == 3 && p[12 * MB] == 'p');
		check("pread: seen", !gpo_wt_clean(p, len));
		if (f >= 0) {
			close(f);
			unlink(path);
		}
	}

	/* fork: the child's writes are to its own copy; the parent's
	 * after fork must be seen; the child sees nothing as clean. */
	check("re-armed", armed(p, len));
	{
		pid_t c = fork();
		int st;
		if (c == 0) {
			int ok = !gpo_wt_clean(p, len);
			p[5] = 9;
			_exit(ok ? 0 : 1);
		}
		waitpid(c, &st, 0);
		check("fork: child never answers clean", WIFEXITED(st) && WEXITSTATUS(st) == 0);
		check("fork: child's write leaves parent clean", p[5] == 1 && gpo_wt_clean(p, len));
		p[6] = 3;
		check("fork: parent's write after fork seen", !gpo_wt_clean(p, len));
	}
	check("re-armed", armed(p, len));
	{
		pid_t c = fork();
		int st;
		if (c == 0)
			_exit(0);
		waitpid(c, &st, 0);
		p[len / 2] = 4;   /* the copy-on-write fault, after the child left */
		check("fork: parent's write after child exit seen", !gpo_wt_clean(p, len));
	}

	check("re-armed", armed(p, len));
	madvise(p + MB, 4096, MADV_DONTNEED);
	check("MADV_DONTNEED: seen", !gpo_wt_clean(p, len));
	check("re-armed", armed(p, len));
	madvise(p + MB, 4096, MADV_FREE);
	check("MADV_FREE then write: seen", (p[MB] = 5, !gpo_wt_clean(p, len)));

	/* munmap, then a new mapping at the same address. */
	check("re-armed", armed(p, len));
	munmap(p, len);
	q = mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
		 MAP_FIXED_NOREPLACE, -1, 0);
	check("munmap + new mapping same address: not clean",
	      q == p && !gpo_wt_clean(p, len));
	memset(p, 1, len);
	check("mprotect round trip, then write: seen",
	      armed(p, len) && mprotect(p, len, PROT_READ) == 0 &&
	      mprotect(p, len, PROT_READ | PROT_WRITE) == 0 &&
	      gpo_wt_clean(p, len) && (p[77] = 7, !gpo_wt_clean(p, len)));

	/* mremap: moved away; then something else there. */
	check("re-armed", armed(p, len));
	q = mremap(p, len, 2 * len, MREMAP_MAYMOVE);
	check("mremap (moved or grown): old range not clean", q != MAP_FAILED &&
	      (q != p ? !gpo_wt_clean(p, len) : 1));
	check("mremap: the new range not clean before its protect",
	      q != p ? !gpo_wt_clean(q, len) : 1);
	check("mremap'd range can be protected again", armed(q, len));
	munmap(q, 2 * len);

	/* Shared memory: never tracked. */
	q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	memset(q, 1, len);
	check("MAP_SHARED anonymous refused", gpo_wt_protect(q, len) == GPO_WT_R_SHARED &&
	      !gpo_wt_clean(q, len));
	munmap(q, len);
	{
		int m = (int)syscall(SYS_memfd_create, "wtprobe", 0);
		q = MAP_FAILED;
		if (m >= 0 && ftruncate(m, (off_t)len) == 0)
			q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, m, 0);
		check("file mapping (memfd, private) refused",
		      q != MAP_FAILED && gpo_wt_protect(q, len) == GPO_WT_R_SHARED);
		if (q != MAP_FAILED)
			munmap(q, len);
		if (m >= 0)
			close(m);
	}

	/* A named anonymous mapping (glibc's decorated arenas): tracked. */
	{
		q = anon(len);
		memset(q, 1, len);
		if (prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)q,
			  len, (unsigned long)"wtprobe") == 0) {
			check("named anonymous mapping tracked", armed(q, len));
			q[9] = 2;
			check("named anonymous mapping: write seen",
			      !gpo_wt_clean(q, len));
		}
		munmap(q, len);
	}

	/* Transparent huge pages. */
	{
		size_t hl = 64 * MB;
		char *r = anon(hl + 2 * MB), *h;
		h = (char *)(((uintptr_t)r + 2 * MB - 1) & ~(uintptr_t)(2 * MB - 1));
		madvise(h, hl, MADV_HUGEPAGE);
		memset(h, 1, hl);
		check("THP range armed", armed(h, hl));
		h[3 * MB + 5] = 2;
		check("THP write seen", !gpo_wt_clean(h, hl));
		check("THP part before the write still clean", gpo_wt_clean(h, 2 * MB));
		check("THP re-armed", armed(h, hl));
		madvise(h + 4 * MB, 2 * MB, MADV_DONTNEED);
		check("THP MADV_DONTNEED seen", !gpo_wt_clean(h, hl));
		munmap(r, hl + 2 * MB);
	}

	/* The program's own userfaultfd: works on other memory; on ours it
	 * gets EBUSY until gpo_wt_reset (documented). */
	{
		int u = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
		struct uffdio_api api = { .api = UFFD_API };
		struct uffdio_register reg;
		char *o = anon(MB);
		int ok = u >= 0 && ioctl(u, UFFDIO_API, &api) == 0;
		memset(&reg, 0, sizeof reg);
		reg.range.start = (uintptr_t)o;
		reg.range.len = MB;
		reg.mode = UFFDIO_REGISTER_MODE_MISSING;
		check("program's userfaultfd on other memory works",
		      ok && ioctl(u, UFFDIO_REGISTER, &reg) == 0);
		check("re-armed", armed(p = anon(len), len));
		reg.range.start = (uintptr_t)p;
		reg.range.len = len;
		check("program's userfaultfd on tracked memory: EBUSY",
		      ioctl(u, UFFDIO_REGISTER, &reg) != 0 && errno == EBUSY);
		gpo_wt_reset(0);
		check("after reset: not clean", !gpo_wt_clean(p, len));
		check("after reset: program's register works",
		      ioctl(u, UFFDIO_REGISTER, &reg) == 0);
		check("after reset: protect refused (busy)",
		      gpo_wt_protect(p, len) == GPO_WT_R_BUSY);
		if (u >= 0)
			close(u);
		munmap(o, MB);
		munmap(p, len);
	}
	/* A closed descriptor of ours: never clean, then starts over. */
	p = anon(len);
	memset(p, 1, len);
	check("re-armed", armed(p, len));
	for (int f = 3; f < 64; f++) {
		char l[64], t2[64];
		ssize_t n;
		snprintf(l, sizeof l, "/proc/self/fd/%d", f);
		n = readlink(l, t2, sizeof t2 - 1);
		if (n > 0 && (t2[n] = 0, strstr(t2, "userfaultfd")))
			close(f);
	}
	check("program closed our userfaultfd: not clean", !gpo_wt_clean(p, len));
	check("protect again works", armed(p, len));
	munmap(p, len);
}

/* 64-bit multiply-xor over 4 lanes: about the fastest plain-C hash. */
static uint64_t hash(const uint64_t *w, size_t n)
{
	uint64_t a = 1, b = 2, c = 3, d = 4;
	for (size_t i = 0; i + 4 <= n; i += 4) {
		a = (a ^ w[i]) * 0x9e3779b97f4a7c15ull;
		b = (b ^ w[i + 1]) * 0x9e3779b97f4a7c15ull;
		c = (c ^ w[i + 2]) * 0x9e3779b97f4a7c15ull;
		d = (d ^ w[i + 3]) * 0x9e3779b97f4a7c15ull;
	}
	return a ^ b ^ c ^ d;
}

static void timings(size_t len, int huge)
{
	char *p = anon(len);
	const char *tag = huge ? "thp" : "4k";
	double t, base;
	volatile uint64_t sink;
	size_t pages = len / 4096;

	madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	memset(p, 1, len);
	t = now();
	memset(p, 2, len);
	base = now() - t;
	printf("time %s_memset_unprotected %.3f ms\n", tag, base * 1e3);
	t = now();
	gpo_wt_protect(p, len);
	printf("time %s_protect_first %.3f ms\n", tag, (now() - t) * 1e3);
	t = now();
	gpo_wt_protect(p, len);
	printf("time %s_protect_again %.3f ms\n", tag, (now() - t) * 1e3);
	t = now();
	for (int i = 0; i < 10; i++)
		sink = (uint64_t)gpo_wt_clean(p, len);
	printf("time %s_scan_clean %.3f ms\n", tag, (now() - t) * 1e2);
	t = now();
	memset(p, 3, len);
	t = now() - t;
	printf("time %s_memset_protected %.3f ms (+%.3f us per 4k page)\n", tag,
	       t * 1e3, (t - base) / (double)pages * 1e6);
	t = now();
	sink = (uint64_t)gpo_wt_clean(p, len);
	printf("time %s_scan_all_written %.3f ms\n", tag, (now() - t) * 1e3);
	if (!huge) {
		t = now();
		sink = hash((const uint64_t *)p, len / 8);
		t = now() - t;
		printf("time hash %.3f ms (%.1f GB/s; PCIe copy at 25 GB/s: %.3f ms)\n",
		       t * 1e3, (double)len / t * 1e-9, (double)len / 25e9 * 1e3);
		/* soft-dirty: the whole process's pages, every clear. */
		{
			int f = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
			int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
			uint64_t *ent = malloc(pages * 8);
			if (f >= 0 && pm >= 0 && ent) {
				t = now();
				if (write(f, "4", 1) != 1)
					printf("time soft_dirty unavailable\n");
				printf("time softdirty_clear %.3f ms (whole process)\n",
				       (now() - t) * 1e3);
				t = now();
				if (pread(pm, ent, pages * 8,
					  (off_t)((uintptr_t)p / 4096 * 8)) > 0)
					sink = ent[0] >> 55 & 1;
				printf("time softdirty_pagemap_read %.3f ms\n",
				       (now() - t) * 1e3);
				t = now();
				memset(p, 4, len);
				t = now() - t;
				printf("time softdirty_memset_after_clear %.3f ms (+%.3f us per page)\n",
				       t * 1e3, (t - base) / (double)pages * 1e6);
			}
			if (f >= 0)
				close(f);
			if (pm >= 0)
				close(pm);
			free(ent);
		}
	}
	(void)sink;
	gpo_wt_reset(0);
	munmap(p, len);
}

int main(int argc, char **argv)
{
	int r = gpo_wt_available();

	if (r) {
		printf("wtrack unavailable: %s\n", gpo_wt_reason(r));
		return 77;
	}
	cases();
	if (argc < 2 || strcmp(argv[1], "--cases") != 0) {
		timings(512 * (size_t)MB, 0);
		timings(512 * (size_t)MB, 1);
	}
	printf("%s\n", fails ? "FAILED" : "all cases ok");
	return fails ? 1 : 0;
}
