/* procaddr.c - how a program finds the fake driver's functions:
 * cuGetProcAddress and cuGetProcAddress_v2 (the implemented functions,
 * their variant chosen by cudaVersion as the real driver chooses, then the
 * generated stubs), exported as GNU indirect functions so that
 * FAKECUDA_HIDE_GETPROCADDRESS=1 can make dlsym miss them, and
 * cuGetExportTable. Apart from the functions themselves (fakecuda.c,
 * context.c) because it is the one part that knows every name the fake
 * has.
 *
 * Never writes to stdout or stderr.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fcint.h"

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
