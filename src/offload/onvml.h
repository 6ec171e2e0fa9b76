/*
 * onvml.h - the GPU as NVML sees it, for the policy's sharing rules
 * (docs/offload.md, "Sharing the GPU"): its utilisation (which includes
 * other programs' work, and ours) and its free memory.
 *
 * NVML (libnvidia-ml.so.1, which comes with the driver) is dlopen()ed at
 * the first reading, never at load time and never linked; its few
 * functions are declared in onvml.c (a stable C ABI). Not thread-safe by
 * itself: the policy calls it under its lock (pstate.h).
 */
#ifndef GPUOFFLOAD_ONVML_H
#define GPUOFFLOAD_ONVML_H

#include <stddef.h>
#include <stdint.h>

struct gpo_nvml_reading {
	int have_util;         /* util is known */
	unsigned util;         /* percent of the last sample period in which
	                        * a kernel ran on the GPU (any process's) */
	int have_mem;          /* free and total are known */
	uint64_t free, total;  /* bytes */
};

/*
 * Read the GPU this process computes on: the first of CUDA_VISIBLE_DEVICES
 * (as set by the lease, or inherited), or CUDA device 0. An index is
 * mapped to NVML by PCI bus id when CUDA_DEVICE_ORDER=PCI_BUS_ID (or when
 * NVML sees a single GPU), a GPU- UUID by NVML's own lookup; when the
 * mapping cannot be established nothing is read rather than another GPU.
 * Returns 0 with *r filled (a figure NVML could not give is marked
 * unknown), or -1: NVML absent or failing, or the GPU not established;
 * then `msg` holds one line saying so, once per kind of problem (empty
 * when it was said before).
 */
int gpo_nvml_read(struct gpo_nvml_reading *r, char *msg, size_t msglen);

#endif
