/*
 * run.c - gpumutex-run: preload libgpumutex.so into one command.
 *
 *   gpumutex-run [--visible-devices LIST] [--num-devices N] [--lock-dir DIR]
 *                [--timeout S] [--quiet] [--] CMD [ARGS...]
 *
 * Everything is checked with the lease core's own parsers before the exec,
 * so a typo is a usage error (exit 2) here rather than a failing cuInit
 * later. Then the variables go into the environment this process hands to
 * CMD, and CMD replaces this process (execvp): its PID is ours, its exit
 * status is the one the caller sees, signals reach it directly.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lease.h"
#include "run.h"

#define PROG "gpumutex-run"
#define VERSION "0.1.0"

static void help(void)
{
	printf(
"Usage: " PROG " [OPTIONS] [--] COMMAND [ARGS...]\n"
"\n"
"Run COMMAND with libgpumutex.so preloaded. Its first cuInit, and that of\n"
"every process it starts, waits its turn in a fair queue for exclusive use\n"
"of GPUs; processes that never initialise CUDA never wait. Each flag sets\n"
"its variable in COMMAND's environment only, and overrides it.\n"
"\n"
"Options (variable, default):\n"
"  --visible-devices LIST  GPUMUTEX_VISIBLE_DEVICES: GPU indices gpumutex\n"
"                          manages, e.g. 0,1,2,3 (required, as a flag or\n"
"                          a variable)\n"
"  --num-devices N         GPUMUTEX_NUM_DEVICES: GPUs one job needs at\n"
"                          once (default 1)\n"
"  --lock-dir DIR          GPUMUTEX_LOCK_DIR: where the queue and locks\n"
"                          live, an absolute path (default " GM_DEFAULT_LOCK_DIR ")\n"
"  --timeout S             GPUMUTEX_TIMEOUT: give up after S seconds of\n"
"                          waiting; cuInit then fails with\n"
"                          CUDA_ERROR_NO_DEVICE (default: wait forever)\n"
"  --quiet                 GPUMUTEX_QUIET=1: no \"waiting\" line on stderr\n"
"                          (default: print it once per waiting process)\n"
"  --help                  show this and exit\n"
"  --version               print the version and exit\n"
"Flags also take the form --flag=VALUE.\n"
"\n"
"Also set or read:\n"
"  GPUMUTEX_JOB         set to a fresh job id: each run is a new job, and\n"
"                       the processes of a job share one lease. Inside a\n"
"                       job that holds GPUs now (an inherited\n"
"                       GPUMUTEX_JOB), COMMAND joins that job instead, as a\n"
"                       new job would wait for GPUs its own caller holds;\n"
"                       flags that do not fit that job's GPUs are refused\n"
"                       (exit 2)\n"
"  GPUMUTEX_LIBRARY     the library to preload (default: libgpumutex.so in\n"
"                       the directory of this program)\n"
"  GPUMUTEX_RECHECK_MS  fallback re-check period while waiting (default\n"
"                       10000; 0 = never)\n"
"  LD_PRELOAD           the library is put first, before any existing\n"
"                       entries\n"
"\n"
"Exit status: COMMAND's; 127 if it is not found, 126 if it cannot be\n"
"executed, 2 on a usage or setup error.\n");
}

static int usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '" PROG " --help'.\n");
	return 2;
}

/* The library: $GPUMUTEX_LIBRARY, else libgpumutex.so next to us. */
static int find_library(char *out, size_t len)
{
	const char *env = getenv("GPUMUTEX_LIBRARY");
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (env && *env) {
		if (!realpath(env, out) || strlen(out) >= len) {
			fprintf(stderr,
				PROG ": GPUMUTEX_LIBRARY=\"%s\" cannot be used: %s\n",
				env, strerror(errno));
			return 2;
		}
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0) {
		fprintf(stderr,
			PROG ": cannot find my own path in /proc/self/exe (%s); set GPUMUTEX_LIBRARY to the absolute path of libgpumutex.so\n",
			strerror(errno));
		return 2;
	}
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	if ((size_t)snprintf(out, len, "%s/libgpumutex.so", exe) >= len ||
	    access(out, R_OK) != 0) {
		fprintf(stderr,
			PROG ": cannot find %s/libgpumutex.so; install it next to " PROG " or set GPUMUTEX_LIBRARY to its absolute path\n",
			exe);
		return 2;
	}
	return 0;
}

