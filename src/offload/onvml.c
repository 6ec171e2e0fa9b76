/*
 * onvml.c - NVML through dlopen for the policy (onvml.h).
 *
 * The functions are NVML's stable C ABI (nvml.h of the driver), declared
 * here as the few types they take, so that the build needs no NVIDIA
 * header. Entry points with a version suffix (_v2, _v3) are taken when
 * present, the unversioned ones of older drivers otherwise.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onvml.h"

typedef int nvml_rc;               /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef void *nvml_dev;            /* nvmlDevice_t */
struct nvml_util { unsigned gpu, memory; };           /* nvmlUtilization_t */
struct nvml_mem { unsigned long long total, free, used; }; /* nvmlMemory_t */
/* nvmlPciInfo_t: every version has domain, bus, device at bytes 16, 20,
 * 24 (after a 16-byte bus id string); the rest differs, so the buffer is
 * larger than any of them and only those three are read. */
#define GPO__PCI_BUF 256

static struct {
	int tried;             /* loading was tried (once a process) */
	int ok;                /* loaded and initialised */
	unsigned said;         /* bit per kind of message said */
	nvml_rc (*count)(unsigned *);
	nvml_rc (*by_index)(unsigned, nvml_dev *);
	nvml_rc (*by_uuid)(const char *, nvml_dev *);
	nvml_rc (*pci)(nvml_dev, void *);
	nvml_rc (*util)(nvml_dev, struct nvml_util *);
	nvml_rc (*mem)(nvml_dev, struct nvml_mem *);
	const char *(*err)(nvml_rc);
	/* the device, for the environment it was found under */
	int resolved;          /* 1 found, -1 cannot be established */
	nvml_dev dev;
	char key[256];         /* CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER */
} gpo__nv;

enum { GPO__SAID_LOAD = 1, GPO__SAID_MAP = 2, GPO__SAID_UTIL = 4,
       GPO__SAID_MEM = 8 };

/* `msg` gets the line unless this kind was said before. */
static void gpo__tell(char *msg, size_t len, unsigned kind, const char *fmt,
		      const char *a, const char *b)
{
	if (gpo__nv.said & kind)
		return;
	gpo__nv.said |= kind;
	snprintf(msg, len, fmt, a, b);
}

static const char *gpo__err(nvml_rc rc)
{
	const char *s = gpo__nv.err ? gpo__nv.err(rc) : NULL;
	return s ? s : "error";
}

static void *gpo__sym(void *h, const char *a, const char *b)
{
	void *p = dlsym(h, a);
	return p || !b ? p : dlsym(h, b);
}

