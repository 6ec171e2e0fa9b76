/*
 * olease.c - gpu-offload's gpumutex lease (olease.h).
 */
#define _GNU_SOURCE
#include "compat.h" /* dlsym at its oldest version */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"
#include "olease.h"

#define GPO__BACKOFF_MAX_NS (30 * INT64_C(1000000000))

static struct {
	int configured;        /* 0 not read, 1 managed, 2 unmanaged, 3 broken */
	struct gm_config cfg;
	struct gm_conf_info info;
	struct gm_lease lease;
	int held;
	int64_t next_try;      /* CLOCK_MONOTONIC ns */
	int64_t backoff, backoff0;
	char devs[GM_MAX_DEVICES * 4];
} gpo__ol;

/*
 * An inherited CUDA_VISIBLE_DEVICES narrows the candidates, as it does for
 * libgpumutex (docs/design.md, "Jobs and joining"): "" or "-1" hides every
 * GPU, so none is used; a list of indices keeps those of the managed
 * ones. Anything else (UUIDs, a list that leaves too few) is refused:
 * the GPU stays off rather than used against the user's wish. 0 or -1.
 */
static int gpo__narrow(char *err, size_t errlen)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	int list[GM_MAX_DEVICES], n = 0, keep = 0;
	struct gm_config *c = &gpo__ol.cfg;

	if (!cvd)
		return 0;
	if (!*cvd || strcmp(cvd, "-1") == 0) {
		snprintf(err, errlen, "CUDA_VISIBLE_DEVICES=\"%s\" hides every GPU",
			 cvd);
		return -1;
	}
	if (gm_parse_devices("CUDA_VISIBLE_DEVICES", cvd, list, &n, err,
			     errlen) != 0)
		return -1;
	for (int i = 0; i < c->ndevices; i++)
		for (int j = 0; j < n; j++)
			if (c->devices[i] == list[j])
				c->devices[keep++] = c->devices[i];
	if (keep < c->want) {
		snprintf(err, errlen, "CUDA_VISIBLE_DEVICES=\"%s\" leaves %d of the GPUs gpumutex manages here, fewer than the %d needed",
			 cvd, keep, c->want);
		return -1;
	}
	c->ndevices = keep;
	return 0;
}

static int gpo__configure(char *err, size_t errlen)
{
	const char *v = getenv("GPU_OFFLOAD_RETRY_MS");
	uint64_t ms = 1000;
	int rc;

	/* As libgpumutex resolves it (the machine-wide file, GPUMUTEX_CONFIG,
	 * the environment): the offloader must be under the same queue as
	 * the CUDA programs of the machine. */
	gm_uuid_dlsym(dlsym); /* GPUs named by UUID: src/lease/uuid.c */
	rc = gm_config_resolve(&gpo__ol.cfg, &gpo__ol.info, 0, err, errlen);
	if (rc == 1) {
		gpo__ol.configured = 2;
		return GPO_OL_HELD;
	}
	if (rc < 0) {
		gpo__ol.configured = 3;
		return GPO_OL_BROKEN;
	}
	if (v && *v && gm_parse_uint(v, 10, 3600000, &ms) != 0)
		ms = 1000;
	rc = gpo__narrow(err, errlen);
	if (rc) {
		gpo__ol.configured = 3;
		return GPO_OL_BROKEN;
	}
	gpo__ol.backoff0 = gpo__ol.backoff = (int64_t)ms * 1000000;
	/* The offloader never waits in the queue (issue: it must not hold a
	 * place in line from inside a BLAS call). */
	gpo__ol.cfg.timeout_s = 0;
	if (!gpo__ol.cfg.job[0]) {
		/* Before anything can start a child or call cuInit: they
		 * join this job's lease instead of queueing behind it. */
		gm_job_generate(gpo__ol.cfg.job);
		setenv("GPUMUTEX_JOB", gpo__ol.cfg.job, 1);
	}
	gpo__ol.configured = 1;
	return GPO_OL_HELD;
}

