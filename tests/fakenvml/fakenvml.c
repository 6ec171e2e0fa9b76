/*
 * fakenvml.c - a fake libnvidia-ml.so.1 for the tests, driven by a file.
 *
 * Only the handful of NVML functions that gpumutex (and tests of other
 * parts) use. Every call re-reads the file named by FAKENVML_FILE, so a
 * test changes what the "GPUs" report between two calls by rewriting it
 * (rename a new file into place). Format (README.md): one directive a line,
 *   count N                    number of devices (default 2)
 *   util D GPU MEM             utilisation rates of device D, percent
 *   mem D USED TOTAL           memory of device D, bytes
 *   proc D PID USED            a compute process on device D using USED bytes
 *                              (USED may be "na": NVML_VALUE_NOT_AVAILABLE)
 *   name D TEXT...             device name (default "Fake GPU D")
 *   pci D DOMAIN BUS DEVICE    device D's PCI address (default 0 D 0)
 *   fail FUNCTION CODE         FUNCTION returns nvmlReturn_t CODE
 *   crash FUNCTION             FUNCTION calls abort() (a broken library)
 * Lines that do not parse are ignored. Without FAKENVML_FILE the library
 * reports two idle devices. FAKENVML_LOG, when set, gets one line per call
 * ("<function>\n"), so a test can tell what was called.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXDEV 64
#define MAXPROC 256
#define NA (~0ULL)

typedef int nvmlReturn_t;
typedef struct fake_dev *nvmlDevice_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;

/* nvmlPciInfo_t of NVML 11 and later (the _v3 layout). */
typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;

struct fake_dev {
	int index;
	unsigned util, memutil;
	unsigned long long used, total;
	unsigned domain, bus, slot;
	char name[96];
};

static void uuid_of(const struct fake_dev *f, char *u, size_t len);

struct fake_proc { int dev; unsigned pid; unsigned long long used; };

static struct fake_dev devs[MAXDEV];
static struct fake_proc procs[MAXPROC];
static int ndev, nproc, inited;
static char fails[32][64];
static int failcode[32], nfail;
static char crashes[16][64];
static int ncrash;

static void note(const char *fn)
{
	const char *p = getenv("FAKENVML_LOG");
	char line[96];
	int fd, n;

	if (!p || !*p)
		return;
	fd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof line, "%s\n", fn);
	(void)!write(fd, line, (size_t)n);
	close(fd);
}

static void load(void)
{
	const char *p = getenv("FAKENVML_FILE");
	char line[512];
	FILE *f;

	ndev = 2;
	nproc = nfail = ncrash = 0;
	for (int i = 0; i < MAXDEV; i++) {
		devs[i].index = i;
		devs[i].util = devs[i].memutil = 0;
		devs[i].used = 0;
		devs[i].total = 80ULL << 30;
		devs[i].domain = 0;
		devs[i].bus = (unsigned)i;
		devs[i].slot = 0;
		snprintf(devs[i].name, sizeof devs[i].name, "Fake GPU %d", i);
	}
	if (!p || !*p || !(f = fopen(p, "re")))
		return;
	while (fgets(line, sizeof line, f)) {
		int d, n;
		unsigned a, b;
		unsigned long long x, y;
		char w[64];

		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "count %d", &n) == 1 && n >= 0 && n <= MAXDEV)
			ndev = n;
		else if (sscanf(line, "util %d %u %u", &d, &a, &b) == 3 &&
			 d >= 0 && d < MAXDEV)
			devs[d].util = a, devs[d].memutil = b;
		else if (sscanf(line, "pci %d %u %u %u", &d, &a, &b, &n) == 4 &&
			 d >= 0 && d < MAXDEV)
			devs[d].domain = a, devs[d].bus = b, devs[d].slot = (unsigned)n;
		else if (sscanf(line, "mem %d %llu %llu", &d, &x, &y) == 3 &&
			 d >= 0 && d < MAXDEV)
			devs[d].used = x, devs[d].total = y;
		else if (nproc < MAXPROC &&
			 sscanf(line, "proc %d %u %63s", &d, &a, w) == 3 &&
			 d >= 0 && d < MAXDEV) {
			procs[nproc].dev = d;
			procs[nproc].pid = a;
			procs[nproc++].used = strcmp(w, "na") == 0 ? NA :
				strtoull(w, NULL, 10);
		} else if (sscanf(line, "name %d %n", &d, &n) == 1 &&
			   d >= 0 && d < MAXDEV)
			snprintf(devs[d].name, sizeof devs[d].name, "%s", line + n);
		else if (nfail < 32 &&
			 sscanf(line, "fail %63s %d", fails[nfail], &failcode[nfail]) == 2)
			nfail++;
		else if (ncrash < 16 && sscanf(line, "crash %63s", crashes[ncrash]) == 1)
			ncrash++;
	}
	fclose(f);
}

