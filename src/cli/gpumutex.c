/*
 * gpumutex.c - the `gpumutex` command: status, run, init, install,
 * uninstall, doctor, log, report, sample.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lease.h"
#include "metrics.h"
#include "run.h"

#define VERSION "0.1.0"

/* "gpumutex log" while `gpumutex log` runs: the start of its messages. */
static char prog_name[64] = "gpumutex";
const char *gm_cli_prog = prog_name;

int gm_cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", gm_cli_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", gm_cli_prog);
	return 2;
}

const char *gm_cli_opt(int argc, char **argv, int *i, const char *name)
{
	size_t n = strlen(name);
	const char *a = argv[*i];

	if (strncmp(a, name, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		exit(gm_cli_usage_error("%s needs a value", name));
	}
	return argv[++*i];
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gpumutex COMMAND [ARGS...]\n"
		"\n"
		"Commands:\n"
		"  status [--json] [--watch]   who holds which GPU, and who waits\n"
		"  run [OPTIONS] -- CMD...     run CMD with gpumutex (same as gpumutex-run;\n"
		"                              `gpumutex run --help` lists its options)\n"
		"  log [--since WHEN] [--job J] [--user U] [--follow] [--json]\n"
		"                              the event log: waits, grants, lease ends\n"
		"  report [--since 24h] [--json] [--svg FILE] [--html FILE]\n"
		"                              what the GPUs did: leased, idle, waits, users\n"
		"  sample [--interval S]       record GPU utilisation (NVML) in the log\n"
		"  metrics [--listen [HOST:]PORT | --textfile DIR]\n"
		"                              Prometheus metrics of the GPUs and the queue\n"
		"  init [--lock-dir DIR] --visible-devices LIST\n"
		"                              make the lock directory and device files\n"
		"                              now (as root: files nobody else can remove)\n"
		"  install --system [OPTIONS] make gpumutex binding machine-wide (root):\n"
		"                              /etc/ld.so.preload and /etc/gpumutex.conf\n"
		"  uninstall --system          undo install (the configuration stays)\n"
		"  doctor [--json]             would a CUDA program of this shell queue?\n"
		"  help, --help                this help\n"
		"  --version                   print the version\n"
		"\n"
		"Variables: GPUMUTEX_VISIBLE_DEVICES (required to manage GPUs),\n"
		"GPUMUTEX_NUM_DEVICES (default 1), GPUMUTEX_LOCK_DIR (default %s),\n"
		"GPUMUTEX_TIMEOUT (default: wait forever), GPUMUTEX_QUIET (1 or 0, default 0),\n"
		"GPUMUTEX_JOB (default: fresh per job), GPUMUTEX_RECHECK_MS (default 10000),\n"
		"GPUMUTEX_CONFIG (a configuration file instead of /etc/gpumutex.conf,\n"
		"unless that one says enforce = yes).\n",
		GM_DEFAULT_LOCK_DIR);
}

const char *gm_cli_lock_dir(const char *prog, const char *dir,
			    const char *name)
{
	char err[GM_ERR_MAX];

	/* An empty variable is unset; an empty flag is refused below. */
	if (!dir || (!*dir && strcmp(name, "GPUMUTEX_LOCK_DIR") == 0))
		return GM_DEFAULT_LOCK_DIR;
	if (gm_check_lock_dir(name, dir, err, sizeof err)) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return NULL;
	}
	return dir;
}