int gpo_olease_take(int64_t now_ns, char *err, size_t errlen)
{
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!gpo__ol.configured) {
		rc = gpo__configure(err, errlen);
		if (rc)
			return rc;
	}
	if (gpo__ol.configured == 2 || gpo__ol.held)
		return GPO_OL_HELD;
	if (gpo__ol.configured == 3)
		return GPO_OL_BROKEN;
	if (now_ns < gpo__ol.next_try)
		return GPO_OL_BACKOFF;
	rc = gm_lease_acquire(&gpo__ol.cfg, NULL, &gpo__ol.lease, err, errlen);
	if (rc == -ETIMEDOUT || rc == -GM_EJOIN) {
		/* EJOIN: our job's live lease (another of its processes
		 * holds it) does not fit: the same as busy for us. */
		gpo__ol.next_try = now_ns + gpo__ol.backoff;
		gpo__ol.backoff *= 2;
		if (gpo__ol.backoff > GPO__BACKOFF_MAX_NS)
			gpo__ol.backoff = GPO__BACKOFF_MAX_NS;
		return GPO_OL_REFUSED;
	}
	if (rc) {
		gpo__ol.configured = 3;
		return GPO_OL_BROKEN;
	}
	gpo__ol.held = 1;
	gpo__ol.backoff = gpo__ol.backoff0;
	{
		int use[GM_MAX_DEVICES], n = 0;
		for (int i = 0; i < gpo__ol.lease.ndevices; i++)
			if (gpo__ol.lease.usable &
			    (UINT64_C(1) << gpo__ol.lease.devices[i]))
				use[n++] = gpo__ol.lease.devices[i];
		gm_format_list(gpo__ol.devs, sizeof gpo__ol.devs, use, n);
		/* The driver reads these once, at cuInit: a later lease must
		 * be of all the same GPUs (below), so that every index the
		 * driver shows stays ours (a joiner of a bigger lease wanted
		 * fewer: a later lease of that many could miss index 0). */
		setenv("CUDA_VISIBLE_DEVICES", gpo__ol.devs, 1);
		setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
		memcpy(gpo__ol.cfg.devices, use, sizeof(int) * (size_t)n);
		gpo__ol.cfg.ndevices = n;
		gpo__ol.cfg.want = n;
	}
	return GPO_OL_HELD;
}

int gpo_olease_managed(void)
{
	return gpo__ol.configured == 1;
}

int gpo_olease_held(void)
{
	return gpo__ol.held;
}

const char *gpo_olease_devices(void)
{
	return gpo__ol.held ? gpo__ol.devs : "";
}

int gpo_olease_contended(void)
{
	char err[GM_ERR_MAX];

	if (!gpo__ol.held || gpo__ol.configured != 1)
		return 0;
	return gm_lease_contended(gpo__ol.cfg.lock_dir, &gpo__ol.lease,
				  gpo__ol.cfg.job, err, sizeof err);
}

void gpo_olease_release(int64_t now_ns)
{
	if (!gpo__ol.held || gpo__ol.configured != 1)
		return;
	gm_lease_release(&gpo__ol.lease);
	gpo__ol.held = 0;
	gpo__ol.next_try = now_ns + gpo__ol.backoff;
}

void gpo_olease_forget(void)
{
	if (gpo__ol.held && gpo__ol.configured == 1)
		gm_lease_release(&gpo__ol.lease);
	gpo__ol.held = 0;
}

static int gpo__find_gm(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	const char *base = slash ? slash + 1 : info->dlpi_name;

	(void)size;
	if (base && strncmp(base, "libgpumutex.so", 14) == 0) {
		*(int *)arg = 1;
		return 1;
	}
	return 0;
}

int gpo_olease_pinned(void)
{
	int found = 0;

	if (gpo__ol.configured != 1)
		return 0;
	/* Joined: another process of our job holds the lease too, so it
	 * would outlive our giving it back. */
	if (gpo__ol.held && gpo__ol.lease.joined)
		return 1;
	dl_iterate_phdr(gpo__find_gm, &found);
	return found;
}
