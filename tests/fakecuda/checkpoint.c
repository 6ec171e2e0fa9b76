/* checkpoint.c - the fake driver's checkpoint API (fcint.h): one state
 * machine per process, running -> locked -> checkpointed -> locked ->
 * running, as the real driver's cuCheckpointProcess* calls (driver 580).
 * Functional calls (context.c) enter through fc_work_enter, which blocks
 * while the process is locked or checkpointed, as the real driver blocks
 * the CUDA calls of a locked process; Lock waits for the functional calls
 * in flight (up to the lock arguments' timeout). Checkpoint and restore
 * are journaled once per physical device the process uses ("ckpt",
 * "restore"), which lets tests/lib/journal.py count a holder's hold from
 * its first use to its checkpoint and from its restore to its last use.
 *
 * Only the calling process's own PID is accepted (gpumutex suspends each
 * process from its own thread). Test knobs, read at each call:
 *   FAKECUDA_CKPT=off              every call returns 801 (no such API)
 *   FAKECUDA_CKPT_FAIL=lock|checkpoint|restore|unlock
 *                                  that step returns 999 (state unchanged)
 *   FAKECUDA_CKPT_PAUSE=path       at one step (FAKECUDA_CKPT_PAUSE_AT: lock,
 *                                  locked, checkpoint, checkpointed,
 *                                  restore, restored, unlock; default
 *                                  checkpoint) journal "ckpt-pause at=STEP",
 *                                  then block until `path` exists (kill
 *                                  tests, and the sweep of calls made at
 *                                  every step of a suspension)
 *   FAKECUDA_CKPT_FAIL=unsupported Checkpoint returns 801 and leaves the
 *                                  process locked (driver 580 with managed
 *                                  memory)
 *
 * Never writes to stdout or stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fcint.h"

#define FC_ERROR_TIMEOUT        909
#define FC_ERROR_ILLEGAL_STATE  401
#define FC_ERROR_UNKNOWN        999

enum { FC_RUNNING = 0, FC_LOCKED = 1, FC_CHECKPOINTED = 2 };

static pthread_mutex_t ck_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ck_cond = PTHREAD_COND_INITIALIZER;
static int ck_state;
static int ck_inflight;

static int ck_off(void)
{
    const char *v = getenv("FAKECUDA_CKPT");
    return v && strcmp(v, "off") == 0;
}

static int ck_fail(const char *step)
{
    const char *v = getenv("FAKECUDA_CKPT_FAIL");
    return v && strcmp(v, step) == 0;
}

void fc_work_enter(void)
{
    pthread_mutex_lock(&ck_lock);
    while (ck_state != FC_RUNNING)
        pthread_cond_wait(&ck_cond, &ck_lock);
    ck_inflight++;
    pthread_mutex_unlock(&ck_lock);
}

void fc_work_leave(void)
{
    pthread_mutex_lock(&ck_lock);
    if (ck_inflight > 0)
        ck_inflight--;
    pthread_cond_broadcast(&ck_cond);
    pthread_mutex_unlock(&ck_lock);
}

/* The pause point `step` (see the top of the file). */
static void ck_pause(const char *step)
{
    const char *pause = getenv("FAKECUDA_CKPT_PAUSE");
    const char *at = getenv("FAKECUDA_CKPT_PAUSE_AT");

    if (!pause || !*pause || strcmp(at && *at ? at : "checkpoint", step))
        return;
    fc_journal("ev=ckpt-pause pid=%d at=%s t=%llu", (int)getpid(), step,
               fc_now_ns());
    while (access(pause, F_OK) != 0) {
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
}

static CUresult ck_check(int pid)
{
    FC_NEED_INIT();
    if (ck_off())
        return FC_ERROR_NOT_SUPPORTED;
    if (pid != (int)getpid())
        return FC_ERROR_INVALID_VALUE;
    return FC_SUCCESS;
}

CUresult cuCheckpointProcessGetState(int pid, int *state)
{
    CUresult rc = ck_check(pid);
    if (rc)
        return rc;
    if (!state)
        return FC_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ck_lock);
    *state = ck_state;
    pthread_mutex_unlock(&ck_lock);
    return FC_SUCCESS;
}