/* LD_PRELOAD = lib, then whatever was there (unless lib already is). */
static int set_preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	size_t llen = strlen(lib), n;
	char *v;
	int rc;

	if (old && *old) {
		/* Entries are separated by ':' or spaces. */
		const char *p = old;
		while (*p) {
			n = strcspn(p, ": ");
			if (n == llen && strncmp(p, lib, n) == 0)
				return 0;
			p += n;
			p += strspn(p, ": ");
		}
		n = llen + strlen(old) + 2;
		v = malloc(n);
		if (!v)
			return -1;
		snprintf(v, n, "%s:%s", lib, old);
		rc = setenv("LD_PRELOAD", v, 1);
		free(v);
		return rc;
	}
	return setenv("LD_PRELOAD", lib, 1);
}

/* "--name VALUE" or "--name=VALUE": 1 and *value set, 0 if not `name`,
 * -1 if the value is missing. */
static int take(const char *name, int argc, char **argv, int *i,
		const char **value)
{
	const char *a = argv[*i];
	size_t n = strlen(name);

	if (strncmp(a, name, n) != 0)
		return 0;
	if (a[n] == '=') {
		*value = a + n + 1;
		return 1;
	}
	if (a[n] != '\0')
		return 0;
	if (*i + 1 >= argc)
		return -1;
	*value = argv[++*i];
	return 1;
}

static void list_format(char *buf, size_t len, const int *v, int n)
{
	size_t off = 0;

	buf[0] = '\0';
	for (int k = 0; k < n && off < len; k++)
		off += (size_t)snprintf(buf + off, len - off, "%s%d",
					k ? "," : "", v[k]);
}

/*
 * Started inside a job (an inherited GPUMUTEX_JOB) that holds a lease in
 * our lock directory now, or is taking one, COMMAND as a new job would
 * queue behind GPUs its own caller holds: for ever if the caller waits
 * for it. So it joins that job instead (job[] = the inherited id), with a
 * note on stderr unless quiet; settings of ours that the lease cannot
 * serve (gm_join_check) are refused at once (returns 2). Anything else,
 * including a job id we cannot check, leaves job[] empty: a new job.
 * `flag` holds the flags' values (visible devices, num devices, lock dir).
 */
static int enclosing_job(const char *cmd, const int *devices, int ndevices,
			 int want, const char *const *flag, int quiet, char *job)
{
	const char *inherited = getenv("GPUMUTEX_JOB");
	const char *dir = flag[2] ? flag[2] : getenv("GPUMUTEX_LOCK_DIR");
	const char *q = getenv("GPUMUTEX_QUIET");
	struct gm_job_state js;
	struct gm_config cfg;
	char err[GM_ERR_MAX], held[GM_MAX_DEVICES * 4];
	int rc;

	job[0] = '\0';
	if (!inherited || gm_job_check("GPUMUTEX_JOB", inherited, NULL, 0))
		return 0;
	if (!dir)
		dir = GM_DEFAULT_LOCK_DIR;
	rc = gm_job_probe(dir, inherited, &js, err, sizeof err);
	if (rc != 1 && rc != 2)
		return 0;
	quiet |= q && *q && strcmp(q, "0") != 0;
	if (rc == 1) {
		memset(&cfg, 0, sizeof cfg);
		memcpy(cfg.devices, devices, (size_t)ndevices * sizeof *devices);
		cfg.ndevices = ndevices;
		cfg.want = want;
		snprintf(cfg.job, sizeof cfg.job, "%s", inherited);
		list_format(held, sizeof held, js.devices, js.ndevices);
		if (gm_join_check(&cfg, js.devices, js.ndevices, NULL, err,
				  sizeof err)) {
			fprintf(stderr,
				PROG ": %s runs inside job %s (GPUMUTEX_JOB, inherited), which holds GPUs now, so it can only share them: as a new job it would wait for GPUs its own caller holds (for ever, if the caller waits for it); but %s (%s%s, %s%d); give it settings that fit the job's GPUs, or run it outside that job\n",
				cmd, inherited, err,
				flag[0] ? "--visible-devices " : "GPUMUTEX_VISIBLE_DEVICES=",
				flag[0] ? flag[0] : getenv("GPUMUTEX_VISIBLE_DEVICES"),
				flag[1] ? "--num-devices " : "GPUMUTEX_NUM_DEVICES=",
				want);
			return 2;
		}
		if (!quiet)
			fprintf(stderr,
				PROG ": %s runs inside job %s (GPUMUTEX_JOB, inherited), which holds GPU%s %s: it joins that job and shares its GPUs instead of waiting for GPUs its own caller holds; --quiet hides this line\n",
				cmd, inherited, js.ndevices == 1 ? "" : "s", held);
	} else if (!quiet) {
		fprintf(stderr,
			PROG ": %s runs inside job %s (GPUMUTEX_JOB, inherited), which is taking its GPUs: it joins that job and shares them instead of waiting for GPUs its own caller will hold; --quiet hides this line\n",
			cmd, inherited);
	}
	snprintf(job, GM_JOB_MAX + 1, "%s", inherited);
	return 0;
}

