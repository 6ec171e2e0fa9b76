/*
 * run.h - `gpumutex-run` (and, later, `gpumutex run`): run a command with
 * libgpumutex.so preloaded and gpumutex's variables set.
 */
#ifndef GPUMUTEX_CLI_RUN_H
#define GPUMUTEX_CLI_RUN_H

/*
 * Parse argv (argv[0] is the program name; flags, an optional "--", then
 * the command), set the variables, GPUMUTEX_JOB (fresh) and LD_PRELOAD in
 * this process's environment and execvp the command in place: no process
 * stays in between. Returns only on failure, with the exit status to use:
 * 0 after --help/--version, 2 for a usage or setup error, 127 when the
 * command is not found, 126 when it cannot be executed. Messages go to
 * stderr (help and version to stdout).
 */
int gm_run_main(int argc, char **argv);

#endif
