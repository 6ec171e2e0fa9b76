/* selftest.c - exercises the fake libcuda.so.1 (linked with -lcuda).
 *
 *   selftest          full check (sets CUDA_VISIBLE_DEVICES=2,5 itself);
 *                     exit 0 when everything is as expected
 *   selftest info     cuInit with the environment as given, then print
 *                     "init=<rc> count=<n>" and one "dev=<ordinal> name=<..>
 *                     bus=<..> uuid=<..>" line per visible device
 *   selftest hold     retain the primary context of ordinal 0, allocate,
 *                     print "ready", then sleep (for SIGKILL tests)
 *   selftest leak     create a context on ordinal 0 and exit without
 *                     destroying it (the destructor writes the end line)
 *   selftest gpa      print "v1=<rc> v2=<rc> status=<s> pfn=<null|set>" for
 *                     cuGetProcAddress(_v2)("cuInit")
 *   selftest dlsym    print "<name>=<null|set>" for dlsym() of cuGetProcAddress,
 *                     cuGetProcAddress_v2 and cuInit in libcuda.so.1
 */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef CUresult (*gpa_v1_t)(const char *, void **, int, unsigned long long);
typedef CUresult (*gpa_v2_t)(const char *, void **, int, unsigned long long, int *);
typedef int (*stub_t)(void);

static int failures;

#define CHECK(cond) do { \
        if (!(cond)) { fprintf(stderr, "selftest: %s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); failures++; } \
    } while (0)

static void uuid_text(char *buf, size_t sz, const CUuuid *u)
{
    const unsigned char *b = u->bytes;
    snprintf(buf, sz, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
             b[12], b[13], b[14], b[15]);
}

static int mode_info(void)
{
    int rc = cuInit(0), n = 0, i;
    if (rc == 0)
        cuDeviceGetCount(&n);
    printf("init=%d count=%d\n", rc, n);
    for (i = 0; i < n; i++) {
        char name[64], bus[32], ut[64];
        CUuuid u;
        CUdevice d;
        if (cuDeviceGet(&d, i) || cuDeviceGetName(name, sizeof name, d) ||
            cuDeviceGetPCIBusId(bus, sizeof bus, d) || cuDeviceGetUuid_v2(&u, d))
            return 1;
        uuid_text(ut, sizeof ut, &u);
        printf("dev=%d name=%s bus=%s uuid=%s\n", d, name, bus, ut);
    }
    return 0;
}

static int mode_hold(void)
{
    CUcontext ctx;
    CUdeviceptr p;
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) ||
        cuMemAlloc_v2(&p, 1 << 20))
        return 1;
    printf("ready\n");
    fflush(stdout);
    for (;;)
        sleep(60);
}

static int mode_leak(void)
{
    CUcontext ctx;
    if (cuInit(0) || cuCtxCreate_v2(&ctx, 0, 0) || cuCtxSynchronize())
        return 1;
    return 0;
}

static int mode_gpa(void)
{
    void *p1 = &p1, *p2 = &p2;
    int status = -1;
    int r1 = cuGetProcAddress("cuInit", &p1, 12000, 0);
    int r2 = cuGetProcAddress_v2("cuInit", &p2, 13000, 0, &status);
    printf("v1=%d v2=%d status=%d pfn=%s\n", r1, r2, status, (p1 || p2) ? "set" : "null");
    return 0;
}

static int mode_dlsym(void)
{
    static const char *const names[] = { "cuGetProcAddress", "cuGetProcAddress_v2", "cuInit" };
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    size_t i;
    if (!h)
        return 1;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        printf("%s=%s\n", names[i], dlsym(h, names[i]) ? "set" : "null");
    dlclose(h);
    return 0;
}