int gm_run_main(int argc, char **argv)
{
	static const char *const names[] = { "--visible-devices",
					     "--num-devices", "--lock-dir",
					     "--timeout" };
	static const char *const vars[] = { "GPUMUTEX_VISIBLE_DEVICES",
					    "GPUMUTEX_NUM_DEVICES",
					    "GPUMUTEX_LOCK_DIR",
					    "GPUMUTEX_TIMEOUT" };
	const char *flag[4] = { NULL, NULL, NULL, NULL };
	char err[GM_ERR_MAX], lib[PATH_MAX], job[GM_JOB_MAX + 1];
	int devices[GM_MAX_DEVICES], ndevices = 0, want = 1, quiet = 0, i, rc;
	double timeout;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		int k, got = 0;

		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-' || a[1] == '\0')
			break; /* the command */
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			help();
			return 0;
		}
		if (strcmp(a, "--version") == 0) {
			printf(PROG " " VERSION "\n");
			return 0;
		}
		if (strcmp(a, "--quiet") == 0) {
			quiet = 1;
			continue;
		}
		for (k = 0; k < 4 && !got; k++) {
			got = take(names[k], argc, argv, &i, &flag[k]);
			if (got < 0)
				return usage_error("%s needs a value", names[k]);
		}
		if (!got)
			return usage_error("unknown option \"%s\"", a);
	}
	if (i >= argc)
		return usage_error("no command given; usage: " PROG " [OPTIONS] -- COMMAND [ARGS...]");

	/* Check what COMMAND will see: each flag, else its variable. */
	{
		const char *t = flag[0] ? flag[0] : getenv(vars[0]);
		const char *name = flag[0] ? names[0] : vars[0];
		if (!t)
			return usage_error("no GPUs to manage: pass --visible-devices LIST or set GPUMUTEX_VISIBLE_DEVICES");
		if (gm_parse_devices(name, t, devices, &ndevices, err, sizeof err))
			return usage_error("%s", err);
	}
	{
		const char *t = flag[1] ? flag[1] : getenv(vars[1]);
		if (t && gm_parse_want(flag[1] ? names[1] : vars[1], t, ndevices,
				       &want, err, sizeof err))
			return usage_error("%s", err);
	}
	{
		const char *t = flag[2] ? flag[2] : getenv(vars[2]);
		if (t && t[0] != '/')
			return usage_error("%s=\"%s\" is not an absolute directory path",
					   flag[2] ? names[2] : vars[2], t);
	}
	{
		const char *t = flag[3] ? flag[3] : getenv(vars[3]);
		if (t && gm_parse_timeout(flag[3] ? names[3] : vars[3], t,
					  &timeout, err, sizeof err))
			return usage_error("%s", err);
	}
	rc = find_library(lib, sizeof lib);
	if (rc)
		return rc;

	for (int k = 0; k < 4; k++)
		if (flag[k] && setenv(vars[k], flag[k], 1) != 0)
			goto nomem;
	if (quiet && setenv("GPUMUTEX_QUIET", "1", 1) != 0)
		goto nomem;
	/* A new job, unless this runs inside a job that holds GPUs now:
	 * then it joins that job (see enclosing_job). */
	rc = enclosing_job(argv[i], devices, ndevices, want, flag, quiet, job);
	if (rc)
		return rc;
	if (!job[0])
		gm_job_generate(job);
	if (setenv("GPUMUTEX_JOB", job, 1) != 0 || set_preload(lib) != 0)
		goto nomem;

	execvp(argv[i], &argv[i]);
	rc = errno;
	fprintf(stderr, PROG ": %s: %s\n", argv[i], strerror(rc));
	return rc == ENOENT || rc == ENOTDIR ? 127 : 126;
nomem:
	fprintf(stderr, PROG ": cannot set the environment: %s\n",
		strerror(errno));
	return 2;
}
