/* context.c - the fake driver's contexts and what is done in them
 * (fcint.h): created and primary contexts, the per-thread current-context
 * stack, fake device memory (per-device addresses, never reused, counted
 * against 80 GiB), and kernel launches. Each context counts as a use of
 * its physical device (the journal's begin and end, journal.c); memory
 * calls, synchronisation and launches journal a tick on the current
 * context's device. Apart from the devices (fakecuda.c) because this is
 * the state a process builds after cuInit, all of it under fc_lock but
 * the thread's own stack.
 *
 * Never writes to stdout or stderr.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fcint.h"

#define FC_STACK_DEPTH   32

struct fc_alloc {
    CUdeviceptr ptr;
    size_t size;
    int phys;
    struct fc_alloc *next;
};

/* Context bookkeeping, all under fc_lock. */
static struct fc_ctx fc_primary[FC_MAX_DEV];     /* by ordinal */
static int fc_primary_refs[FC_MAX_DEV];
static unsigned fc_primary_flags[FC_MAX_DEV];
static struct fc_ctx *fc_ctx_list;
static struct fc_alloc *fc_allocs;
static size_t fc_used[FC_MAX_DEV];
static unsigned long long fc_next_off[FC_MAX_DEV];

/* Per-thread context stack; the top is the current context. */
static _Thread_local struct fc_ctx *fc_stack[FC_STACK_DEPTH];
static _Thread_local int fc_depth;

/* ------------------------------------------------------------- contexts */

void fc_primary_setup(void)
{
    int i;
    for (i = 0; i < fc_nvis; i++) {
        fc_primary[i].magic = FC_CTX_MAGIC;
        fc_primary[i].ordinal = i;
        fc_primary[i].phys = fc_vis[i];
        fc_primary[i].primary = 1;
    }
}

/* Under fc_lock: is ctx a live context of this process? */
static int fc_ctx_ok(const struct fc_ctx *ctx)
{
    const struct fc_ctx *c;
    if (!ctx)
        return 0;
    if (ctx >= fc_primary && ctx < fc_primary + FC_MAX_DEV)
        return ctx->live;
    for (c = fc_ctx_list; c; c = c->next)
        if (c == ctx)
            return c->live;
    return 0;
}

/* fc_ctx_ok, taking fc_lock. */
static int fc_ctx_valid(const struct fc_ctx *ctx)
{
    int ok;
    pthread_mutex_lock(&fc_lock);
    ok = fc_ctx_ok(ctx);
    pthread_mutex_unlock(&fc_lock);
    return ok;
}

static struct fc_ctx *fc_cur(void)
{
    return fc_depth > 0 ? fc_stack[fc_depth - 1] : NULL;
}

/* Under fc_lock: the live current context or NULL. */
static struct fc_ctx *fc_cur_live(void)
{
    struct fc_ctx *c = fc_cur();
    return fc_ctx_ok(c) ? c : NULL;
}

static CUresult fc_ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    struct fc_ctx *c;
    FC_NEED_INIT();
    FC_WORK();
    if (!pctx)
        return FC_ERROR_INVALID_VALUE;
    FC_NEED_DEV(dev);
    c = calloc(1, sizeof *c);
    if (!c)
        return FC_ERROR_INVALID_VALUE;
    c->magic = FC_CTX_MAGIC;
    c->ordinal = dev;
    c->phys = fc_vis[dev];
    c->live = 1;
    c->flags = flags;
    pthread_mutex_lock(&fc_lock);
    if (fc_depth >= FC_STACK_DEPTH) {
        pthread_mutex_unlock(&fc_lock);
        free(c);
        return FC_ERROR_INVALID_VALUE;
    }
    c->next = fc_ctx_list;
    fc_ctx_list = c;
    fc_use_inc(c->phys);
    fc_stack[fc_depth++] = c;       /* the new context becomes current */
    pthread_mutex_unlock(&fc_lock);
    *pctx = c;
    return FC_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return fc_ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, void *affinity_params, int nparams,
                        unsigned int flags, CUdevice dev)
{
    (void)affinity_params;
    (void)nparams;
    return fc_ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, void *create_params, unsigned int flags,
                        CUdevice dev)
{
    (void)create_params;
    return fc_ctx_create(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    struct fc_ctx **pp;
    int i;
    FC_NEED_INIT();
    FC_WORK();
    if (!ctx)
        return FC_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_lock);
    for (pp = &fc_ctx_list; *pp && *pp != ctx; pp = &(*pp)->next)
        ;
    if (!*pp) {
        pthread_mutex_unlock(&fc_lock);
        return FC_ERROR_INVALID_CONTEXT;
    }
    *pp = ctx->next;
    fc_use_dec(ctx->phys);
    /* Drop it from this thread's stack. */
    for (i = 0; i < fc_depth;) {
        if (fc_stack[i] == ctx) {
            memmove(&fc_stack[i], &fc_stack[i + 1], sizeof fc_stack[0] * (size_t)(fc_depth - i - 1));
            fc_depth--;
        } else {
            i++;
        }
    }
    ctx->magic = 0;
    ctx->live = 0;
    free(ctx);
    pthread_mutex_unlock(&fc_lock);
    return FC_SUCCESS;
}

CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    FC_NEED_INIT();
    if (!pctx)
        return FC_ERROR_INVALID_VALUE;
    FC_NEED_DEV(dev);
    pthread_mutex_lock(&fc_lock);
    if (fc_primary_refs[dev]++ == 0) {
        fc_primary[dev].live = 1;
        fc_primary[dev].flags = fc_primary_flags[dev];
        fc_use_inc(fc_primary[dev].phys);
    }
    pthread_mutex_unlock(&fc_lock);
    *pctx = &fc_primary[dev];
    return FC_SUCCESS;
}

/* Under fc_lock. */
static void fc_primary_drop(CUdevice dev)
{
    fc_primary_refs[dev] = 0;
    fc_primary[dev].live = 0;
    fc_use_dec(fc_primary[dev].phys);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = FC_SUCCESS;
    FC_NEED_INIT();
    FC_WORK();
    FC_NEED_DEV(dev);
    pthread_mutex_lock(&fc_lock);
    if (fc_primary_refs[dev] == 0)
        rc = FC_ERROR_INVALID_CONTEXT;
    else if (fc_primary_refs[dev] == 1)
        fc_primary_drop(dev);
    else
        fc_primary_refs[dev]--;
    pthread_mutex_unlock(&fc_lock);
    return rc;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    FC_NEED_INIT();
    FC_WORK();
    FC_NEED_DEV(dev);
    pthread_mutex_lock(&fc_lock);
    if (fc_primary_refs[dev] > 0)
        fc_primary_drop(dev);
    fc_primary_flags[dev] = 0;
    pthread_mutex_unlock(&fc_lock);
    return FC_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    FC_NEED_INIT();
    if (!flags || !active)
        return FC_ERROR_INVALID_VALUE;
    FC_NEED_DEV(dev);
    pthread_mutex_lock(&fc_lock);
    *flags = fc_primary_flags[dev];
    *active = fc_primary_refs[dev] > 0;
    pthread_mutex_unlock(&fc_lock);
    return FC_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    FC_NEED_INIT();
    FC_NEED_DEV(dev);
    pthread_mutex_lock(&fc_lock);
    fc_primary_flags[dev] = flags;
    pthread_mutex_unlock(&fc_lock);
    return FC_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    FC_NEED_INIT();
    if (!ctx) {
        if (fc_depth > 0)
            fc_depth--;
        return FC_SUCCESS;
    }
    if (!fc_ctx_valid(ctx))
        return FC_ERROR_INVALID_CONTEXT;
    if (fc_depth == 0)
        fc_depth = 1;
    fc_stack[fc_depth - 1] = ctx;
    return FC_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    FC_NEED_INIT();
    if (!pctx)
        return FC_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_lock);
    *pctx = fc_cur_live();
    pthread_mutex_unlock(&fc_lock);
    return FC_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    FC_NEED_INIT();
    if (!ctx)
        return FC_ERROR_INVALID_VALUE;
    if (!fc_ctx_valid(ctx))
        return FC_ERROR_INVALID_CONTEXT;
    if (fc_depth >= FC_STACK_DEPTH)
        return FC_ERROR_INVALID_VALUE;
    fc_stack[fc_depth++] = ctx;
    return FC_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    FC_NEED_INIT();
    if (fc_depth == 0)
        return FC_ERROR_INVALID_CONTEXT;
    fc_depth--;
    if (pctx)
        *pctx = fc_stack[fc_depth];
    return FC_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx)
{
    CUresult rc = FC_SUCCESS;
    FC_NEED_INIT();
    if (!dev)
        return FC_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_lock);
    if (!ctx)
        ctx = fc_cur_live();
    if (fc_ctx_ok(ctx))
        *dev = ctx->ordinal;
    else
        rc = FC_ERROR_INVALID_CONTEXT;
    pthread_mutex_unlock(&fc_lock);
    return rc;
}