CUresult cuCheckpointProcessLock(int pid, void *args)
{
    unsigned timeout_ms = args ? *(const unsigned *)args : 0;
    struct timespec until;
    CUresult rc = ck_check(pid);
    if (rc)
        return rc;
    if (ck_fail("lock"))
        return FC_ERROR_UNKNOWN;
    ck_pause("lock");
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&ck_lock);
    if (ck_state != FC_RUNNING) {
        pthread_mutex_unlock(&ck_lock);
        return FC_ERROR_ILLEGAL_STATE;
    }
    /* New functional calls block from here; wait for those in flight. */
    ck_state = FC_LOCKED;
    while (ck_inflight > 0) {
        if (timeout_ms == 0)
            pthread_cond_wait(&ck_cond, &ck_lock);
        else if (pthread_cond_timedwait(&ck_cond, &ck_lock, &until) == ETIMEDOUT) {
            ck_state = FC_RUNNING;
            pthread_cond_broadcast(&ck_cond);
            pthread_mutex_unlock(&ck_lock);
            return FC_ERROR_TIMEOUT;
        }
    }
    pthread_mutex_unlock(&ck_lock);
    ck_pause("locked");
    return FC_SUCCESS;
}

/* The journal lines of `ev` for each device this process uses. */
static void ck_journal(const char *ev)
{
    pthread_mutex_lock(&fc_lock);
    for (int i = 0; i < FC_MAX_DEV; i++)
        if (fc_use_count(i) > 0)
            fc_journal_dev(ev, i);
    pthread_mutex_unlock(&fc_lock);
}

CUresult cuCheckpointProcessCheckpoint(int pid, void *args)
{
    CUresult rc = ck_check(pid);
    (void)args;
    if (rc)
        return rc;
    pthread_mutex_lock(&ck_lock);
    rc = ck_state == FC_LOCKED ? FC_SUCCESS : FC_ERROR_ILLEGAL_STATE;
    pthread_mutex_unlock(&ck_lock);
    if (rc)
        return rc;
    if (ck_fail("checkpoint"))
        return FC_ERROR_UNKNOWN;
    /* What driver 580 answers for a process with managed memory: 801,
     * the process left locked. */
    if (ck_fail("unsupported"))
        return FC_ERROR_NOT_SUPPORTED;
    ck_pause("checkpoint");
    ck_journal("ckpt");
    pthread_mutex_lock(&ck_lock);
    ck_state = FC_CHECKPOINTED;
    pthread_mutex_unlock(&ck_lock);
    ck_pause("checkpointed");
    return FC_SUCCESS;
}

CUresult cuCheckpointProcessRestore(int pid, void *args)
{
    CUresult rc = ck_check(pid);
    (void)args;
    if (rc)
        return rc;
    if (ck_fail("restore"))
        return FC_ERROR_UNKNOWN;
    ck_pause("restore");
    pthread_mutex_lock(&ck_lock);
    if (ck_state != FC_CHECKPOINTED) {
        pthread_mutex_unlock(&ck_lock);
        return FC_ERROR_ILLEGAL_STATE;
    }
    pthread_mutex_unlock(&ck_lock);
    ck_journal("restore");
    pthread_mutex_lock(&ck_lock);
    ck_state = FC_LOCKED;
    pthread_mutex_unlock(&ck_lock);
    ck_pause("restored");
    return FC_SUCCESS;
}

CUresult cuCheckpointProcessUnlock(int pid, void *args)
{
    CUresult rc = ck_check(pid);
    (void)args;
    if (rc)
        return rc;
    if (ck_fail("unlock"))
        return FC_ERROR_UNKNOWN;
    ck_pause("unlock");
    pthread_mutex_lock(&ck_lock);
    if (ck_state != FC_LOCKED)
        rc = FC_ERROR_ILLEGAL_STATE;
    else
        ck_state = FC_RUNNING;
    pthread_cond_broadcast(&ck_cond);
    pthread_mutex_unlock(&ck_lock);
    return rc;
}

/* A forked child starts running, with no call in flight. */
static void ck_atfork_child(void)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    memcpy(&ck_lock, &m, sizeof m);
    memcpy(&ck_cond, &c, sizeof c);
    ck_state = FC_RUNNING;
    ck_inflight = 0;
}

__attribute__((constructor)) static void ck_init_lib(void)
{
    pthread_atfork(NULL, NULL, ck_atfork_child);
}
