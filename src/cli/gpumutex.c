/*
 * gpumutex.c - the `gpumutex` command: status, run, init.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lease.h"
#include "run.h"

#define VERSION "0.1.0"

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
		fprintf(stderr, "gpumutex: %s needs a value\n", name);
		exit(2);
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
		"  init [--lock-dir DIR] --visible-devices LIST\n"
		"                              make the lock directory and device files\n"
		"                              now (as root: files nobody else can remove)\n"
		"  help, --help                this help\n"
		"  --version                   print the version\n"
		"\n"
		"Variables: GPUMUTEX_VISIBLE_DEVICES (required to manage GPUs),\n"
		"GPUMUTEX_NUM_DEVICES (default 1), GPUMUTEX_LOCK_DIR (default %s),\n"
		"GPUMUTEX_TIMEOUT (default: wait forever), GPUMUTEX_QUIET (default 0),\n"
		"GPUMUTEX_JOB (default: fresh per job), GPUMUTEX_RECHECK_MS (default 10000).\n",
		GM_DEFAULT_LOCK_DIR);
}

int gm_init_main(int argc, char **argv)
{
	struct gm_config cfg;
	char err[GM_ERR_MAX];
	const char *dir = getenv("GPUMUTEX_LOCK_DIR");
	const char *devs = getenv("GPUMUTEX_VISIBLE_DEVICES");
	int rc;

	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = gm_cli_opt(argc, argv, &i, "--lock-dir")) != NULL)
			dir = v;
		else if ((v = gm_cli_opt(argc, argv, &i, "--visible-devices")) != NULL)
			devs = v;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: gpumutex init [--lock-dir DIR] [--visible-devices LIST]\n"
			       "Create the lock directory (mode 1777) and the device files of\n"
			       "LIST (default $GPUMUTEX_VISIBLE_DEVICES) now. Run as root, it\n"
			       "makes them root's (taking over an existing lock directory, also\n"
			       "while in use): the directory and dev/ mode 0755, queue/ and job/\n"
			       "1777. No other user can then remove, replace or add a device\n"
			       "file; GPUs not in LIST are refused.\n");
			return 0;
		} else {
			fprintf(stderr, "gpumutex init: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	memset(&cfg, 0, sizeof cfg);
	if (!devs) {
		fprintf(stderr, "gpumutex init: give --visible-devices LIST (or set GPUMUTEX_VISIBLE_DEVICES)\n");
		return 2;
	}
	if (gm_parse_devices("--visible-devices", devs, cfg.devices, &cfg.ndevices,
			     err, sizeof err)) {
		fprintf(stderr, "gpumutex init: %s\n", err);
		return 2;
	}
	if (!dir || !*dir)
		dir = GM_DEFAULT_LOCK_DIR;
	if (dir[0] != '/' || strlen(dir) >= sizeof cfg.lock_dir - 64) {
		fprintf(stderr, "gpumutex init: the lock directory must be an absolute path, not '%s'\n", dir);
		return 2;
	}
	strcpy(cfg.lock_dir, dir);
	cfg.want = 1;
	rc = gm_lockdir_prepare(&cfg, err, sizeof err);
	if (rc) {
		fprintf(stderr, "gpumutex init: %s\n", err);
		return 1;
	}
	printf("gpumutex: lock directory %s ready for GPUs %s\n", dir, devs);
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (!cmd || !strcmp(cmd, "help") || !strcmp(cmd, "--help") ||
	    !strcmp(cmd, "-h")) {
		usage(cmd ? stdout : stderr);
		return cmd ? 0 : 2;
	}
	if (!strcmp(cmd, "--version")) {
		printf("gpumutex %s\n", VERSION);
		return 0;
	}
	if (!strcmp(cmd, "status"))
		return gm_status_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "init"))
		return gm_init_main(argc - 1, argv + 1);
	if (!strcmp(cmd, "run"))
		return gm_run_main(argc - 1, argv + 1);
	fprintf(stderr, "gpumutex: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
