/* journal.c - what the fake driver writes down (fcint.h): the journal of
 * FAKECUDA_JOURNAL, one line per event that shows "this process is using
 * GPU n" (init, begin, tick, end), which tests/lib/journal.py checks for
 * exclusivity; the per-device use counts whose first and last context make
 * the begin and end lines, closed at exit and reset in a forked child; and
 * the stub log (FAKECUDA_STUB_LOG). Apart from the devices (fakecuda.c) and
 * contexts (context.c) because it is the fake's one output, the record the
 * tests read: its format is the tests' contract.
 *
 * Never writes to stdout or stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fcint.h"

static int fc_use[FC_MAX_DEV];                   /* live contexts per physical */
static pid_t fc_use_pid[FC_MAX_DEV];

unsigned long long fc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* Whitespace, control characters and '=' would break the key=value
 * format. */
void fc_env_val(char *dst, size_t dstsz, const char *name, const char *unset_text,
                int empty_is_unset)
{
    const char *v = getenv(name);
    size_t i;
    if (!v || (empty_is_unset && !*v)) {
        snprintf(dst, dstsz, "%s", unset_text);
        return;
    }
    for (i = 0; v[i] && i + 1 < dstsz; i++) {
        unsigned char c = (unsigned char)v[i];
        dst[i] = (c <= 0x20 || c == 0x7f || c == '=') ? '_' : (char)c;
    }
    dst[i] = '\0';
}

void fc_journal(const char *fmt, ...)
{
    const char *path = getenv("FAKECUDA_JOURNAL");
    char line[4 * FC_VAL_MAX];
    va_list ap;
    int n, fd, saved = errno;

#ifdef FAKECUDA_DEFAULT_JOURNAL
    /* A build for processes whose environment is reset (env -i), in the
     * machine-wide tests (tests/test_system.py): they journal here. */
    if (!path || !*path)
        path = FAKECUDA_DEFAULT_JOURNAL;
#endif
    if (!path || !*path)
        return;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)(sizeof line - 2);
    line[n++] = '\n';
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0) {
        while (write(fd, line, (size_t)n) < 0 && errno == EINTR)
            ;
        close(fd);
    }
    errno = saved;
}

void fc_journal_dev(const char *ev, int phys)
{
    char job[FC_VAL_MAX + 1];
    fc_env_val(job, sizeof job, "GPUMUTEX_JOB", "-", 1);
    fc_journal("ev=%s pid=%d job=%s dev=%d t=%llu", ev, (int)getpid(), job, phys, fc_now_ns());
}

int fc_use_count(int phys)
{
    return fc_use[phys];
}

void fc_use_inc(int phys)
{
    if (fc_use[phys]++ == 0) {
        fc_use_pid[phys] = getpid();
        fc_journal_dev("begin", phys);
    }
}

void fc_use_dec(int phys)
{
    if (fc_use[phys] > 0 && --fc_use[phys] == 0)
        fc_journal_dev("end", phys);
}

__attribute__((destructor)) static void fc_fini(void)
{
    pid_t me = getpid();
    int i;
    pthread_mutex_lock(&fc_lock);
    for (i = 0; i < FC_MAX_DEV; i++) {
        if (fc_use[i] > 0 && fc_use_pid[i] == me) {
            fc_use[i] = 0;
            fc_journal_dev("end", i);
        }
    }
    pthread_mutex_unlock(&fc_lock);
}

/* A forked child does not own its parent's GPU use: its own journal lines
 * start from scratch (the parent's destructor writes the parent's ends). */
static void fc_atfork_prepare(void) { pthread_mutex_lock(&fc_lock); }
static void fc_atfork_parent(void) { pthread_mutex_unlock(&fc_lock); }
static void fc_atfork_child(void)
{
    memset(fc_use, 0, sizeof fc_use);
    pthread_mutex_unlock(&fc_lock);
}

__attribute__((constructor)) static void fc_init_lib(void)
{
    pthread_atfork(fc_atfork_prepare, fc_atfork_parent, fc_atfork_child);
}

void fc_stub_called(const char *name)
{
    const char *path = getenv("FAKECUDA_STUB_LOG");
    char line[320];
    int fd, n;

    if (!path || !*path)
        return;
    n = snprintf(line, sizeof line, "%s %d\n", name, (int)getpid());
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return;
    if (write(fd, line, (size_t)n) < 0) {
        /* a test that reads the log will see the line missing */
    }
    close(fd);
}