static void full_driver_api(void)
{
    int n = -1, v = 0, attr = -1;
    CUdevice d = -1, cd = -1;
    CUcontext ctx = NULL, cur = NULL, pctx = NULL;
    CUdeviceptr p = 0;
    size_t fr = 0, tot = 0;
    char name[64], bus[32], ut[64];
    CUuuid u;

    CHECK(cuDeviceGetCount(&n) == FC_ERROR_NOT_INITIALIZED);
    CHECK(cuDriverGetVersion(&v) == 0 && v == 13000);
    setenv("CUDA_VISIBLE_DEVICES", "2,5", 1);
    CHECK(cuInit(0) == 0);
    setenv("CUDA_VISIBLE_DEVICES", "0", 1);     /* not re-read */
    CHECK(cuInit(0) == 0);
    CHECK(cuDeviceGetCount(&n) == 0 && n == 2);
    CHECK(cuDeviceGet(&d, 2) == FC_ERROR_INVALID_DEVICE);
    CHECK(cuDeviceGet(&d, 1) == 0 && d == 1);
    CHECK(cuDeviceGetName(name, sizeof name, d) == 0 && strcmp(name, "Fake GPU 5") == 0);
    CHECK(cuDeviceGetPCIBusId(bus, sizeof bus, d) == 0 && strcmp(bus, "0000:15:00.0") == 0);
    CHECK(cuDeviceGetUuid_v2(&u, d) == 0);
    uuid_text(ut, sizeof ut, &u);
    CHECK(strcmp(ut, "GPU-face0000-0000-0000-0000-000000000005") == 0);
    CHECK(cuDeviceTotalMem_v2(&tot, d) == 0 && tot == 80ULL << 30);
    CHECK(cuDeviceGetAttribute(&attr, FC_ATTR_CC_MAJOR, d) == 0 && attr == 9);
    CHECK(cuDeviceGetAttribute(&attr, FC_ATTR_CC_MINOR, d) == 0 && attr == 0);
    CHECK(cuMemAlloc_v2(&p, 16) == FC_ERROR_INVALID_CONTEXT);

    CHECK(cuCtxCreate_v2(&ctx, 0, d) == 0 && ctx != NULL);
    CHECK(cuCtxGetCurrent(&cur) == 0 && cur == ctx);
    CHECK(cuCtxGetDevice(&cd) == 0 && cd == 1);
    CHECK(cuMemAlloc_v2(&p, 1 << 20) == 0 && p != 0);
    CHECK(cuMemGetInfo_v2(&fr, &tot) == 0 && tot == 80ULL << 30 && fr == tot - (1 << 20));
    CHECK(cuCtxSynchronize() == 0);
    CHECK(cuMemFree_v2(p) == 0);
    CHECK(cuMemFree_v2(p) == FC_ERROR_INVALID_VALUE);
    /* A primary context on the same device must not produce a second begin. */
    CHECK(cuDevicePrimaryCtxRetain(&pctx, d) == 0 && pctx != NULL);
    CHECK(cuDevicePrimaryCtxRelease_v2(d) == 0);
    CHECK(cuCtxDestroy_v2(ctx) == 0);
    CHECK(cuCtxGetCurrent(&cur) == 0 && cur == NULL);
    CHECK(cuCtxDestroy_v2(ctx) == FC_ERROR_INVALID_CONTEXT);
    CHECK(cuDevicePrimaryCtxRelease_v2(d) == FC_ERROR_INVALID_CONTEXT);
}