CUresult cuCtxGetDevice(CUdevice *dev)
{
    return cuCtxGetDevice_v2(dev, NULL);
}

CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    CUresult rc = FC_SUCCESS;
    FC_NEED_INIT();
    FC_WORK();
    pthread_mutex_lock(&fc_lock);
    if (!ctx)
        ctx = fc_cur_live();
    if (fc_ctx_ok(ctx))
        fc_journal_dev("tick", ctx->phys);
    else
        rc = FC_ERROR_INVALID_CONTEXT;
    pthread_mutex_unlock(&fc_lock);
    return rc;
}

CUresult cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

/* --------------------------------------------------------------- memory */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    struct fc_ctx *c;
    struct fc_alloc *a;
    CUresult rc = FC_SUCCESS;
    FC_NEED_INIT();
    FC_WORK();
    if (!dptr)
        return FC_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_lock);
    c = fc_cur_live();
    if (!c) {
        rc = FC_ERROR_INVALID_CONTEXT;
    } else {
        fc_journal_dev("tick", c->phys);
        if (bytes == 0) {
            rc = FC_ERROR_INVALID_VALUE;
        } else if (fc_mem_book(c->phys, fc_used[c->phys], bytes)) {
            rc = 2;     /* CUDA_ERROR_OUT_OF_MEMORY (sharedmem.c) */
        } else if (!(a = calloc(1, sizeof *a))) {
            rc = 2;
        } else {
            /* Per-device fake address range, 512-byte aligned, never reused. */
            a->ptr = 0x100000000000ULL + ((unsigned long long)c->phys << 40) + fc_next_off[c->phys];
            fc_next_off[c->phys] += (bytes + 511) & ~(size_t)511;
            a->size = bytes;
            a->phys = c->phys;
            a->next = fc_allocs;
            fc_allocs = a;
            fc_used[c->phys] += bytes;
            *dptr = a->ptr;
        }
    }
    pthread_mutex_unlock(&fc_lock);
    return rc;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    struct fc_alloc **pp, *a;
    CUresult rc = FC_ERROR_INVALID_VALUE;
    FC_NEED_INIT();
    FC_WORK();
    if (dptr == 0)
        return FC_SUCCESS;
    pthread_mutex_lock(&fc_lock);
    for (pp = &fc_allocs; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr == dptr) {
            a = *pp;
            *pp = a->next;
            fc_used[a->phys] -= a->size;
            (void)fc_mem_book(a->phys, fc_used[a->phys], 0);
            free(a);
            rc = FC_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&fc_lock);
    return rc;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    struct fc_ctx *c;
    CUresult rc = FC_SUCCESS;
    FC_NEED_INIT();
    FC_WORK();
    if (!free_bytes || !total_bytes)
        return FC_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_lock);
    c = fc_cur_live();
    if (!c) {
        rc = FC_ERROR_INVALID_CONTEXT;
    } else {
        *total_bytes = (size_t)fc_mem_total();
        *free_bytes = (size_t)fc_mem_free(c->phys, fc_used[c->phys]);
    }
    pthread_mutex_unlock(&fc_lock);
    return rc;
}

/* --------------------------------------------------------------- launches */

/* A launch on the current context: journaled as a tick (the function, grid
 * and parameters are ignored). */
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                        void *stream, void **params, void **extra)
{
    struct fc_ctx *c;
    CUresult rc = FC_SUCCESS;
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz;
    (void)shmem; (void)stream; (void)params; (void)extra;
    FC_NEED_INIT();
    FC_WORK();
    pthread_mutex_lock(&fc_lock);
    c = fc_cur_live();
    if (!c)
        rc = FC_ERROR_INVALID_CONTEXT;
    else
        fc_journal_dev("tick", c->phys);
    pthread_mutex_unlock(&fc_lock);
    return rc;
}

CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz,
                             unsigned shmem, void *stream, void **params,
                             void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params,
                          extra);
}
