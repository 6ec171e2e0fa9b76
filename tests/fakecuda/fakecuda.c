/* fakecuda.c - a fake NVIDIA driver library (libcuda.so.1) for gpumutex tests.
 *
 * Stands in for the real driver on machines without a GPU.  Enough of the
 * driver API is implemented for device enumeration (honouring
 * CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER like the real driver), contexts and
 * fake allocations; every event that shows "this process is using GPU n" is
 * appended to a journal file (FAKECUDA_JOURNAL) so tests can check mutual
 * exclusion.  All other driver names come from the generated stubs.c and
 * return CUDA_ERROR_NOT_SUPPORTED.  See README.md.
 *
 * Never writes to stdout or stderr.
 */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FC_MAX_DEV       64
#define FC_DEFAULT_NDEV  8
#define FC_TOTAL_MEM     (80ULL << 30)
#define FC_CTX_MAGIC     0xfa4ec7a5u
#define FC_STACK_DEPTH   32
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

struct fc_alloc {
    CUdeviceptr ptr;
    size_t size;
    int phys;
    struct fc_alloc *next;
};

static pthread_mutex_t fc_lock = PTHREAD_MUTEX_INITIALIZER;

/* Initialisation state (written once under fc_lock). */
static int fc_state;        /* 0 = cuInit not run, 1 = ok, 2 = failed */
static CUresult fc_init_rc;
static int fc_nvis;
static int fc_vis[FC_MAX_DEV];            /* ordinal -> physical index */

/* Context bookkeeping, all under fc_lock. */
static struct fc_ctx fc_primary[FC_MAX_DEV];     /* by ordinal */
static int fc_primary_refs[FC_MAX_DEV];
static unsigned fc_primary_flags[FC_MAX_DEV];
static struct fc_ctx *fc_ctx_list;
static int fc_use[FC_MAX_DEV];                   /* live contexts per physical */
static pid_t fc_use_pid[FC_MAX_DEV];
static struct fc_alloc *fc_allocs;
static size_t fc_used[FC_MAX_DEV];
static unsigned long long fc_next_off[FC_MAX_DEV];

/* Per-thread context stack; the top is the current context. */
static _Thread_local struct fc_ctx *fc_stack[FC_STACK_DEPTH];
static _Thread_local int fc_depth;

static void *volatile fc_self_gpa;   /* result of the self-lookup in cuInit */

/* ------------------------------------------------------------------ journal */

static unsigned long long fc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* Copy an environment value for the journal: unset -> unset_text, bytes that
 * are whitespace, control characters or '=' would break the key=value format
 * and become '_'; at most FC_VAL_MAX bytes. */
static void fc_env_val(char *dst, size_t dstsz, const char *name, const char *unset_text,
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

static void fc_journal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fc_journal(const char *fmt, ...)
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

static void fc_journal_dev(const char *ev, int phys)
{
    char job[FC_VAL_MAX + 1];
    fc_env_val(job, sizeof job, "GPUMUTEX_JOB", "-", 1);
    fc_journal("ev=%s pid=%d job=%s dev=%d t=%llu", ev, (int)getpid(), job, phys, fc_now_ns());
}

/* Called under fc_lock. */
static void fc_use_inc(int phys)
{
    if (fc_use[phys]++ == 0) {
        fc_use_pid[phys] = getpid();
        fc_journal_dev("begin", phys);
    }
}

static void fc_use_dec(int phys)
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

/* ------------------------------------------------------------ enumeration */

static int fc_env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

static int fc_num_devices(void)
{
    const char *v = getenv("FAKECUDA_NUM_DEVICES");
    char *end;
    long n;
    if (!v || !*v)
        return FC_DEFAULT_NDEV;
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || *end || n < 0)
        return FC_DEFAULT_NDEV;
    return n > FC_MAX_DEV ? FC_MAX_DEV : (int)n;
}

static void fc_uuid_string(char *buf, size_t sz, int phys)
{
    snprintf(buf, sz, "GPU-fake0000-0000-0000-0000-%012d", phys);
}

