/*
 * join.c - who may join a job's lease.
 *
 * A job is one lease: every process of the job shares the devices its
 * first process was granted, and the lease can neither grow nor move
 * while it lives. A process whose own settings (its candidate devices,
 * how many it needs) do not fit the lease of its job must not be handed
 * that lease silently: gm_join_check says whether it fits, and which of
 * the lease's devices the process may use (docs/design.md, "Jobs and
 * joining").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static void list(char *buf, size_t len, const int *v, int n)
{
	size_t off = 0;

	buf[0] = '\0';
	for (int i = 0; i < n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%d",
					i ? "," : "", v[i]);
}

int gm_join_check(const struct gm_config *cfg, const int *devices,
		  int ndevices, uint64_t *usable, char *err, size_t errlen)
{
	char held[GM_MAX_DEVICES * 4], mine[GM_MAX_DEVICES * 4];
	uint64_t cand = 0, use = 0;
	int n = 0;

	for (int i = 0; i < cfg->ndevices; i++)
		if (cfg->devices[i] >= 0 && cfg->devices[i] < GM_MAX_DEVICES)
			cand |= UINT64_C(1) << cfg->devices[i];
	for (int i = 0; i < ndevices; i++)
		if (devices[i] >= 0 && devices[i] < GM_MAX_DEVICES &&
		    (cand & (UINT64_C(1) << devices[i]))) {
			use |= UINT64_C(1) << devices[i];
			n++;
		}
	if (usable)
		*usable = use;
	if (n >= cfg->want && n > 0)
		return 0;
	list(held, sizeof held, devices, ndevices);
	list(mine, sizeof mine, cfg->devices, cfg->ndevices);
	if (n == 0)
		return gm__fail(-GM_EJOIN, err, errlen,
				"the lease of job %s holds GPU%s %s, %s among this process's GPUs (%s)",
				cfg->job, ndevices == 1 ? "" : "s", held,
				ndevices == 1 ? "which is not" : "none of which is",
				mine);
	if (n == ndevices)
		return gm__fail(-GM_EJOIN, err, errlen,
				"the lease of job %s holds %d GPU%s (%s), fewer than the %d this process needs, and a job's lease cannot grow",
				cfg->job, ndevices, ndevices == 1 ? "" : "s", held,
				cfg->want);
	return gm__fail(-GM_EJOIN, err, errlen,
			"only %d of the GPUs the lease of job %s holds (%s) %s among this process's GPUs (%s), fewer than the %d it needs, and a job's lease cannot grow or move",
			n, cfg->job, held, n == 1 ? "is" : "are", mine, cfg->want);
}