static int gpo__load(char *msg, size_t len)
{
	nvml_rc (*init)(void);
	void *h;
	nvml_rc rc;
	char code[48];

	if (gpo__nv.tried)
		return gpo__nv.ok ? 0 : -1;
	gpo__nv.tried = 1;
	h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		gpo__tell(msg, len, GPO__SAID_LOAD,
			  "NVML is not available (%s); other programs' use of the GPU is not checked%s",
			  e ? e : "libnvidia-ml.so.1 not found", "");
		return -1;
	}
	init = (nvml_rc (*)(void))gpo__sym(h, "nvmlInit_v2", "nvmlInit");
	gpo__nv.err = (const char *(*)(nvml_rc))gpo__sym(h, "nvmlErrorString", NULL);
	gpo__nv.count = (nvml_rc (*)(unsigned *))gpo__sym(h, "nvmlDeviceGetCount_v2",
							    "nvmlDeviceGetCount");
	gpo__nv.by_index = (nvml_rc (*)(unsigned, nvml_dev *))gpo__sym(
		h, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
	gpo__nv.by_uuid = (nvml_rc (*)(const char *, nvml_dev *))gpo__sym(
		h, "nvmlDeviceGetHandleByUUID", NULL);
	gpo__nv.pci = (nvml_rc (*)(nvml_dev, void *))gpo__sym(
		h, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2");
	if (!gpo__nv.pci)
		gpo__nv.pci = (nvml_rc (*)(nvml_dev, void *))gpo__sym(
			h, "nvmlDeviceGetPciInfo", NULL);
	gpo__nv.util = (nvml_rc (*)(nvml_dev, struct nvml_util *))gpo__sym(
		h, "nvmlDeviceGetUtilizationRates", NULL);
	gpo__nv.mem = (nvml_rc (*)(nvml_dev, struct nvml_mem *))gpo__sym(
		h, "nvmlDeviceGetMemoryInfo", NULL);
	if (!init || !gpo__nv.count || !gpo__nv.by_index) {
		gpo__tell(msg, len, GPO__SAID_LOAD,
			  "NVML is not usable (libnvidia-ml.so.1 lacks nvmlInit or the device functions); other programs' use of the GPU is not checked%s%s",
			  "", "");
		return -1;
	}
	if ((rc = init()) != 0) {
		snprintf(code, sizeof code, "code %d", rc);
		gpo__tell(msg, len, GPO__SAID_LOAD,
			  "NVML failed to start (nvmlInit: %s, %s); other programs' use of the GPU is not checked",
			  gpo__err(rc), code);
		return -1;
	}
	/* The library stays loaded and NVML initialised for the process:
	 * both are cheap to keep, and the next reading needs them. */
	gpo__nv.ok = 1;
	return 0;
}

/* The n-th GPU in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID), or -1. */
static int gpo__by_pci(unsigned want, unsigned count, nvml_dev *out)
{
	unsigned char buf[GPO__PCI_BUF];
	uint64_t key[64];
	nvml_dev dev[64];
	unsigned n = 0;

	if (!gpo__nv.pci || count > 64)
		return -1;
	for (unsigned i = 0; i < count; i++) {
		unsigned dom, bus, d;
		memset(buf, 0, sizeof buf);
		if (gpo__nv.by_index(i, &dev[n]) != 0 || gpo__nv.pci(dev[n], buf) != 0)
			return -1;
		memcpy(&dom, buf + 16, 4);
		memcpy(&bus, buf + 20, 4);
		memcpy(&d, buf + 24, 4);
		key[n++] = (uint64_t)dom << 40 | (uint64_t)(bus & 0xff) << 32 |
			   (uint64_t)(d & 0xff) << 24 | i;
	}
	/* the want-th smallest key: few GPUs, a selection is enough */
	for (unsigned k = 0; k < n; k++) {
		unsigned below = 0;
		for (unsigned j = 0; j < n; j++)
			below += key[j] < key[k];
		if (below == want) {
			*out = dev[k];
			return 0;
		}
	}
	return -1;
}

/* Find the device for the environment now; 0 or -1 (msg set once). */
static int gpo__resolve(char *msg, size_t len)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	const char *order = getenv("CUDA_DEVICE_ORDER");
	char key[256], first[128];
	unsigned count = 0;
	uint64_t k = 0;
	int digits = 0;
	const char *why = NULL;

	snprintf(key, sizeof key, "%s|%s", cvd ? cvd : "-", order ? order : "-");
	if (gpo__nv.resolved && strcmp(key, gpo__nv.key) == 0)
		return gpo__nv.resolved > 0 ? 0 : -1;
	snprintf(gpo__nv.key, sizeof gpo__nv.key, "%s", key);
	gpo__nv.resolved = -1;
	/* The backend computes on CUDA device 0: the first visible one. */
	snprintf(first, sizeof first, "%s", cvd ? cvd : "0");
	first[strcspn(first, ",")] = '\0';
	for (const char *s = first; *s >= '0' && *s <= '9'; s++, digits++)
		if (k < 100000)
			k = k * 10 + (uint64_t)(*s - '0');
	if (strncmp(first, "GPU-", 4) == 0) {
		/* CUDA also takes a unique prefix of a UUID, NVML the whole
		 * one only: a prefix it does not find cannot be mapped. */
		if (gpo__nv.by_uuid && gpo__nv.by_uuid(first, &gpo__nv.dev) == 0)
			gpo__nv.resolved = 1;
		else
			why = "NVML does not know that UUID";
	} else if (!digits || first[digits] != '\0') {
		why = "not an index or a GPU UUID";
	} else if (gpo__nv.count(&count) != 0 || k >= count) {
		why = "NVML counts fewer GPUs";
	} else if (count == 1) {
		if (gpo__nv.by_index(0, &gpo__nv.dev) == 0)
			gpo__nv.resolved = 1;
		else
			why = "NVML gives no handle for it";
	} else if (order && strcmp(order, "PCI_BUS_ID") == 0) {
		if (gpo__by_pci((unsigned)k, count, &gpo__nv.dev) == 0)
			gpo__nv.resolved = 1;
		else
			why = "NVML gives no PCI bus ids";
	} else {
		/* CUDA's default order puts the fastest first, which NVML
		 * does not know: device k may be any of them. */
		why = "several GPUs and CUDA_DEVICE_ORDER is not PCI_BUS_ID";
	}
	if (gpo__nv.resolved > 0)
		return 0;
	{
		char what[200];
		snprintf(what, sizeof what, "%s (%s)", first, why);
		gpo__tell(msg, len, GPO__SAID_MAP,
			  "cannot tell which GPU NVML calls CUDA device %s; its use by other programs is not checked%s",
			  what, "");
	}
	return -1;
}

int gpo_nvml_read(struct gpo_nvml_reading *r, char *msg, size_t msglen)
{
	struct nvml_util u;
	struct nvml_mem m;
	nvml_rc rc = 0;

	memset(r, 0, sizeof *r);
	if (msglen)
		msg[0] = '\0';
	if (gpo__load(msg, msglen) || gpo__resolve(msg, msglen))
		return -1;
	if (gpo__nv.util && (rc = gpo__nv.util(gpo__nv.dev, &u)) == 0) {
		r->have_util = 1;
		r->util = u.gpu;
	} else {
		gpo__tell(msg, msglen, GPO__SAID_UTIL,
			  "NVML cannot read the GPU's utilisation (%s); other programs' use of it is not checked%s",
			  gpo__nv.util ? gpo__err(rc) : "not provided", "");
	}
	if (gpo__nv.mem && (rc = gpo__nv.mem(gpo__nv.dev, &m)) == 0 && m.total) {
		r->have_mem = 1;
		r->free = m.free;
		r->total = m.total;
	} else if (!msg[0]) {
		gpo__tell(msg, msglen, GPO__SAID_MEM,
			  "NVML cannot read the GPU's free memory (%s); it is checked once the GPU is started%s",
			  gpo__nv.mem ? gpo__err(rc) : "not provided", "");
	}
	return 0;
}
