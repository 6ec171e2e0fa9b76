/*
 * cli.h - what the subcommands of `gpu-offload` share (gpu-offload.c).
 * Each subcommand is one file (cmd_*.c) and one line of the dispatcher's
 * table; a subcommand never includes the dispatcher.
 */
#ifndef GPUOFFLOAD_CLI_H
#define GPUOFFLOAD_CLI_H

#include <stddef.h>
#include <stdio.h>

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

/* The usage of command `cmd` ("run", ...) with every option, on f. */
void gpo_cli_usage(const char *cmd, FILE *f);
/* 1 when arg asks for help (--help, -h). */
int gpo_cli_is_help(const char *arg);
/* "unknown option" for `cmd`, its usage on stderr; returns 2. */
int gpo_cli_unknown(const char *cmd, const char *arg);
/* The GPU backend at `path` can be loaded (tried in a child process,
 * which then exits: nothing of it stays here) and answers the ABI this
 * build implements. 0, or -1 after a line naming the path and why. */
int gpo_cli_backend_ok(const char *opt, const char *path);
/* `dir` is, or can be made (the library makes it), a directory this
 * process can write in. 0, or -1 after a line naming the path. */
int gpo_cli_trace_ok(const char *dir);

int gpo_cmd_run(int argc, char **argv);
int gpo_cmd_report(int argc, char **argv);
int gpo_cmd_profile(int argc, char **argv);
int gpo_cmd_calibrate(int argc, char **argv);

#endif