/* Resolve one CUDA_VISIBLE_DEVICES entry [s, e) to a physical index, or -1. */
static int fc_cvd_entry(const char *s, const char *e, const int *enum_order, int n)
{
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    if (s == e)
        return -1;
    if (*s >= '0' && *s <= '9') {
        long v = 0;
        for (; s < e; s++) {
            if (*s < '0' || *s > '9' || v > 100000)
                return -1;
            v = v * 10 + (*s - '0');
        }
        return v < n ? enum_order[v] : -1;
    }
    if (e - s > 4 && strncmp(s, "GPU-", 4) == 0) {
        /* Full UUID or a unique prefix of one (like the real driver). */
        int i, found = -1;
        size_t len = (size_t)(e - s);
        for (i = 0; i < n; i++) {
            char u[64];
            fc_uuid_string(u, sizeof u, i);
            if (len <= strlen(u) && strncmp(u, s, len) == 0) {
                if (found >= 0)
                    return -1;      /* ambiguous */
                found = i;
            }
        }
        return found;
    }
    return -1;
}

static int fc_parse_cvd(const char *cvd, const int *enum_order, int n, int *out)
{
    int count = 0, seen[FC_MAX_DEV] = {0};
    const char *s = cvd;
    for (;;) {
        const char *e = strchr(s, ',');
        int phys;
        if (!e)
            e = s + strlen(s);
        phys = fc_cvd_entry(s, e, enum_order, n);
        if (phys < 0 || seen[phys])
            break;                  /* stop at the first invalid entry */
        seen[phys] = 1;
        out[count++] = phys;
        if (!*e)
            break;
        s = e + 1;
    }
    return count;
}

/* ------------------------------------------------------------------ cuInit */

CUresult cuInit(unsigned int flags)
{
    char cvdv[FC_VAL_MAX + 1], orderv[FC_VAL_MAX + 1], job[FC_VAL_MAX + 1];
    const char *cvd, *order;
    int n, i, reversed, enum_order[FC_MAX_DEV];
    CUresult rc;

    if (flags != 0)
        return FC_ERROR_INVALID_VALUE;

    if (!__atomic_load_n(&fc_state, __ATOMIC_ACQUIRE) && !fc_env_flag("FAKECUDA_NO_SELF_DLOPEN")) {
        /* The real driver looks itself up while initialising; interposers
         * that hook dlopen/dlsym must cope with that. */
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (h) {
            fc_self_gpa = dlsym(h, "cuGetProcAddress_v2");
            dlclose(h);
        }
    }

    pthread_mutex_lock(&fc_lock);
    if (fc_state) {
        rc = fc_init_rc;
        pthread_mutex_unlock(&fc_lock);
        return rc;
    }

    n = fc_num_devices();
    order = getenv("CUDA_DEVICE_ORDER");
    reversed = fc_env_flag("FAKECUDA_FASTEST_FIRST_REVERSED") &&
               !(order && strcmp(order, "PCI_BUS_ID") == 0);
    for (i = 0; i < n; i++)
        enum_order[i] = reversed ? n - 1 - i : i;

    cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd) {
        fc_nvis = fc_parse_cvd(cvd, enum_order, n, fc_vis);
    } else {
        fc_nvis = n;
        memcpy(fc_vis, enum_order, sizeof(int) * (size_t)n);
    }
    for (i = 0; i < fc_nvis; i++) {
        fc_primary[i].magic = FC_CTX_MAGIC;
        fc_primary[i].ordinal = i;
        fc_primary[i].phys = fc_vis[i];
        fc_primary[i].primary = 1;
    }

    fc_env_val(cvdv, sizeof cvdv, "CUDA_VISIBLE_DEVICES", "-unset-", 0);
    fc_env_val(orderv, sizeof orderv, "CUDA_DEVICE_ORDER", "-unset-", 0);
    fc_env_val(job, sizeof job, "GPUMUTEX_JOB", "-", 1);
    fc_journal("ev=init pid=%d job=%s cvd=%s order=%s ndev=%d t=%llu",
               (int)getpid(), job, cvdv, orderv, fc_nvis, fc_now_ns());

    rc = fc_nvis > 0 ? FC_SUCCESS : FC_ERROR_NO_DEVICE;
    fc_init_rc = rc;
    __atomic_store_n(&fc_state, rc == FC_SUCCESS ? 1 : 2, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fc_lock);
    return rc;
}

