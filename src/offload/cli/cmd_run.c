/*
 * cmd_run.c - `gpu-offload run`: preload libgpuoffload.so into one
 * command (and the programs it starts), with the policy's settings.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lease.h"

static int gpo__preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	char *v;
	size_t n;
	int rc;

	if (!old || !*old)
		return setenv("LD_PRELOAD", lib, 1);
	n = strlen(lib) + strlen(old) + 2;
	v = malloc(n);
	if (!v)
		return -1;
	snprintf(v, n, "%s:%s", lib, old);
	rc = setenv("LD_PRELOAD", v, 1);
	free(v);
	return rc;
}

int gpo_cmd_run(int argc, char **argv)
{
	char lib[PATH_MAX], dir[PATH_MAX];
	const char *be;
	int i;

	for (i = 1; i < argc; i++) {
		const char *v;
		if (gpo_cli_is_help(argv[i])) {
			gpo_cli_usage("run", stdout);
			return 0;
		}
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if ((v = gpo_cli_opt(argc, argv, &i, "--level"))) {
			uint64_t l;
			if (gm_parse_uint(v, 10, 10, &l) != 0 || l < 1) {
				fprintf(stderr, GPO_PROG ": --level takes 1 to 10, not %s\n", v);
				return 2;
			}
			setenv("GPU_OFFLOAD_LEVEL", v, 1);
		} else if ((v = gpo_cli_opt(argc, argv, &i, "--trace"))) {
			if (gpo_cli_abs(v, dir, sizeof dir) != 0) {
				fprintf(stderr, GPO_PROG ": --trace %s: path too long\n", v);
				return 2;
			}
			setenv("GPU_OFFLOAD_TRACE", dir, 1);
		} else if ((v = gpo_cli_opt(argc, argv, &i, "--backend"))) {
			if (gpo_cli_abs(v, dir, sizeof dir) != 0)
				return 2;
			setenv("GPU_OFFLOAD_BACKEND", dir, 1);
		} else if ((v = gpo_cli_opt(argc, argv, &i, "--profile"))) {
			if (gpo_cli_abs(v, dir, sizeof dir) != 0)
				return 2;
			if (access(dir, R_OK) != 0) {
				fprintf(stderr, GPO_PROG ": --profile %s: %s\n", v,
					strerror(errno));
				return 2;
			}
			setenv("GPU_OFFLOAD_PROFILE", dir, 1);
		} else if (strcmp(argv[i], "--verify") == 0) {
			setenv("GPU_OFFLOAD_VERIFY", "1", 1);
		} else if (strcmp(argv[i], "--measure") == 0) {
			/* Measure only: everything on the CPU, every call
			 * traced (into --trace DIR, else ./gpu-offload-trace). */
			setenv("GPU_OFFLOAD_FORCE", "cpu", 1);
			if (!getenv("GPU_OFFLOAD_TRACE")) {
				if (gpo_cli_abs("gpu-offload-trace", dir, sizeof dir) != 0)
					return 2;
				setenv("GPU_OFFLOAD_TRACE", dir, 1);
			}
		} else if (strcmp(argv[i], "--summary") == 0) {
			setenv("GPU_OFFLOAD_SUMMARY", "1", 1);
		} else if (argv[i][0] == '-') {
			return gpo_cli_unknown("run", argv[i]);
		} else {
			break;
		}
	}
	if (i >= argc) {
		fprintf(stderr, GPO_PROG ": run: no command given\n");
		gpo_cli_usage("run", stderr);
		return 2;
	}
	/* What would fail inside the program, where a warning is easily
	 * missed, fails here, naming the path, before the program starts. */
	be = getenv("GPU_OFFLOAD_BACKEND");
	if (be && *be && gpo_cli_backend_ok("--backend", be) != 0)
		return 2;
	if (getenv("GPU_OFFLOAD_TRACE") && *getenv("GPU_OFFLOAD_TRACE") &&
	    gpo_cli_trace_ok(getenv("GPU_OFFLOAD_TRACE")) != 0)
		return 2;
	if (gpo_cli_beside("GPU_OFFLOAD_LIBRARY", "libgpuoffload.so", lib,
			   sizeof lib) != 0)
		return 127;
	if (gpo__preload(lib) != 0) {
		fprintf(stderr, GPO_PROG ": cannot set LD_PRELOAD: %s\n", strerror(errno));
		return 127;
	}
	execvp(argv[i], argv + i);
	fprintf(stderr, GPO_PROG ": cannot run %s: %s\n", argv[i], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
