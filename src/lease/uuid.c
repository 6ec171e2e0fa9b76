/*
 * uuid.c - GPUs named by UUID ("GPU-5f0b1c2e-..." as `nvidia-smi -L` and
 * Kubernetes device plugins give them) in GPUMUTEX_VISIBLE_DEVICES,
 * visible_devices and CUDA_VISIBLE_DEVICES, mapped to the indices the lock
 * directory uses through NVML.
 *
 * The indices are NVML's, i.e. PCI bus order, which is the order every
 * process under gpumutex runs in (CUDA_DEVICE_ORDER=PCI_BUS_ID). NVML is
 * dlopen'ed only when a UUID is met: a list of indices costs nothing. The
 * library's symbol lookup goes through the program's dlsym (gm_uuid_dlsym):
 * the preload library exports a dlsym of its own, so only it knows which
 * one is real.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h" /* gm__fail */
#include "lease.h"

/* dlopen at its oldest version, as src/preload/compat.h explains: this
 * file is part of the preload library, which must load on glibc 2.17. */
#if defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlerror,dlerror@GLIBC_2.17");
#endif

static gm_dlsym_fn uuid_dlsym;

void gm_uuid_dlsym(gm_dlsym_fn fn)
{
	uuid_dlsym = fn;
}

typedef int (*nv_void)(void);
typedef int (*nv_count)(unsigned *);
typedef int (*nv_handle)(unsigned, void **);
typedef int (*nv_uuid)(void *, char *, unsigned);

/* NVML's devices: the index whose UUID is `len` bytes at `u`, or starts
 * with them (a prefix naming one GPU, as CUDA accepts). 0, or -errno with
 * a reason in why. */
static int nvml_lookup(const char *u, size_t len, int *index, char *why,
		       size_t whylen)
{
	void *h;
	nv_void init, shut;
	nv_count count;
	nv_handle handle;
	nv_uuid uuid;
	unsigned n = 0;
	int found = -1, many = 0;

	if (!uuid_dlsym)
		return gm__fail(-ENOSYS, why, whylen, "this program cannot load NVML");
	h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		return gm__fail(-ENOSYS, why, whylen,
				"NVML (libnvidia-ml.so.1, part of the NVIDIA driver) cannot be loaded: %s",
				e ? e : "not found");
	}
	/* The handle stays open: NVML keeps its own reference count, and a
	 * program that uses NVML itself may have it open already. */
	init = (nv_void)uuid_dlsym(h, "nvmlInit_v2");
	shut = (nv_void)uuid_dlsym(h, "nvmlShutdown");
	count = (nv_count)uuid_dlsym(h, "nvmlDeviceGetCount_v2");
	handle = (nv_handle)uuid_dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	uuid = (nv_uuid)uuid_dlsym(h, "nvmlDeviceGetUUID");
	if (!init || !shut || !count || !handle || !uuid)
		return gm__fail(-ENOSYS, why, whylen, "NVML lacks the functions that map a UUID to an index");
	if (init() != 0)
		return gm__fail(-EIO, why, whylen, "NVML failed to initialise");
	if (count(&n) != 0)
		n = 0;
	for (unsigned i = 0; i < n && i < GM_MAX_DEVICES; i++) {
		void *d = NULL;
		char buf[96];
		if (handle(i, &d) != 0 || uuid(d, buf, sizeof buf) != 0)
			continue;
		buf[sizeof buf - 1] = '\0';
		if (strlen(buf) == len && memcmp(buf, u, len) == 0) {
			found = (int)i, many = 0;
			break;
		}
		if (strncmp(buf, u, len) == 0) {
			many += found >= 0;
			found = (int)i;
		}
	}
	shut();
	if (found < 0)
		return gm__fail(-ENOENT, why, whylen, "no GPU NVML sees has that UUID (`nvidia-smi -L` lists them)");
	if (many)
		return gm__fail(-EEXIST, why, whylen, "more than one GPU's UUID starts so; give more of it");
	*index = found;
	return 0;
}

int gm_uuid_index(const char *name, const char *text, const char *p,
		  size_t len, int *index, char *err, size_t errlen)
{
	char why[256];
	int rc;

	if (len >= 4 && memcmp(p, "MIG-", 4) == 0)
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" names a MIG instance (%.*s); gpumutex leases whole GPUs, so name the GPU (its index or GPU- UUID) instead",
				name, text, (int)(len > 60 ? 60 : len), p);
	rc = nvml_lookup(p, len, index, why, sizeof why);
	if (rc)
		return gm__fail(-EINVAL, err, errlen,
				"%s=\"%s\" names a GPU by UUID (%.*s), which gpumutex maps to an index through NVML: %s; or use GPU indices",
				name, text, (int)(len > 60 ? 60 : len), p, why);
	return 0;
}

int gm_is_uuid(const char *p, size_t len)
{
	return len > 4 && (memcmp(p, "GPU-", 4) == 0 || memcmp(p, "MIG-", 4) == 0);
}

int gm_parse_visible(const char *name, const char *text, int *out, int *n,
		     char *err, size_t errlen)
{
	char idx[GM_MAX_DEVICES * 4 + 8];
	size_t off = 0;
	const char *p = text;

	if (!text || (!strstr(text, "GPU-") && !strstr(text, "MIG-")))
		return gm_parse_devices(name, text, out, n, err, errlen);
	for (;;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		int v, w;

		if (gm_is_uuid(p, len)) {
			if (gm_uuid_index(name, text, p, len, &v, err, errlen))
				return -EINVAL;
			w = snprintf(idx + off, sizeof idx - off, "%d", v);
		} else {
			w = snprintf(idx + off, sizeof idx - off, "%.*s", (int)len, p);
		}
		if (w < 0 || (size_t)w >= sizeof idx - off - 1)
			return gm__fail(-EINVAL, err, errlen,
					"%s names more GPUs than gpumutex manages (%d at most)",
					name, GM_MAX_DEVICES);
		off += (size_t)w;
		if (!e)
			break;
		idx[off++] = ',';
		p = e + 1;
	}
	idx[off] = '\0';
	if (gm_parse_devices(name, idx, out, n, err, errlen) == 0)
		return 0;
	/* The indices' own complaint, then what the UUIDs were taken for. */
	off = err ? strlen(err) : 0;
	if (err && off + 1 < errlen)
		snprintf(err + off, errlen - off, " (from \"%s\", its UUIDs mapped by NVML)", text);
	return -EINVAL;
}
