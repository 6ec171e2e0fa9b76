/*
 * gpu-offload.c - the `gpu-offload` command: run, report, profile,
 * calibrate (one file each, cmd_*.c; docs/offload.md, "The command").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
} gpo__cmds[] = {
	{ "run", gpo_cmd_run, "run [--level N] [--verify] [--trace DIR] [--measure] [--backend PATH] -- CMD...\n      run CMD with its BLAS and LAPACK calls offloaded" },
	{ "report", gpo_cmd_report, "report DIR\n      per operation: calls, work, time per device, reasons, avoidable copies" },
	{ "profile", gpo_cmd_profile, "profile\n      print the machine profile in use" },
	{ "calibrate", gpo_cmd_calibrate, "calibrate [--output PATH] [--backend PATH] [--max-size N]\n      measure this machine and write the profile" },
};

const char *gpo_cli_opt(int argc, char **argv, int *i, const char *name)
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
		fprintf(stderr, GPO_PROG ": %s needs a value\n", name);
		exit(2);
	}
	return argv[++*i];
}

int gpo_cli_beside(const char *env, const char *name, char *out, size_t len)
{
	const char *v = env ? getenv(env) : NULL;
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (v && *v) {
		if ((size_t)snprintf(out, len, "%s", v) >= len)
			return -1;
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0) {
		fprintf(stderr, GPO_PROG ": cannot find my own path in /proc/self/exe (%s)%s%s\n",
			strerror(errno), env ? "; set " : "", env ? env : "");
		return -1;
	}
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	if ((size_t)snprintf(out, len, "%s/%s", exe, name) >= len)
		return -1;
	if (access(out, R_OK) != 0) {
		fprintf(stderr, GPO_PROG ": cannot find %s next to " GPO_PROG "%s%s%s\n",
			out, env ? "; set " : "", env ? env : "",
			env ? " to its path" : "");
		return -1;
	}
	return 0;
}

int gpo_cli_abs(const char *path, char *out, size_t len)
{
	char cwd[PATH_MAX];

	if (path[0] == '/')
		return (size_t)snprintf(out, len, "%s", path) < len ? 0 : -1;
	if (!getcwd(cwd, sizeof cwd))
		return -1;
	return (size_t)snprintf(out, len, "%s/%s", cwd, path) < len ? 0 : -1;
}

static void gpo__usage(FILE *f)
{
	fprintf(f, "usage: " GPO_PROG " COMMAND [ARGS...]\n\nCommands:\n");
	for (size_t i = 0; i < sizeof gpo__cmds / sizeof gpo__cmds[0]; i++)
		fprintf(f, "  %s\n", gpo__cmds[i].help);
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		gpo__usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < sizeof gpo__cmds / sizeof gpo__cmds[0]; i++)
		if (strcmp(argv[1], gpo__cmds[i].name) == 0)
			return gpo__cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, GPO_PROG ": no command %s\n", argv[1]);
	gpo__usage(stderr);
	return 2;
}
