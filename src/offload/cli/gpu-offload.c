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

/* Every command, with every option it takes: `gpu-offload --help` prints
 * them all, `gpu-offload CMD --help` its own. */
static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
} gpo__cmds[] = {
	{ "run", gpo_cmd_run,
	  "run [OPTIONS] [--] CMD [ARGS...]\n"
	  "      run CMD (and the programs it starts) with its BLAS and LAPACK calls\n"
	  "      offloaded where the machine profile says the GPU pays\n"
	  "        --level N       1 (only large wins) to 10 (eager); default 5\n"
	  "        --profile PATH  the machine profile (default: $GPU_OFFLOAD_PROFILE,\n"
	  "                        else $XDG_CONFIG_HOME or ~/.config/gpu-offload/profile)\n"
	  "        --backend PATH  the GPU backend (default: libgpuoffload-cuda.so next to\n"
	  "                        the library); checked before CMD starts\n"
	  "        --trace DIR     one trace file per process in DIR (made if absent;\n"
	  "                        must be a writable directory)\n"
	  "        --measure       every call on the CPU, every call traced (into --trace\n"
	  "                        DIR, else ./gpu-offload-trace)\n"
	  "        --verify        run each offloaded call on both devices and compare\n"
	  "        --summary       one summary line per process on stderr at exit\n"
	  "        -h, --help      this help" },
	{ "report", gpo_cmd_report,
	  "report DIR\n"
	  "      per operation: calls, work, time per device, reasons, avoidable copies,\n"
	  "      from the traces in DIR (run --trace DIR)\n"
	  "        -h, --help      this help" },
	{ "profile", gpo_cmd_profile,
	  "profile\n"
	  "      print the machine profile in use (GPU_OFFLOAD_PROFILE, else the\n"
	  "      default place) and where it is\n"
	  "        -h, --help      this help" },
	{ "calibrate", gpo_cmd_calibrate,
	  "calibrate [OPTIONS]\n"
	  "      measure this machine (a CPU pass, then a GPU pass) and write the profile;\n"
	  "      prints the fit's predicted-vs-measured error per device\n"
	  "        --output PATH   where to write it (default: the profile's default place)\n"
	  "        --backend PATH  the GPU backend (default: libgpuoffload-cuda.so next to\n"
	  "                        this command)\n"
	  "        --cpu-library PATH[:PATH]|numpy|system\n"
	  "                        the CPU BLAS/LAPACK to measure (default: numpy's bundled\n"
	  "                        OpenBLAS if python3 has one, else libblas.so.3 and\n"
	  "                        liblapack.so.3)\n"
	  "        --max-size N    the largest matrix side measured (64 to 65536; 8192)\n"
	  "        --reps N        repetitions per point (1 to 64; 4)\n"
	  "        --budget S      seconds for both passes (1 to 86400; 300)\n"
	  "        --ops LIST      only these operations (comma-separated, e.g. gemm,getrf)\n"
	  "        --thorough      every size and every repetition (the slower grid,\n"
	  "                        to compare the fit's error with)\n"
	  "        -h, --help      this help" },
};

void gpo_cli_usage(const char *cmd, FILE *f)
{
	for (size_t i = 0; i < sizeof gpo__cmds / sizeof gpo__cmds[0]; i++)
		if (strcmp(cmd, gpo__cmds[i].name) == 0)
			fprintf(f, "usage: " GPO_PROG " %s\n", gpo__cmds[i].help);
}

int gpo_cli_is_help(const char *arg)
{
	return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

int gpo_cli_unknown(const char *cmd, const char *arg)
{
	fprintf(stderr, GPO_PROG ": %s: unknown option %s\n", cmd, arg);
	gpo_cli_usage(cmd, stderr);
	return 2;
}

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
	fprintf(f, "usage: " GPO_PROG " COMMAND [ARGS...]\n"
		"       " GPO_PROG " COMMAND --help\n\nCommands:\n");
	for (size_t i = 0; i < sizeof gpo__cmds / sizeof gpo__cmds[0]; i++)
		fprintf(f, "  %s\n\n", gpo__cmds[i].help);
	fprintf(f, "docs/offload.md has the rest (environment variables, the model, traces).\n");
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
