/*
 * nvml.h - live utilisation and memory through NVML, loaded at run time
 * with dlopen("libnvidia-ml.so.1") (never linked: the library ships with
 * the driver, not everywhere gpumutex runs). Only the CLI uses it; the
 * preload library never loads it.
 */
#ifndef GPUMUTEX_CLI_NVML_H
#define GPUMUTEX_CLI_NVML_H

#include <stdint.h>
#include <stdio.h>

#define GM_NVML_PROCS 64

struct gm_nvml_dev {
	int index;
	int have_util, have_mem, have_procs;
	unsigned util, memutil;          /* percent */
	uint64_t used, total;            /* bytes */
	char name[96];
	int nprocs;
	struct { int pid; uint64_t used; int used_known; } procs[GM_NVML_PROCS];
	char note[160];                  /* what could not be read, "" if all */
};

struct gm_nvml {
	int available;                   /* NVML loaded and initialised */
	char note[256];                  /* why not, or what failed; "" if none */
	int ndev;
	struct gm_nvml_dev dev[64];
};

/*
 * Read every device NVML sees, in a child process (a broken NVML that
 * crashes or hangs costs the child, not the caller; a child still busy
 * after 5 seconds is killed). Always fills *n: n->available says whether
 * anything was read, n->note (and each device's note) what was not.
 */
void gm_nvml_read(struct gm_nvml *n);

struct gm_state;
struct gm_state_lease;
/*
 * Whether lease l's processes hold a CUDA context, by NVML's lists of
 * compute processes: 1 when a member or a descendant of one is listed on
 * any GPU NVML sees; else, by the lists of l's GPUs: 0 when every one of those lists was read and
 * is empty (the GPUs are the lease's alone, so any process computing on
 * them may be the lease's even when not found to be); -1 (unknown)
 * otherwise: NVML absent or failing, a list unreadable, a listed process
 * not found to be the lease's, no member visible here, or members in
 * another PID namespace. Reads /proc (parents).
 */
int gm_nvml_lease_context(const struct gm_nvml *n, const struct gm_state_lease *l);
/* `gpumutex status` additions: a section after the table, and the
 * "nvml" member of the JSON document (docs/status-json.md). */
void gm_status_nvml_text(FILE *f, const struct gm_state *st, const struct gm_nvml *n);
void gm_status_nvml_json(FILE *f, const struct gm_state *st, const struct gm_nvml *n);

#endif
