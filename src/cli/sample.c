/*
 * sample.c - `gpumutex sample`: record each GPU's utilisation and memory
 * (NVML) in the event log every few seconds, so that `gpumutex report`
 * can tell leases that held a GPU without using it. Run it from a
 * service, cron or a terminal; it takes no lock and delays no one.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "lease.h"
#include "nvml.h"

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

int gm_sample_main(int argc, char **argv)
{
	const char *dir = getenv("GPUMUTEX_LOCK_DIR"), *dname = "GPUMUTEX_LOCK_DIR";
	double interval = 10;
	uint64_t count = 0;
	char err[GM_ERR_MAX];

	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = gm_cli_opt(argc, argv, &i, "--lock-dir")) != NULL)
			dir = v, dname = "--lock-dir";
		else if ((v = gm_cli_opt(argc, argv, &i, "--interval")) != NULL) {
			if (gm_parse_timeout("--interval", v, &interval, err, sizeof err) ||
			    interval <= 0 || interval > 86400) {
				fprintf(stderr, "gpumutex sample: --interval %s: expected seconds above 0 and at most 86400\n", v);
				return 2;
			}
		} else if ((v = gm_cli_opt(argc, argv, &i, "--count")) != NULL) {
			if (gm_parse_uint(v, 10, UINT32_MAX, &count) || count == 0) {
				fprintf(stderr, "gpumutex sample: --count %s: expected a number above 0\n", v);
				return 2;
			}
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: gpumutex sample [--interval S] [--count N] [--lock-dir DIR]\n"
			       "\n"
			       "Every S seconds (default 10), record each GPU's utilisation and\n"
			       "memory as NVML reports it in the event log (`util` records), for\n"
			       "`gpumutex report`'s idle-lease numbers. Runs until interrupted, or\n"
			       "N rounds. Needs NVML (libnvidia-ml.so.1, from the driver).\n");
			return 0;
		} else {
			return gm_cli_usage_error("unknown argument '%s'", argv[i]);
		}
	}
	dir = gm_cli_lock_dir("gpumutex sample", dir, dname);
	if (!dir)
		return 2;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	for (uint64_t round = 0; !stop && (!count || round < count); round++) {
		struct gm_nvml *n = calloc(1, sizeof *n);
		if (!n)
			return 1;
		gm_nvml_read(n);
		if (!n->available) {
			fprintf(stderr, "gpumutex sample: %s\n", n->note);
			free(n);
			return 1;
		}
		for (int i = 0; i < n->ndev; i++) {
			const struct gm_nvml_dev *d = &n->dev[i];
			char f[160];
			if (!d->have_util)
				continue;
			snprintf(f, sizeof f, "dev=%d gpu=%u memutil=%u used=%" PRIu64 " total=%" PRIu64 " cmd=",
				 d->index, d->util, d->memutil, d->used, d->total);
			if (gm_event_append(dir, "util", f, err, sizeof err)) {
				fprintf(stderr, "gpumutex sample: %s\n", err);
				free(n);
				return 1;
			}
		}
		free(n);
		if (!stop && (!count || round + 1 < count)) {
			struct timespec ts = { (time_t)interval,
				(long)((interval - (double)(time_t)interval) * 1e9) };
			nanosleep(&ts, NULL);
		}
	}
	return 0;
}