static int fc_ready(void)
{
    return __atomic_load_n(&fc_state, __ATOMIC_ACQUIRE) == 1;
}

#define FC_NEED_INIT() do { if (!fc_ready()) return FC_ERROR_NOT_INITIALIZED; } while (0)
#define FC_NEED_DEV(d) do { if ((d) < 0 || (d) >= fc_nvis) return FC_ERROR_INVALID_DEVICE; } while (0)

/* -------------------------------------------------------------- devices */

CUresult cuDriverGetVersion(int *version)
{
    /* Works before cuInit, like the real driver. */
    if (!version)
        return FC_ERROR_INVALID_VALUE;
    *version = FC_DRIVER_VERSION;
    return FC_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    FC_NEED_INIT();
    if (!count)
        return FC_ERROR_INVALID_VALUE;
    *count = fc_nvis;
    return FC_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    FC_NEED_INIT();
    if (!dev)
        return FC_ERROR_INVALID_VALUE;
    FC_NEED_DEV(ordinal);
    *dev = ordinal;
    return FC_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    FC_NEED_INIT();
    if (!name || len <= 0)
        return FC_ERROR_INVALID_VALUE;
    FC_NEED_DEV(dev);
    snprintf(name, (size_t)len, "Fake GPU %d", fc_vis[dev]);
    return FC_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    int phys, k;
    FC_NEED_INIT();
    if (!uuid)
        return FC_ERROR_INVALID_VALUE;
    FC_NEED_DEV(dev);
    phys = fc_vis[dev];
    /* fa ce 00 00 | 00 00 | 00 00 | 00 00 | BCD of the 12-digit index */
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    uuid->bytes[0] = 0xfa;
    uuid->bytes[1] = 0xce;
    for (k = 15; k >= 10; k--) {
        uuid->bytes[k] = (unsigned char)((phys % 10) | ((phys / 10 % 10) << 4));
        phys /= 100;
    }
    return FC_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult cuDeviceGetPCIBusId(char *busid, int len, CUdevice dev)
{
    FC_NEED_INIT();
    if (!busid || len <= 0)
        return FC_ERROR_INVALID_VALUE;
    FC_NEED_DEV(dev);
    snprintf(busid, (size_t)len, "0000:%02x:00.0", 0x10 + fc_vis[dev]);
    return FC_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    FC_NEED_INIT();
    if (!bytes)
        return FC_ERROR_INVALID_VALUE;
    FC_NEED_DEV(dev);
    *bytes = (size_t)FC_TOTAL_MEM;
    return FC_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev)
{
    FC_NEED_INIT();
    if (!value)
        return FC_ERROR_INVALID_VALUE;
    FC_NEED_DEV(dev);
    *value = attrib == FC_ATTR_CC_MAJOR ? 9 : 0;
    return FC_SUCCESS;
}

/* ------------------------------------------------------------- contexts */

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
    pthread_mutex_lock(&fc_lock);
    if (!fc_ctx_ok(ctx)) {
        pthread_mutex_unlock(&fc_lock);
        return FC_ERROR_INVALID_CONTEXT;
    }
    pthread_mutex_unlock(&fc_lock);
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
    pthread_mutex_lock(&fc_lock);
    if (!fc_ctx_ok(ctx)) {
        pthread_mutex_unlock(&fc_lock);
        return FC_ERROR_INVALID_CONTEXT;
    }
    pthread_mutex_unlock(&fc_lock);
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
        } else if (bytes > FC_TOTAL_MEM - fc_used[c->phys]) {
            rc = 2;     /* CUDA_ERROR_OUT_OF_MEMORY */
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
    if (dptr == 0)
        return FC_SUCCESS;
    pthread_mutex_lock(&fc_lock);
    for (pp = &fc_allocs; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr == dptr) {
            a = *pp;
            *pp = a->next;
            fc_used[a->phys] -= a->size;
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
    if (!free_bytes || !total_bytes)
        return FC_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_lock);
    c = fc_cur_live();
    if (!c) {
        rc = FC_ERROR_INVALID_CONTEXT;
    } else {
        *total_bytes = (size_t)FC_TOTAL_MEM;
        *free_bytes = (size_t)FC_TOTAL_MEM - fc_used[c->phys];
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

/* ------------------------------------------------------ cuGetProcAddress */

static CUresult fc_gpa_v1(const char *symbol, void **pfn, int cuda_version,
                          unsigned long long flags);
static CUresult fc_gpa_v2(const char *symbol, void **pfn, int cuda_version,
                          unsigned long long flags, int *symbol_status);

#define FC_IMPL_ENTRY(n) { #n, (fc_fn)n },
static const struct fc_sym fc_impl_table[] = { FC_IMPLEMENTED(FC_IMPL_ENTRY) };

static int fc_sym_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const struct fc_sym *)elem)->name);
}