static void full_getprocaddress(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    gpa_v2_t gpa2;
    gpa_v1_t gpa1;
    void *p = NULL;
    int st = -1;

    CHECK(h != NULL);
    if (!h)
        return;
    p = dlsym(h, "cuGetProcAddress_v2");
    memcpy(&gpa2, &p, sizeof p);
    p = dlsym(h, "cuGetProcAddress");
    memcpy(&gpa1, &p, sizeof p);
    CHECK(gpa2 != NULL && gpa1 != NULL);
    if (!gpa2 || !gpa1)
        return;

    CHECK(gpa2("cuGetProcAddress", &p, 11030, 0, &st) == 0 && st == 0);
    CHECK(p != NULL && p == dlsym(h, "cuGetProcAddress"));
    CHECK(gpa2("cuGetProcAddress", &p, 12000, 0, &st) == 0 && st == 0);
    CHECK(p != NULL && p == dlsym(h, "cuGetProcAddress_v2"));
    CHECK(gpa1("cuInit", &p, 12000, 0) == 0 && p == dlsym(h, "cuInit"));
    CHECK(gpa2("cuCtxCreate", &p, 13000, 0, &st) == 0 && p == dlsym(h, "cuCtxCreate_v4"));
    CHECK(gpa2("cuCtxCreate", &p, 11040, 0, &st) == 0 && p == dlsym(h, "cuCtxCreate_v3"));
    CHECK(gpa2("cuCtxCreate", &p, 10000, 0, &st) == 0 && p == dlsym(h, "cuCtxCreate_v2"));
    CHECK(gpa2("cuCtxDestroy", &p, 13000, 0, &st) == 0 && p == dlsym(h, "cuCtxDestroy_v2"));
    CHECK(gpa2("cuCtxSynchronize", &p, 12080, 0, &st) == 0 && p == dlsym(h, "cuCtxSynchronize"));
    CHECK(gpa2("cuCtxSynchronize", &p, 13000, 0, &st) == 0 && p == dlsym(h, "cuCtxSynchronize_v2"));
    CHECK(gpa2("cuMemAlloc", &p, 13000, 0, &st) == 0 && p == dlsym(h, "cuMemAlloc_v2"));
    CHECK(gpa2("cuMemAlloc", &p, 2000, 0, &st) == 0 && p == dlsym(h, "cuMemAlloc"));
    CHECK(gpa2("cuDevicePrimaryCtxRelease", &p, 7000, 0, &st) == 0 &&
          p == dlsym(h, "cuDevicePrimaryCtxRelease"));
    CHECK(gpa2("cuDevicePrimaryCtxRelease", &p, 13000, 0, &st) == 0 &&
          p == dlsym(h, "cuDevicePrimaryCtxRelease_v2"));
    /* Stubs are in the table too, per-thread variants with flags == 2. */
    CHECK(gpa2("cuMemcpyHtoD", &p, 13000, 0, &st) == 0 && p == dlsym(h, "cuMemcpyHtoD_v2"));
    CHECK(gpa2("cuMemcpyHtoD", &p, 13000, 2, &st) == 0 && p == dlsym(h, "cuMemcpyHtoD_v2_ptds"));
    CHECK(gpa2("cuLaunchKernel", &p, 13000, 2, &st) == 0 && p == dlsym(h, "cuLaunchKernel_ptsz"));
    CHECK(gpa2("cuLaunchKernel", &p, 13000, 0, &st) == 0 && p == dlsym(h, "cuLaunchKernel"));
    CHECK(gpa2("cuStreamCreate", &p, 13000, 0, &st) == 0 && p == dlsym(h, "cuStreamCreate"));
    if (p)
        CHECK(((stub_t)(void (*)(void))p)() == FC_ERROR_NOT_SUPPORTED);
    p = &p;
    CHECK(gpa2("cuNoSuchFunction", &p, 13000, 0, &st) == FC_ERROR_NOT_FOUND && p == NULL && st == 1);
    CHECK(dlsym(h, "fc_stub_table") == NULL);   /* only cu* exported */
    dlclose(h);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "info") == 0)
        return mode_info();
    if (argc > 1 && strcmp(argv[1], "hold") == 0)
        return mode_hold();
    if (argc > 1 && strcmp(argv[1], "leak") == 0)
        return mode_leak();
    if (argc > 1 && strcmp(argv[1], "gpa") == 0)
        return mode_gpa();
    if (argc > 1 && strcmp(argv[1], "dlsym") == 0)
        return mode_dlsym();
    if (argc > 1) {
        fprintf(stderr, "usage: %s [info|hold|leak|gpa|dlsym]\n", argv[0]);
        return 2;
    }
    full_driver_api();
    full_getprocaddress();
    if (failures)
        fprintf(stderr, "selftest: %d check(s) failed\n", failures);
    else
        fprintf(stderr, "selftest: OK\n");
    return failures ? 1 : 0;
}
