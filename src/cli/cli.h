/*
 * cli.h - the `gpumutex` command's subcommands and shared helpers.
 */
#ifndef GPUMUTEX_CLI_H
#define GPUMUTEX_CLI_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* `gpumutex status ...` and `gpumutex init ...`: argv[0] is the
 * subcommand's name. Return the exit status (2 for usage errors). */
int gm_status_main(int argc, char **argv);
int gm_init_main(int argc, char **argv);
/* install.c: `gpumutex install --system`, `gpumutex uninstall --system`. */
int gm_install_main(int argc, char **argv);
int gm_uninstall_main(int argc, char **argv);
/* doctor.c: `gpumutex doctor`. */
int gm_doctor_main(int argc, char **argv);

/* Format a duration in nanoseconds as 45s, 2m13s, 1h05m or 3d02h. */
void gm_cli_duration(int64_t ns, char *out, size_t len);

/* Idle suspension in `gpumutex status` (idle.c): the text section
 * (activity per lease, suspended processes), a lease object's "idle_s"
 * and "suspend_declined" members, and the top-level "suspended" list. */
struct gm_state;
struct gm_state_lease;
void gm_status_idle_text(FILE *f, const char *dir, const struct gm_state *st);
/* A lease's idle time in ns (its least idle live member; -1: no member
 * published its activity), and the processes suspended now (idle.c). */
int64_t gm_status_lease_idle_ns(const char *dir, const struct gm_state *st,
				const struct gm_state_lease *l);
int gm_status_suspended_count(const char *dir, const struct gm_state *st);
void gm_status_idle_lease_json(FILE *f, const char *dir,
			       const struct gm_state *st,
			       const struct gm_state_lease *l);
void gm_status_idle_json(FILE *f, const char *dir, const struct gm_state *st);

/* `s` as a JSON string (quotes included; NULL as ""), to f (evlog.c). */
void gm_json_str(FILE *f, const char *s);

/* The running subcommand's full name ("gpumutex log"), which starts
 * every message it prints; "gpumutex" before one is chosen. */
extern const char *gm_cli_prog;
/* A usage error: "<gm_cli_prog>: <message>" and a one-line hint to
 * --help on stderr. Returns 2 (the exit status of usage errors). */
int gm_cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* If argv[*i] is `name VALUE` or `name=VALUE`, return VALUE (advancing *i
 * past a separate value), else NULL. A missing value prints a usage error
 * (gm_cli_usage_error) and exits 2: this is for command-line programs only. */
const char *gm_cli_opt(int argc, char **argv, int *i, const char *name);

/* The lock directory a subcommand uses: `dir` (from the flag or the
 * variable `name`), GM_DEFAULT_LOCK_DIR when it is NULL or an empty
 * variable. NULL, after a message on stderr prefixed with `prog`, when it
 * is not an absolute path (gm_check_lock_dir). */
const char *gm_cli_lock_dir(const char *prog, const char *dir,
			    const char *name);

/* `gpumutex log`, `gpumutex report`, `gpumutex sample`. */
int gm_log_main(int argc, char **argv);
int gm_report_main(int argc, char **argv);
int gm_sample_main(int argc, char **argv);

/* A user name's uid, or -1. */
long gm_cli_uid_of(const char *name);

/* The ids of the leases alive in `dir` now (malloc'ed; *n of them, 0
 * when the directory cannot be read). */
uint64_t *gm_cli_live_leases(const char *dir, int *n);

#endif
