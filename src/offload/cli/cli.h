/*
 * cli.h - what the subcommands of `gpu-offload` share (gpu-offload.c).
 * Each subcommand is one file (cmd_*.c) and one line of the dispatcher's
 * table; a subcommand never includes the dispatcher.
 */
#ifndef GPUOFFLOAD_CLI_H
#define GPUOFFLOAD_CLI_H

#include <stddef.h>

#define GPO_PROG "gpu-offload"

/* `--name VALUE` or `--name=VALUE` at argv[*i]: the value (advancing *i
 * past it), or NULL when argv[*i] is not that option. Exits 2 when the
 * value is missing. */
const char *gpo_cli_opt(int argc, char **argv, int *i, const char *name);
/* A file next to this program (`name` in the directory of
 * /proc/self/exe), or $env when set. 0, or -1 after a message. */
int gpo_cli_beside(const char *env, const char *name, char *out,
		   size_t len);
/* `path` made absolute against the current directory. 0 or -1. */
int gpo_cli_abs(const char *path, char *out, size_t len);

int gpo_cmd_run(int argc, char **argv);
int gpo_cmd_report(int argc, char **argv);
int gpo_cmd_profile(int argc, char **argv);
int gpo_cmd_calibrate(int argc, char **argv);

#endif