/* Every entry point starts here: reload, journal, and the injected
 * failure (or crash) of this function, if any. */
static int enter(const char *fn)
{
	load();
	note(fn);
	for (int i = 0; i < ncrash; i++)
		if (strcmp(crashes[i], fn) == 0)
			abort();
	for (int i = 0; i < nfail; i++)
		if (strcmp(fails[i], fn) == 0)
			return failcode[i];
	return 0;
}

#define ENTER(fn) do { int rc_ = enter(fn); if (rc_) return rc_; } while (0)
#define NEED_INIT() do { if (!inited) return 1; } while (0) /* UNINITIALIZED */

#define API __attribute__((visibility("default")))

API nvmlReturn_t nvmlInit_v2(void);
API nvmlReturn_t nvmlInit(void);
API nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
API nvmlReturn_t nvmlShutdown(void);
API const char *nvmlErrorString(nvmlReturn_t r);
API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n);
API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n);
API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d);
API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d);
API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u);
API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m);
API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int len);
API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len);
API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d);
API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p);
API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p);
API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p);
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v2_t *p);
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v2_t *p);
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v1_t *p);

nvmlReturn_t nvmlInit_v2(void) { ENTER("nvmlInit_v2"); inited++; return 0; }
nvmlReturn_t nvmlInit(void) { ENTER("nvmlInit"); inited++; return 0; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	(void)flags;
	ENTER("nvmlInitWithFlags");
	inited++;
	return 0;
}

nvmlReturn_t nvmlShutdown(void)
{
	ENTER("nvmlShutdown");
	NEED_INIT();
	inited--;
	return 0;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case 0: return "Success";
	case 1: return "Uninitialized";
	case 2: return "Invalid Argument";
	case 3: return "Not Supported";
	case 4: return "Insufficient Permissions";
	case 7: return "Insufficient Size";
	case 9: return "Driver Not Loaded";
	case 15: return "GPU is lost";
	default: return "Unknown Error";
	}
}

