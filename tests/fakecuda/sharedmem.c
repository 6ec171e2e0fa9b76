/* sharedmem.c - device memory counted per physical GPU across processes
 * (FAKECUDA_MEM_DIR), as the real driver does: one process's allocations
 * leave less for every other, and they are freed when the process's
 * files close at its exit (the real driver frees a process's memory when
 * its device file is released), or by cuMemFree.
 *
 * In FAKECUDA_MEM_DIR, per physical device p: gpu<p>.lock (held
 * exclusively while one process checks and books an allocation) and one
 * gpu<p>.<pid> per process that has memory there, holding its bytes in
 * use as text, write-locked (an OFD lock) by that process for as long as
 * it lives. A file whose lock is gone belongs to a dead process and
 * counts for nothing. Without FAKECUDA_MEM_DIR memory is per process, as
 * before. FAKECUDA_MEM_TOTAL: bytes per device (default 80 GiB).
 *
 * An allocation refused for lack of memory journals
 * `ev=oom pid= job= dev= t=`, and writes one byte to FAKECUDA_OOM_FIFO
 * when that names a FIFO someone reads (tests/test_exit_early.py).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fcint.h"

static int fc_own_fd[FC_MAX_DEV] = { [0 ... FC_MAX_DEV - 1] = -1 };
static pid_t fc_own_pid;

unsigned long long fc_mem_total(void)
{
    const char *v = getenv("FAKECUDA_MEM_TOTAL");
    char *end;
    unsigned long long n;

    if (!v || !*v)
        return FC_TOTAL_MEM;
    n = strtoull(v, &end, 10);
    return *end || n == 0 ? FC_TOTAL_MEM : n;
}

static int lock_fd(int fd, int cmd, short type)
{
    struct flock fl;

    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_len = 1;
    while (fcntl(fd, cmd, &fl) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return cmd == F_OFD_GETLK ? fl.l_type : 0;
}

/* The bytes booked on `phys` by other live processes. */
static unsigned long long others(const char *dir, int phys)
{
    char pre[32], path[4096], buf[32];
    unsigned long long sum = 0;
    struct dirent *e;
    DIR *d = opendir(dir);
    size_t plen;

    if (!d)
        return 0;
    plen = (size_t)snprintf(pre, sizeof pre, "gpu%d.", phys);
    while ((e = readdir(d))) {
        int fd;
        ssize_t n;

        if (strncmp(e->d_name, pre, plen) || !strcmp(e->d_name + plen, "lock") ||
            atoi(e->d_name + plen) == (int)getpid())
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (lock_fd(fd, F_OFD_GETLK, F_RDLCK) == F_WRLCK) {
            n = pread(fd, buf, sizeof buf - 1, 0);
            if (n > 0) {
                buf[n] = '\0';
                sum += strtoull(buf, NULL, 10);
            }
        }
        close(fd);
    }
    closedir(d);
    return sum;
}

static void oom_said(int phys)
{
    const char *fifo = getenv("FAKECUDA_OOM_FIFO");

    fc_journal_dev("oom", phys);
    if (fifo && *fifo) {
        int fd = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            (void)!write(fd, "o", 1);
            close(fd);
        }
    }
}

/* Under fc_lock: may this process book `delta` more bytes on `phys`
 * (delta 0: record `used` after a free)? Books them (writes `used +
 * delta` to our file) and returns 0, or returns 2 (out of memory). */
int fc_mem_book(int phys, unsigned long long used, unsigned long long delta)
{
    const char *dir = getenv("FAKECUDA_MEM_DIR");
    unsigned long long total = fc_mem_total();
    char path[4096], buf[32];
    int lk, rc = 0, n;

    if (!dir || !*dir) {
        if (delta > total - used) {
            oom_said(phys);
            return 2;
        }
        return 0;
    }
    snprintf(path, sizeof path, "%s/gpu%d.lock", dir, phys);
    lk = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lk < 0 || lock_fd(lk, F_OFD_SETLKW, F_WRLCK) < 0) {
        if (lk >= 0)
            close(lk);
        return 2;
    }
    if (fc_own_pid != getpid()) { /* a forked child books its own */
        for (int i = 0; i < FC_MAX_DEV; i++)
            fc_own_fd[i] = -1;
        fc_own_pid = getpid();
    }
    if (delta && (used + delta > total ||
                  others(dir, phys) > total - used - delta)) {
        rc = 2;
    } else {
        if (fc_own_fd[phys] < 0) {
            snprintf(path, sizeof path, "%s/gpu%d.%d", dir, phys, (int)getpid());
            fc_own_fd[phys] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
            if (fc_own_fd[phys] >= 0 &&
                lock_fd(fc_own_fd[phys], F_OFD_SETLK, F_WRLCK) < 0) {
                close(fc_own_fd[phys]);
                fc_own_fd[phys] = -1;
            }
        }
        if (fc_own_fd[phys] < 0) {
            rc = 2;
        } else {
            n = snprintf(buf, sizeof buf, "%llu\n", used + delta);
            if (ftruncate(fc_own_fd[phys], 0) < 0 ||
                pwrite(fc_own_fd[phys], buf, (size_t)n, 0) != n)
                rc = 2;
        }
    }
    close(lk); /* drops the ledger's lock */
    if (rc)
        oom_said(phys);
    return rc;
}

/* Under fc_lock: bytes free on `phys` for this process. */
unsigned long long fc_mem_free(int phys, unsigned long long used)
{
    const char *dir = getenv("FAKECUDA_MEM_DIR");
    unsigned long long total = fc_mem_total(), busy = used;

    if (dir && *dir)
        busy += others(dir, phys);
    return busy >= total ? 0 : total - busy;
}
