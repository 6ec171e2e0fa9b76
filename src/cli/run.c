/*
 * run.c - gpumutex-run: preload libgpumutex.so into one command.
 *
 *   gpumutex-run [--visible-devices LIST] [--num-devices N] [--lock-dir DIR]
 *                [--timeout S] [--idle-suspend MS] [--gpu-time[=1|0]]
 *                [--quiet[=1|0]]
 *                [--] CMD [ARGS...]
 *
 * Everything is checked with the lease core's own code before the exec:
 * each flag by its parser, then the whole environment CMD will get by
 * gm_config_resolve (what the library reads it with: the environment and
 * /etc/gpumutex.conf), then the lock
 * directory by gm_lockdir_prepare (what the library's first claim does).
 * So a typo or an unusable directory is an error here (exit 2), not a
 * failing cuInit later in CMD. The variables go into the environment this
 * process hands to CMD, and CMD replaces this process (execvp): its PID is
 * ours, its exit status is the one the caller sees, signals reach it
 * directly.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
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
/* Who speaks in messages: gpumutex-run, or `gpumutex run` (gm_run_main). */
static const char *prog = PROG;
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
"  --idle-suspend MS       GPUMUTEX_IDLE_SUSPEND_MS: a job that made no GPU\n"
"                          call for MS while another waits for its GPUs\n"
"                          is suspended (its GPU memory checkpointed to\n"
"                          host memory) and resumes at its next GPU call\n"
"                          (default 60000; 0 = never)\n"
"  --gpu-time, --gpu-time=1|0\n"
"                          GPUMUTEX_GPU_TIME=1 (or the value given): the\n"
"                          event log gets each process's measured GPU\n"
"                          time per lease, through CUPTI (default 0;\n"
"                          docs/gputime.md)\n"
"  --quiet, --quiet=1|0    GPUMUTEX_QUIET=1 (or the value given, 1 or 0):\n"
"                          no \"waiting\" line on stderr (default 0: print\n"
"                          it once per waiting process)\n"
"  --help                  show this and exit\n"
"  --version               print the version and exit\n"
"Flags that take a value also take the form --flag=VALUE; --quiet and\n"
"--gpu-time take a value only that way (a word after it is COMMAND).\n"
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
"  GPUMUTEX_GIVE_BACK_MS  how long a process without a context keeps its\n"
"                       lease (default 1000)\n"
"  LD_PRELOAD           the library is put first, before any existing\n"
"                       entries\n"
"\n"
"Every flag and variable above is checked, and the lock directory made\n"
"(mode 1777) if missing and checked (not a symlink, a directory, not\n"
"writable by others without the sticky bit), before COMMAND starts.\n"
"\n"
"Exit status: COMMAND's; 127 if it is not found, 126 if it cannot be\n"
"executed, 2 on a usage or setup error (a malformed flag or variable, an\n"
"unusable lock directory, no library).\n");
}