static nvmlReturn_t count(const char *fn, unsigned int *n)
{
	ENTER(fn);
	NEED_INIT();
	if (!n)
		return 2;
	*n = (unsigned)ndev;
	return 0;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { return count("nvmlDeviceGetCount_v2", n); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return count("nvmlDeviceGetCount", n); }

static nvmlReturn_t handle(const char *fn, unsigned int i, nvmlDevice_t *d)
{
	ENTER(fn);
	NEED_INIT();
	if (!d || i >= (unsigned)ndev)
		return 2;
	*d = &devs[i];
	return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { return handle("nvmlDeviceGetHandleByIndex_v2", i, d); }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { return handle("nvmlDeviceGetHandleByIndex", i, d); }

/* A handle the fake gave out, still valid after the file changed. */
static struct fake_dev *dev_of(nvmlDevice_t d)
{
	if (d < devs || d >= devs + MAXDEV || d->index >= ndev)
		return NULL;
	return d;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	struct fake_dev *f;

	ENTER("nvmlDeviceGetUtilizationRates");
	NEED_INIT();
	if (!(f = dev_of(d)) || !u)
		return 2;
	u->gpu = f->util;
	u->memory = f->memutil;
	return 0;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	struct fake_dev *f;

	ENTER("nvmlDeviceGetMemoryInfo");
	NEED_INIT();
	if (!(f = dev_of(d)) || !m)
		return 2;
	m->total = f->total;
	m->used = f->used;
	m->free = f->total > f->used ? f->total - f->used : 0;
	return 0;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int len)
{
	struct fake_dev *f;

	ENTER("nvmlDeviceGetName");
	NEED_INIT();
	if (!(f = dev_of(d)) || !buf)
		return 2;
	if (strlen(f->name) + 1 > len)
		return 7;
	memcpy(buf, f->name, strlen(f->name) + 1);
	return 0;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len)
{
	struct fake_dev *f;
	char u[80];

	ENTER("nvmlDeviceGetUUID");
	NEED_INIT();
	if (!(f = dev_of(d)) || !buf)
		return 2;
	uuid_of(f, u, sizeof u);
	if (strlen(u) + 1 > len)
		return 7;
	memcpy(buf, u, strlen(u) + 1);
	return 0;
}

/* The process list in either layout: NVML's contract, INSUFFICIENT_SIZE
 * with the count needed when the caller's array is too small. */
static nvmlReturn_t procs_of(const char *fn, nvmlDevice_t d, unsigned int *n,
			     void *out, int v1)
{
	struct fake_dev *f;
	unsigned k = 0;

	ENTER(fn);
	NEED_INIT();
	if (!(f = dev_of(d)) || !n)
		return 2;
	for (int i = 0; i < nproc; i++)
		if (procs[i].dev == f->index)
			k++;
	if (k > *n || (k && !out)) {
		*n = k;
		return 7;
	}
	k = 0;
	for (int i = 0; i < nproc; i++) {
		if (procs[i].dev != f->index)
			continue;
		if (v1) {
			nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)out + k;
			p->pid = procs[i].pid;
			p->usedGpuMemory = procs[i].used;
		} else {
			nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)out + k;
			p->pid = procs[i].pid;
			p->usedGpuMemory = procs[i].used;
			p->gpuInstanceId = p->computeInstanceId = ~0u;
		}
		k++;
	}
	*n = k;
	return 0;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v2_t *p) { return procs_of("nvmlDeviceGetComputeRunningProcesses_v3", d, n, p, 0); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v2_t *p) { return procs_of("nvmlDeviceGetComputeRunningProcesses_v2", d, n, p, 0); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v1_t *p) { return procs_of("nvmlDeviceGetComputeRunningProcesses", d, n, p, 1); }

static void uuid_of(const struct fake_dev *f, char *u, size_t len)
{
	snprintf(u, len, "GPU-fa4e0000-0000-0000-0000-%012d", f->index);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d)
{
	char u[80];

	ENTER("nvmlDeviceGetHandleByUUID");
	NEED_INIT();
	if (!uuid || !d)
		return 2;
	for (int i = 0; i < ndev; i++) {
		uuid_of(&devs[i], u, sizeof u);
		if (strcmp(u, uuid) == 0) {
			*d = &devs[i];
			return 0;
		}
	}
	return 6; /* NVML_ERROR_NOT_FOUND */
}

static nvmlReturn_t pci_of(const char *fn, nvmlDevice_t d, nvmlPciInfo_t *p)
{
	struct fake_dev *f;

	ENTER(fn);
	NEED_INIT();
	if (!(f = dev_of(d)) || !p)
		return 2;
	memset(p, 0, sizeof *p);
	p->domain = f->domain;
	p->bus = f->bus;
	p->device = f->slot;
	snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04x:%02x:%02x.0",
		 f->domain & 0xffff, f->bus & 0xff, f->slot & 0xff);
	snprintf(p->busId, sizeof p->busId, "%08x:%02x:%02x.0", f->domain,
		 f->bus & 0xff, f->slot & 0xff);
	return 0;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_of("nvmlDeviceGetPciInfo_v3", d, p); }
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_of("nvmlDeviceGetPciInfo_v2", d, p); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_of("nvmlDeviceGetPciInfo", d, p); }
