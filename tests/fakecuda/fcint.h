/* fcint.h - what the fake driver's files share, and nothing outside them:
 * the one lock, the visible devices cuInit found (fakecuda.c), the
 * journal and the per-device use counts (journal.c), and the primary
 * contexts' set-up (context.c). fakecuda.h is the driver API the fake
 * offers; this header is its inside.
 *
 * Every name here is hidden: the fake exports only cu* names, whatever
 * version script it is linked with (tests/fakecuda/exports.map,
 * tests/preload/vcuda.map, nogpa.map).
 */
#ifndef FAKECUDA_FCINT_H
#define FAKECUDA_FCINT_H

#include <pthread.h>
#include <stddef.h>

#include "fakecuda.h"

#define FC_HIDDEN __attribute__((visibility("hidden")))

#define FC_MAX_DEV       64
#define FC_TOTAL_MEM     (80ULL << 30)
#define FC_CTX_MAGIC     0xfa4ec7a5u
#define FC_VAL_MAX       1024   /* longest env value copied into the journal */

struct fc_ctx {
    unsigned magic;
    int ordinal;            /* CUdevice value */
    int phys;               /* physical index */
    int primary;
    int live;
    unsigned flags;
    struct fc_ctx *next;    /* list of non-primary contexts */
};

/* Over all of the fake's state but the per-thread context stacks. */
extern pthread_mutex_t fc_lock FC_HIDDEN;

/* The visible devices (written once, under fc_lock, by the first cuInit):
 * ordinal -> physical index. */
extern int fc_nvis FC_HIDDEN;
extern int fc_vis[FC_MAX_DEV] FC_HIDDEN;

/* 1 once cuInit succeeded. */
int fc_ready(void) FC_HIDDEN;
#define FC_NEED_INIT() do { if (!fc_ready()) return FC_ERROR_NOT_INITIALIZED; } while (0)
#define FC_NEED_DEV(d) do { if ((d) < 0 || (d) >= fc_nvis) return FC_ERROR_INVALID_DEVICE; } while (0)

/* The environment variable is exactly "1". */
int fc_env_flag(const char *name) FC_HIDDEN;

/* ---- journal.c */

/* CLOCK_MONOTONIC in nanoseconds (the journal's t=). */
unsigned long long fc_now_ns(void) FC_HIDDEN;
/* Copy an environment value for the journal: unset (or empty, with
 * empty_is_unset) -> unset_text; bytes that would break the key=value
 * format become '_'; at most dstsz - 1 bytes. */
void fc_env_val(char *dst, size_t dstsz, const char *name, const char *unset_text,
                int empty_is_unset) FC_HIDDEN;
/* Append one line to FAKECUDA_JOURNAL (nothing when unset); errno kept. */
void fc_journal(const char *fmt, ...) __attribute__((format(printf, 1, 2))) FC_HIDDEN;
/* The line of event `ev` on physical device `phys`, with pid and job. */
void fc_journal_dev(const char *ev, int phys) FC_HIDDEN;
/* Under fc_lock: a live context on `phys` more or less; the first begins
 * the process's use of it in the journal, the last ends it. */
void fc_use_inc(int phys) FC_HIDDEN;
void fc_use_dec(int phys) FC_HIDDEN;

/* Under fc_lock: live contexts (journal.c) on `phys`. */
int fc_use_count(int phys) FC_HIDDEN;

/* ---- checkpoint.c */

/* Around every functional call (context.c, FC_WORK): blocks while the
 * process is locked or checkpointed, and counts the call in flight. */
void fc_work_enter(void) FC_HIDDEN;
void fc_work_leave(void) FC_HIDDEN;
static inline void fc_work_cleanup(int *unused) { (void)unused; fc_work_leave(); }
#define FC_WORK() fc_work_enter(); \
    __attribute__((cleanup(fc_work_cleanup))) int fc_work_scope_ = 0; \
    (void)fc_work_scope_

/* ---- context.c */


/* Under fc_lock, in the first cuInit once fc_nvis and fc_vis are set:
 * the primary contexts of the visible devices. */
void fc_primary_setup(void) FC_HIDDEN;

/* sharedmem.c: device memory counted across processes (FAKECUDA_MEM_DIR).
 * Under fc_lock. fc_mem_book: book `delta` more bytes on top of `used`
 * (0: record `used` after a free); 0, or 2 for out of memory (journaled
 * as ev=oom). */
int fc_mem_book(int phys, unsigned long long used, unsigned long long delta) FC_HIDDEN;
unsigned long long fc_mem_free(int phys, unsigned long long used) FC_HIDDEN;
unsigned long long fc_mem_total(void) FC_HIDDEN;

#endif