/* Direct references only (never dlsym): an interposer may hook dlsym. */
static fc_fn fc_find(const char *name)
{
    const struct fc_sym *s;
    size_t i;
    if (strcmp(name, "cuGetProcAddress") == 0)
        return (fc_fn)fc_gpa_v1;
    if (strcmp(name, "cuGetProcAddress_v2") == 0)
        return (fc_fn)fc_gpa_v2;
    for (i = 0; i < sizeof fc_impl_table / sizeof fc_impl_table[0]; i++)
        if (strcmp(fc_impl_table[i].name, name) == 0)
            return fc_impl_table[i].fn;
    s = bsearch(name, fc_stub_table, fc_stub_count, sizeof fc_stub_table[0], fc_sym_cmp);
    return s ? s->fn : NULL;
}

/* Implemented names: pick the variant by the caller's cudaVersion the way the
 * real driver does (the newest variant introduced at or before cudaVersion;
 * entries newest first).  The version numbers are those at which each variant
 * appeared in the driver API.  Names not listed here get the highest name_vN
 * the fake exports. */
static const struct { const char *base; int min_version; const char *variant; } fc_versioned[] = {
    { "cuGetProcAddress",            12000, "cuGetProcAddress_v2" },
    { "cuGetProcAddress",                0, "cuGetProcAddress" },
    { "cuCtxCreate",                 12050, "cuCtxCreate_v4" },
    { "cuCtxCreate",                 11040, "cuCtxCreate_v3" },
    { "cuCtxCreate",                  3020, "cuCtxCreate_v2" },
    { "cuCtxCreate",                     0, "cuCtxCreate" },
    { "cuCtxDestroy",                 4000, "cuCtxDestroy_v2" },
    { "cuCtxDestroy",                    0, "cuCtxDestroy" },
    { "cuCtxPushCurrent",             4000, "cuCtxPushCurrent_v2" },
    { "cuCtxPushCurrent",                0, "cuCtxPushCurrent" },
    { "cuCtxPopCurrent",              4000, "cuCtxPopCurrent_v2" },
    { "cuCtxPopCurrent",                 0, "cuCtxPopCurrent" },
    { "cuCtxSynchronize",            13000, "cuCtxSynchronize_v2" },
    { "cuCtxSynchronize",                0, "cuCtxSynchronize" },
    { "cuCtxGetDevice",              13000, "cuCtxGetDevice_v2" },
    { "cuCtxGetDevice",                  0, "cuCtxGetDevice" },
    { "cuDeviceGetUuid",             11040, "cuDeviceGetUuid_v2" },
    { "cuDeviceGetUuid",                 0, "cuDeviceGetUuid" },
    { "cuDeviceTotalMem",             3020, "cuDeviceTotalMem_v2" },
    { "cuDeviceTotalMem",                0, "cuDeviceTotalMem" },
    { "cuDevicePrimaryCtxRelease",   11000, "cuDevicePrimaryCtxRelease_v2" },
    { "cuDevicePrimaryCtxRelease",       0, "cuDevicePrimaryCtxRelease" },
    { "cuDevicePrimaryCtxReset",     11000, "cuDevicePrimaryCtxReset_v2" },
    { "cuDevicePrimaryCtxReset",         0, "cuDevicePrimaryCtxReset" },
    { "cuDevicePrimaryCtxSetFlags",  11000, "cuDevicePrimaryCtxSetFlags_v2" },
    { "cuDevicePrimaryCtxSetFlags",      0, "cuDevicePrimaryCtxSetFlags" },
    { "cuMemAlloc",                   3020, "cuMemAlloc_v2" },
    { "cuMemAlloc",                      0, "cuMemAlloc" },
    { "cuMemFree",                    3020, "cuMemFree_v2" },
    { "cuMemFree",                       0, "cuMemFree" },
    { "cuMemGetInfo",                 3020, "cuMemGetInfo_v2" },
    { "cuMemGetInfo",                    0, "cuMemGetInfo" },
};

