/*
 * cmd_profile.c - `gpu-offload profile`: the machine profile in use.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "profile.h"

int gpo_cmd_profile(int argc, char **argv)
{
	char path[PATH_MAX], err[PATH_MAX + 256], *buf;
	struct gpo_profile p;
	size_t n;
	int rc;

	if (argc > 1 && gpo_cli_is_help(argv[1])) {
		gpo_cli_usage("profile", stdout);
		return 0;
	}
	if (argc > 1) {
		if (argv[1][0] == '-')
			return gpo_cli_unknown("profile", argv[1]);
		gpo_cli_usage("profile", stderr);
		return 2;
	}
	if (gpo_profile_path(path, sizeof path) != 0) {
		fprintf(stderr, GPO_PROG ": no profile: set GPU_OFFLOAD_PROFILE or HOME\n");
		return 1;
	}
	rc = gpo_profile_load(path, &p, err, sizeof err);
	if (rc == -ENOENT) {
		fprintf(stderr, GPO_PROG ": no machine profile at %s (every call stays on the CPU); run `" GPO_PROG " calibrate`\n", path);
		return 1;
	}
	if (rc) {
		fprintf(stderr, GPO_PROG ": %s\n", err);
		return 1;
	}
	n = gpo_profile_format(&p, NULL, 0);
	buf = malloc(n + 1);
	if (!buf)
		return 1;
	gpo_profile_format(&p, buf, n + 1);
	printf("# %s\n%s", path, buf);
	free(buf);
	gpo_profile_free(&p);
	return 0;
}
