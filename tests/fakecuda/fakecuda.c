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
 * The files: this one, the devices (enumeration, cuInit, the device
 * queries); context.c, contexts, memory and launches; journal.c, the
 * journal and the use counts; procaddr.c, cuGetProcAddress. fcint.h is
 * what they share.
 *
 * Never writes to stdout or stderr.
 */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fcint.h"

#define FC_DEFAULT_NDEV  8

pthread_mutex_t fc_lock = PTHREAD_MUTEX_INITIALIZER;

/* Initialisation state (written once under fc_lock). */
static int fc_state;        /* 0 = cuInit not run, 1 = ok, 2 = failed */
static CUresult fc_init_rc;
int fc_nvis;
int fc_vis[FC_MAX_DEV];

static void *volatile fc_self_gpa;   /* result of the self-lookup in cuInit */

/* ------------------------------------------------------------ enumeration */

int fc_env_flag(const char *name)
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
    fc_primary_setup();

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

int fc_ready(void)
{
    return __atomic_load_n(&fc_state, __ATOMIC_ACQUIRE) == 1;
}

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