/* The export that answers (symbol, cudaVersion, flags), or NULL. */
static fc_fn fc_resolve(const char *symbol, int cuda_version, unsigned long long flags)
{
    char name[256], cand[272];
    size_t i;
    int v, found = 0;
    fc_fn fn;

    if (!symbol || strlen(symbol) >= sizeof name - 16)
        return NULL;
    for (i = 0; i < sizeof fc_versioned / sizeof fc_versioned[0]; i++) {
        if (strcmp(fc_versioned[i].base, symbol) == 0 && cuda_version >= fc_versioned[i].min_version) {
            snprintf(name, sizeof name, "%s", fc_versioned[i].variant);
            found = 1;
            break;
        }
    }
    /* Otherwise the highest name_vN that exists, else the name itself. */
    for (v = 9; !found && v >= 2; v--) {
        snprintf(name, sizeof name, "%s_v%d", symbol, v);
        found = fc_find(name) != NULL;
    }
    if (!found)
        snprintf(name, sizeof name, "%s", symbol);

    if (flags & FC_GPA_PER_THREAD_STREAM) {
        snprintf(cand, sizeof cand, "%s_ptsz", name);
        if ((fn = fc_find(cand)))
            return fn;
        snprintf(cand, sizeof cand, "%s_ptds", name);
        if ((fn = fc_find(cand)))
            return fn;
    }
    return fc_find(name);
}

static CUresult fc_gpa_v2(const char *symbol, void **pfn, int cuda_version,
                          unsigned long long flags, int *symbol_status)
{
    fc_fn fn = NULL;
    if (pfn)
        *pfn = NULL;
    if (symbol_status)
        *symbol_status = FC_GPA_SYMBOL_NOT_FOUND;
    if (fc_env_flag("FAKECUDA_NO_GETPROCADDRESS"))
        return FC_ERROR_NOT_FOUND;
    if (!symbol || !pfn)
        return FC_ERROR_INVALID_VALUE;
    fn = fc_resolve(symbol, cuda_version, flags);
    if (!fn)
        return FC_ERROR_NOT_FOUND;
    memcpy(pfn, &fn, sizeof fn);
    if (symbol_status)
        *symbol_status = FC_GPA_FOUND;
    return FC_SUCCESS;
}

static CUresult fc_gpa_v1(const char *symbol, void **pfn, int cuda_version,
                          unsigned long long flags)
{
    return fc_gpa_v2(symbol, pfn, cuda_version, flags, NULL);
}

/* The exported cuGetProcAddress(_v2) are indirect functions: the resolver
 * runs when the dynamic linker or dlsym looks the name up, and with
 * FAKECUDA_HIDE_GETPROCADDRESS=1 it yields NULL, so dlsym() finds nothing -
 * as with a driver that predates cuGetProcAddress.  (Bindings made while the
 * program starts up cannot see the environment yet and always get the real
 * function.) */
typedef CUresult (*fc_gpa_v1_t)(const char *, void **, int, unsigned long long);
typedef CUresult (*fc_gpa_v2_t)(const char *, void **, int, unsigned long long, int *);

__attribute__((used)) static fc_gpa_v1_t fc_ifunc_gpa_v1(void)
{
    return fc_env_flag("FAKECUDA_HIDE_GETPROCADDRESS") ? NULL : fc_gpa_v1;
}

__attribute__((used)) static fc_gpa_v2_t fc_ifunc_gpa_v2(void)
{
    return fc_env_flag("FAKECUDA_HIDE_GETPROCADDRESS") ? NULL : fc_gpa_v2;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                          unsigned long long flags) __attribute__((ifunc("fc_ifunc_gpa_v1")));
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                             unsigned long long flags, int *symbol_status)
    __attribute__((ifunc("fc_ifunc_gpa_v2")));

CUresult cuGetExportTable(const void **table, const CUuuid *table_id)
{
    (void)table_id;
    if (table)
        *table = NULL;
    return FC_ERROR_NOT_SUPPORTED;
}
