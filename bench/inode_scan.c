/*
 * inode_scan - what makes a claim's file creations slow on ext4 without a
 * journal (docs/benchmarks.md, "The event log's cost"): the inodes deleted
 * in the last minute, and (the question) whether an appender like the
 * event log changes that.
 *
 * Without a journal, ext4's inode allocator (find_inode_bit) passes over
 * every free inode of the block group whose on-disk copy says it was
 * deleted less than a minute ago (recently_deleted: a buffer-cache lookup
 * of its inode table block per inode; five minutes more while that block
 * is dirty), so each mknod/symlink/O_CREAT costs time in proportion to
 * the group's recent deletions, whoever made them.
 *
 * Usage: inode_scan DIR CHURN SECONDS APPEND. Creates and deletes CHURN
 * FIFOs in DIR/x, then every 10 s times 200 mknod+unlink pairs in DIR/y
 * and prints the median mknod; with APPEND=1 a child appends a 300-byte
 * line to DIR/x/events.log every 2 ms meanwhile (the log's pattern).
 * Meant for a filesystem of its own, so nobody else's deletions count:
 *   truncate -s 1G /var/tmp/a.img && mkfs.ext4 -q -O ^has_journal \
 *     /var/tmp/a.img && mount -o loop /var/tmp/a.img /mnt/a
 * (one such filesystem per APPEND value, run side by side).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void nap_ms(int ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&t, NULL);
}

static int cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

static void appender(const char *x)
{
	char line[300], p[600];

	memset(line, 'a', sizeof line - 1);
	line[sizeof line - 1] = '\n';
	snprintf(p, sizeof p, "%s/events.log", x);
	for (;;) {
		int fd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);

		if (fd >= 0) {
			if (write(fd, line, sizeof line) < 0)
				_exit(1);
			close(fd);
		}
		nap_ms(2);
	}
}

int main(int argc, char **argv)
{
	char x[512], y[512], p[600];
	int churn, secs, app;
	pid_t child = 0;
	long long t0, d[200];

	if (argc != 5)
		return 2;
	churn = atoi(argv[2]);
	secs = atoi(argv[3]);
	app = atoi(argv[4]);
	snprintf(x, sizeof x, "%s/x", argv[1]);
	snprintf(y, sizeof y, "%s/y", argv[1]);
	if ((mkdir(x, 0755) && access(x, W_OK)) || (mkdir(y, 0755) && access(y, W_OK)))
		return 1;
	for (int i = 0; i < churn; i++) {
		snprintf(p, sizeof p, "%s/f%d", x, i);
		if (mknod(p, S_IFIFO | 0600, 0))
			return 1;
	}
	for (int i = 0; i < churn; i++) {
		snprintf(p, sizeof p, "%s/f%d", x, i);
		unlink(p);
	}
	if (app && (child = fork()) == 0)
		appender(x);
	t0 = now_ns();
	for (int s = 0; s <= secs; s += 10) {
		while (now_ns() - t0 < s * 1000000000LL)
			nap_ms(50);
		for (int i = 0; i < 200; i++) {
			long long a;

			snprintf(p, sizeof p, "%s/q%d", y, i);
			a = now_ns();
			if (mknod(p, S_IFIFO | 0600, 0))
				return 1;
			d[i] = now_ns() - a;
			unlink(p);
		}
		qsort(d, 200, sizeof *d, cmp);
		printf("t=%3d s mknod median %.1f us\n", s, d[100] / 1e3);
		fflush(stdout);
	}
	if (child > 0)
		kill(child, SIGKILL);
	return 0;
}