static int usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", prog);
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
				"%s: GPUMUTEX_LIBRARY=\"%s\" cannot be used: %s\n",
				prog, env, strerror(errno));
			return 2;
		}
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0) {
		fprintf(stderr,
			"%s: cannot find my own path in /proc/self/exe (%s); set GPUMUTEX_LIBRARY to the absolute path of libgpumutex.so\n",
			prog, strerror(errno));
		return 2;
	}
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	if ((size_t)snprintf(out, len, "%s/libgpumutex.so", exe) >= len ||
	    access(out, R_OK) != 0) {
		fprintf(stderr,
			"%s: cannot find %s/libgpumutex.so; install it next to " PROG " or set GPUMUTEX_LIBRARY to its absolute path\n",
			prog, exe);
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


/*
 * What CUDA clients see before they initialise CUDA (docs/preload.md,
 * "Device queries"): PYTORCH_NVML_BASED_CUDA_CHECK=1, so that
 * torch.cuda.is_available() asks NVML instead of calling cuInit; and,
 * unless the caller narrowed it already, CUDA_VISIBLE_DEVICES with as
 * many GPUs as the process will be given, so that torch.cuda.device_count()
 * before initialisation counts those, not every GPU of the machine:
 *  - devices fixed (as many candidates as wanted): the candidates
 *    (ascending), exactly what the library sets in cuInit, which reads it
 *    as a narrowing that changes nothing;
 *  - a pool: the first GPUMUTEX_NUM_DEVICES candidates (ascending), and
 *    the same text in GPUMUTEX_CUDA_PLACEHOLDER, by which the library
 *    knows it for no narrowing: the process queues for the whole pool and
 *    is given any of its GPUs, which replace the placeholder at the grant.
 * An inherited CUDA_VISIBLE_DEVICES equal to an inherited placeholder (a
 * parent of the same kind not granted yet) is no narrowing either and is
 * chosen again for this job; an inherited placeholder that does not match
 * is stale and dropped. 0 or -1 (errno).
 */
static int device_env(const struct gm_config *cfg)
{
	char list[GM_MAX_DEVICES * 4];
	int d[GM_MAX_DEVICES], n = cfg->ndevices;
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	const char *ph = getenv("GPUMUTEX_CUDA_PLACEHOLDER");

	if (!getenv("PYTORCH_NVML_BASED_CUDA_CHECK") &&
	    setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1", 1) != 0)
		return -1;
	if (cvd && !(ph && ph[0] && strcmp(cvd, ph) == 0)) {
		if (ph && unsetenv("GPUMUTEX_CUDA_PLACEHOLDER") != 0)
			return -1;
		return 0;
	}
	memcpy(d, cfg->devices, sizeof d);
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && d[j - 1] > d[j]; j--) {
			int t = d[j];
			d[j] = d[j - 1];
			d[j - 1] = t;
		}
	if (cfg->want >= 1 && cfg->want < n) {
		gm_format_list(list, sizeof list, d, cfg->want);
		if (setenv("GPUMUTEX_CUDA_PLACEHOLDER", list, 1) != 0)
			return -1;
	} else {
		gm_format_list(list, sizeof list, d, n);
		if (ph && unsetenv("GPUMUTEX_CUDA_PLACEHOLDER") != 0)
			return -1;
	}
	if (setenv("CUDA_VISIBLE_DEVICES", list, 1) != 0)
		return -1;
	return setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
}

/*
 * Started inside a job (an inherited GPUMUTEX_JOB, `inherited`, "" if
 * none) that holds a lease in our lock directory now, or is taking one,
 * COMMAND as a new job would queue behind GPUs its own caller holds: for
 * ever if the caller waits for it. So it joins that job instead: returns
 * 1 (keep `inherited`), with a note on stderr unless cfg->quiet. Settings
 * of ours (`cfg`, as the library will read them; `flag`: the flags given)
 * that the job's lease cannot serve (gm_join_check) are refused at once:
 * a message and -1. Otherwise, including a job we cannot check, 0: a new
 * job.
 */
static int enclosing_job(const char *cmd, const char *inherited,
			 const struct gm_config *cfg, const char *const *flag)
{
	struct gm_job_state js;
	struct gm_config mine;
	char err[GM_ERR_MAX], held[GM_MAX_DEVICES * 4];
	int rc;

	if (!inherited[0])
		return 0;
	rc = gm_job_probe(cfg->lock_dir, inherited, &js, err, sizeof err);
	if (rc != 1 && rc != 2)
		return 0;
	if (rc == 2) {
		if (!cfg->quiet)
			fprintf(stderr,
				"%s: %s runs inside job %s (GPUMUTEX_JOB, inherited), which is taking its GPUs: it joins that job and shares them instead of waiting for GPUs its own caller will hold; --quiet hides this line\n",
				prog, cmd, inherited);
		return 1;
	}
	mine = *cfg;
	snprintf(mine.job, sizeof mine.job, "%s", inherited);
	if (gm_join_check(&mine, js.devices, js.ndevices, NULL, err,
			  sizeof err)) {
		char list[GM_MAX_DEVICES * 4];
		gm_format_list(list, sizeof list, cfg->devices, cfg->ndevices);
		fprintf(stderr,
			"%s: %s runs inside job %s (GPUMUTEX_JOB, inherited), which holds GPUs now, so it can only share them: as a new job it would wait for GPUs its own caller holds (for ever, if the caller waits for it); but %s (%s %s, %s %d); give it settings that fit the job's GPUs, or run it outside that job\n",
			prog, cmd, inherited, err,
			flag[0] ? "--visible-devices" : "GPUMUTEX_VISIBLE_DEVICES", list,
			flag[1] ? "--num-devices" : "GPUMUTEX_NUM_DEVICES", cfg->want);
		return -1;
	}
	gm_format_list(held, sizeof held, js.devices, js.ndevices);
	if (!cfg->quiet)
		fprintf(stderr,
			"%s: %s runs inside job %s (GPUMUTEX_JOB, inherited), which holds GPU%s %s: it joins that job and shares its GPUs instead of waiting for GPUs its own caller holds; --quiet hides this line\n",
			prog, cmd, inherited, js.ndevices == 1 ? "" : "s", held);
	return 1;
}

int gm_run_main(int argc, char **argv)
{
	/* As a subcommand, argv[0] is "run" (gpumutex.c); as gpumutex-run,
	 * the program's path. */
	if (argc > 0 && !strcmp(argv[0], "run"))
		prog = "gpumutex run";
	gm_uuid_dlsym(dlsym); /* GPUs named by UUID (src/lease/uuid.c) */
	static const char *const names[] = { "--visible-devices",
					     "--num-devices", "--lock-dir",
					     "--timeout", "--idle-suspend" };
	static const char *const vars[] = { "GPUMUTEX_VISIBLE_DEVICES",
					    "GPUMUTEX_NUM_DEVICES",
					    "GPUMUTEX_LOCK_DIR",
					    "GPUMUTEX_TIMEOUT",
					    "GPUMUTEX_IDLE_SUSPEND_MS" };
	const char *flag[5] = { NULL, NULL, NULL, NULL, NULL };
	char err[GM_ERR_MAX], lib[PATH_MAX], job[GM_JOB_MAX + 1];
	char inherited[GM_JOB_MAX + 1] = "";
	int devices[GM_MAX_DEVICES], ndevices = 0, want, q, i, rc;
	const char *quiet = NULL, *gpu_time = NULL;
	double timeout;
	struct gm_config cfg;

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
			quiet = "1";
			continue;
		}
		if (strncmp(a, "--quiet=", 8) == 0) {
			quiet = a + 8;
			if (gm_parse_quiet("--quiet", quiet, &q, err, sizeof err))
				return usage_error("%s", err);
			continue;
		}
		if (strcmp(a, "--gpu-time") == 0) {
			gpu_time = "1";
			continue;
		}
		if (strncmp(a, "--gpu-time=", 11) == 0) {
			gpu_time = a + 11;
			if (strcmp(gpu_time, "1") && strcmp(gpu_time, "0"))
				return usage_error("--gpu-time=\"%s\" is not valid; expected 1 or 0",
						   gpu_time);
			continue;
		}
		for (k = 0; k < 5 && !got; k++) {
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
		/* An empty variable is "not configured" for the library; here
		 * that would run COMMAND outside the queue, so it is an error. */
		if (!t)
			return usage_error("no GPUs to manage: pass --visible-devices LIST or set GPUMUTEX_VISIBLE_DEVICES (or visible_devices in /etc/gpumutex.conf)");
		if (!flag[0] && !*t)
			return usage_error("GPUMUTEX_VISIBLE_DEVICES is empty, which means \"not configured\" (the library would do nothing): pass --visible-devices LIST or set GPUMUTEX_VISIBLE_DEVICES to a list such as \"0,1\"");
		if (gm_parse_visible(name, t, devices, &ndevices, err, sizeof err))
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
		if (t && gm_check_lock_dir(flag[2] ? names[2] : vars[2], t, err,
					   sizeof err))
			return usage_error("%s", err);
	}
	{
		const char *t = flag[3] ? flag[3] : getenv(vars[3]);
		if (t && gm_parse_timeout(flag[3] ? names[3] : vars[3], t,
					  &timeout, err, sizeof err))
			return usage_error("%s", err);
	}
	{
		/* Millisecond settings the library reads (0 to a day): a
		 * malformed one would make COMMAND's cuInit fail, so it is
		 * refused here, before COMMAND runs. */
		const char *t = flag[4] ? flag[4] : getenv(vars[4]);
		int ms;

		if (t && gm_parse_recheck_ms(flag[4] ? names[4] : vars[4], t,
					     &ms, err, sizeof err))
			return usage_error("%s", err);
		t = getenv("GPUMUTEX_GIVE_BACK_MS");
		if (t && gm_parse_recheck_ms("GPUMUTEX_GIVE_BACK_MS", t, &ms,
					     err, sizeof err))
			return usage_error("%s", err);
	}
	{
		/* GPUMUTEX_GPU_TIME as the library reads it (1 or 0): a
		 * malformed value would fail COMMAND's cuInit. */
		const char *t = getenv("GPUMUTEX_GPU_TIME");

		if (!gpu_time && t && strcmp(t, "1") && strcmp(t, "0"))
			return usage_error("GPUMUTEX_GPU_TIME=\"%s\" is not valid; expected 1 or 0",
					   t);
	}
	rc = find_library(lib, sizeof lib);
	if (rc)
		return rc;

	for (int k = 0; k < 5; k++)
		if (flag[k] && setenv(vars[k], flag[k], 1) != 0)
			goto nomem;
	if (quiet && setenv("GPUMUTEX_QUIET", quiet, 1) != 0)
		goto nomem;
	if (gpu_time && setenv("GPUMUTEX_GPU_TIME", gpu_time, 1) != 0)
		goto nomem;
	/* A new job (unless it runs inside one that holds GPUs: below). */
	{
		const char *v = getenv("GPUMUTEX_JOB");
		if (v && gm_job_check("GPUMUTEX_JOB", v, NULL, 0) == 0)
			snprintf(inherited, sizeof inherited, "%s", v);
	}
	gm_job_generate(job);
	if (setenv("GPUMUTEX_JOB", job, 1) != 0)
		goto nomem;

	/* Then every variable as the library will read it, with its own
	 * function: those without a flag (GPUMUTEX_QUIET when --quiet is not
	 * given, GPUMUTEX_RECHECK_MS) and any added later. */
	/* With /etc/gpumutex.conf too, as the library resolves it: its
	 * visible_devices serve without a flag, and an enforcing file's
	 * refusals are said once here. */
	{
		struct gm_conf_info info;
		rc = gm_config_resolve(&cfg, &info, 0, err, sizeof err);
		if (rc == 0 && info.notes[0])
			fprintf(stderr, "gpumutex-run: %s; the command queues under %s's settings\n",
				info.notes, info.file);
	}
	if (rc == 1)
		return usage_error("no GPUs to manage: pass --visible-devices LIST or set GPUMUTEX_VISIBLE_DEVICES (or visible_devices in /etc/gpumutex.conf)");
	if (rc)
		return usage_error("%s", err);
	/* Inside a job that holds GPUs now, COMMAND joins it instead. */
	rc = enclosing_job(argv[i], inherited, &cfg, flag);
	if (rc < 0)
		return 2;
	if (rc == 1 && setenv("GPUMUTEX_JOB", inherited, 1) != 0)
		goto nomem;
	/* Last, as it is the one check that leaves something behind: the
	 * lock directory and the device files, made and checked as the
	 * library's first claim would (a directory that is a symlink, a file,
	 * writable by others without the sticky bit, or that cannot be made). */
	rc = gm_lockdir_prepare(&cfg, err, sizeof err);
	if (rc) {
		fprintf(stderr,
			"%s: cannot use the lock directory %s (%s): %s\n",
			prog, cfg.lock_dir,
			flag[2] ? "--lock-dir" : getenv(vars[2]) ?
			"GPUMUTEX_LOCK_DIR" : "the default; set GPUMUTEX_LOCK_DIR or pass --lock-dir for another",
			err);
		return 2;
	}
	if (set_preload(lib) != 0 || device_env(&cfg) != 0)
		goto nomem;

	execvp(argv[i], &argv[i]);
	rc = errno;
	fprintf(stderr, "%s: %s: %s\n", prog, argv[i], strerror(rc));
	return rc == ENOENT || rc == ENOTDIR ? 127 : 126;
nomem:
	fprintf(stderr, "%s: cannot set the environment: %s\n", prog,
		strerror(errno));
	return 2;
}