int gm_init_main(int argc, char **argv)
{
	struct gm_config cfg;
	char err[GM_ERR_MAX];
	const char *dir = getenv("GPUMUTEX_LOCK_DIR");
	const char *dir_name = "GPUMUTEX_LOCK_DIR";
	const char *devs = getenv("GPUMUTEX_VISIBLE_DEVICES");
	const char *devs_name = "GPUMUTEX_VISIBLE_DEVICES";
	int rc;

	if (devs && !*devs)
		devs = NULL; /* an empty variable is unset, as for the library */

	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = gm_cli_opt(argc, argv, &i, "--lock-dir")) != NULL) {
			dir = v;
			dir_name = "--lock-dir";
		} else if ((v = gm_cli_opt(argc, argv, &i, "--visible-devices")) != NULL) {
			devs = v;
			devs_name = "--visible-devices";
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: gpumutex init [--lock-dir DIR] --visible-devices LIST\n"
			       "\n"
			       "Create the lock directory (mode 1777) and the device files of\n"
			       "LIST now, and declare LIST its pool: `gpumutex status` lists\n"
			       "these GPUs even while no job names them (a later init replaces\n"
			       "the pool). Run as root, it makes them root's (taking over an\n"
			       "existing lock directory, also while in use): the directory and\n"
			       "dev/ mode 0755, queue/ and job/ 1777. No other user can then\n"
			       "remove, replace or add a device file; GPUs not in LIST are\n"
			       "refused.\n"
			       "\n"
			       "  --visible-devices LIST  GPU indices such as 0,1,2,3, or GPU-\n"
			       "                          UUIDs (by NVML) (required;\n"
			       "                          $GPUMUTEX_VISIBLE_DEVICES serves if set)\n"
			       "  --lock-dir DIR          an absolute path (default:\n"
			       "                          $GPUMUTEX_LOCK_DIR, else %s)\n"
			       "  -h, --help              this help\n"
			       "Flags also take the form --flag=VALUE.\n",
			       GM_DEFAULT_LOCK_DIR);
			return 0;
		} else {
			return gm_cli_usage_error("unknown argument '%s'", argv[i]);
		}
	}
	memset(&cfg, 0, sizeof cfg);
	if (!devs) {
		fprintf(stderr, "gpumutex init: no GPUs given: pass --visible-devices LIST such as \"0,1\" (or set GPUMUTEX_VISIBLE_DEVICES to it)\n");
		return 2;
	}
	if (gm_parse_visible(devs_name, devs, cfg.devices, &cfg.ndevices,
			     err, sizeof err)) {
		fprintf(stderr, "gpumutex init: %s\n", err);
		return 2;
	}
	dir = gm_cli_lock_dir("gpumutex init", dir, dir_name);
	if (!dir)
		return 2;
	strcpy(cfg.lock_dir, dir);
	cfg.want = 1;
	rc = gm_lockdir_prepare(&cfg, err, sizeof err);
	if (rc == 0)
		rc = gm_lockdir_secure(&cfg, err, sizeof err);
	if (rc == 0)
		rc = gm_lockdir_declare(&cfg, err, sizeof err);
	if (rc) {
		fprintf(stderr, "gpumutex init: %s\n", err);
		return 1;
	}
	printf("gpumutex init: lock directory %s ready for GPUs %s\n", dir, devs);
	return 0;
}

/* The subcommands: one line each (each lives in its own file). */
static const struct {
	const char *name;
	int (*main)(int argc, char **argv);
} commands[] = {
	{ "status", gm_status_main },
	{ "init", gm_init_main },
	{ "run", gm_run_main },
	{ "install", gm_install_main },
	{ "uninstall", gm_uninstall_main },
	{ "doctor", gm_doctor_main },
	{ "log", gm_log_main },
	{ "report", gm_report_main },
	{ "sample", gm_sample_main },
	{ "metrics", gm_metrics_main },
};

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	gm_uuid_dlsym(dlsym); /* GPUs named by UUID (src/lease/uuid.c) */

	if (!cmd || !strcmp(cmd, "help") || !strcmp(cmd, "--help") ||
	    !strcmp(cmd, "-h")) {
		usage(cmd ? stdout : stderr);
		return cmd ? 0 : 2;
	}
	if (!strcmp(cmd, "--version")) {
		printf("gpumutex %s\n", VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(cmd, commands[i].name)) {
			snprintf(prog_name, sizeof prog_name, "gpumutex %s", cmd);
			return commands[i].main(argc - 1, argv + 1);
		}
	fprintf(stderr, "gpumutex: unknown command '%s'\nTry 'gpumutex help'.\n", cmd);
	return 2;
}
