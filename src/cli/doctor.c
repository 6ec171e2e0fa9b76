/*
 * doctor.c - `gpumutex doctor`: would a CUDA program started from this
 * shell queue? One command to run when GPUs are not shared as expected.
 *
 * It looks at what such a program would meet: the preload (ld.so.preload,
 * LD_PRELOAD), the configuration as the library resolves it (the same
 * code, src/lease/conffile.c), the lock directory as a claim opens it
 * (the same checks, without creating anything), the driver and its device
 * count, and the managed indices. It never calls cuInit (which would
 * queue, or, from a preloaded doctor, take a lease) and takes no lock, so
 * it cannot hang behind a holder. Exit status 0 only when every check
 * that decides queueing passed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "internal.h" /* gm__dir_open: the claim's own directory checks */
#include "lease.h"

enum level { OK, NOTE, PROBLEM };

struct finding {
	const char *check;
	enum level level;
	char text[1200];
};

static struct finding found[32];
static int nfound, problems;
/* GM_RESOLVE_INSTALLED when a CUDA program would get the machine-wide
 * copy (GM_INSTALL_LIB), which resolves its configuration strictly. */
static int installed;

static void say(const char *check, enum level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(const char *check, enum level level, const char *fmt, ...)
{
	va_list ap;
	struct finding *f;

	if (nfound >= (int)(sizeof found / sizeof found[0]))
		return;
	f = &found[nfound++];
	f->check = check;
	f->level = level;
	va_start(ap, fmt);
	vsnprintf(f->text, sizeof f->text, fmt, ap);
	va_end(ap);
	problems += level == PROBLEM;
}

/* ---- The preload -------------------------------------------------------- */

/* The entries of a preload list (blanks and colons separate them, as for
 * the dynamic linker) that name libgpumutex.so, into out ("" if none);
 * *missing is set if one of them does not exist. */
static int gm_entries(const char *list, char *out, size_t len, int *missing)
{
	int n = 0;
	char *copy = strdup(list ? list : ""), *save = NULL;

	out[0] = '\0';
	if (!copy)
		return 0;
	for (char *t = strtok_r(copy, " \t\n:", &save); t;
	     t = strtok_r(NULL, " \t\n:", &save)) {
		const char *base = strrchr(t, '/');
		base = base ? base + 1 : t;
		if (strcmp(base, "libgpumutex.so") != 0)
			continue;
		if (access(t, R_OK) != 0)
			*missing = 1;
		if (!strcmp(t, GM_INSTALL_LIB))
			installed = GM_RESOLVE_INSTALLED;
		snprintf(out + strlen(out), len - strlen(out), "%s%s",
			 n ? " " : "", t);
		n++;
	}
	free(copy);
	return n;
}

static int loaded_here(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[4200];
	int hit = 0;

	if (!f)
		return -1;
	while (!hit && fgets(line, sizeof line, f))
		hit = strstr(line, "/libgpumutex.so") != NULL;
	fclose(f);
	return hit;
}

static int check_preload(char *mech, size_t mlen)
{
	char sys[1024] = "", env[1024] = "", text[8192];
	int sys_missing = 0, env_missing = 0, nsys = 0, nenv, here;
	int fd = open("/etc/ld.so.preload", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = read(fd, text, sizeof text - 1);
		text[n > 0 ? n : 0] = '\0';
		close(fd);
		nsys = gm_entries(text, sys, sizeof sys, &sys_missing);
	}
	nenv = gm_entries(getenv("LD_PRELOAD"), env, sizeof env, &env_missing);
	here = loaded_here();
	snprintf(mech, mlen, "%s", nsys && nenv ? "both" : nsys ? "ld.so.preload" :
		 nenv ? "LD_PRELOAD" : "none");
	if (nsys && !sys_missing)
		say("preload", OK, "/etc/ld.so.preload preloads %s into every program (machine-wide mode)%s",
		    sys, here ? "" : ", but it is not loaded into this doctor");
	else if (nsys)
		say("preload", PROBLEM, "/etc/ld.so.preload names %s, which does not exist or cannot be read: no program gets the library (reinstall: gpumutex install --system)",
		    sys);
	if (nenv && !env_missing)
		say("preload", nsys ? NOTE : OK, "LD_PRELOAD has %s: programs of this shell get the library; children started with a reset environment (env -i, sudo, systemd) do not%s",
		    env, nsys ? "" : " (machine-wide mode covers them: gpumutex install --system)");
	else if (nenv)
		say("preload", PROBLEM, "LD_PRELOAD names %s, which does not exist or cannot be read", env);
	if ((!nsys || sys_missing) && (!nenv || env_missing)) {
		if (!nsys && !nenv)
			say("preload", PROBLEM, "the library is not preloaded: neither /etc/ld.so.preload nor LD_PRELOAD names libgpumutex.so, so CUDA programs of this shell do not queue (use gpumutex run, LD_PRELOAD, or gpumutex install --system)");
		return 0;
	}
	return 1;
}

/* ---- The configuration ----------------------------------------------- */

static int check_config(struct gm_config *cfg, struct gm_conf_info *info,
			int flags, char *err, size_t errlen, int *rc_out)
{
	char list[GM_MAX_DEVICES * 4];
	int rc = gm_config_resolve(cfg, info, flags, err, errlen);
	const char *src = info->from_file && info->from_env ? "the file and the environment" :
			  info->from_file ? "the file" :
			  info->from_env ? "the environment" : "the defaults";

	*rc_out = rc;
	if (rc < 0) {
		say("config", PROBLEM, "%s; every CUDA program fails closed (cuInit returns an error) until this is fixed", err);
		return 0;
	}
	if (info->system_present)
		say("config", info->enforce ? OK : NOTE, "%s %s (enforce = %s)%s",
		    GM_SYSTEM_CONFIG, info->enforce ? "enforces" : "gives defaults",
		    info->enforce ? "yes" : "no",
		    info->enforce ? ": the environment can narrow but not widen or turn gpumutex off" :
		    ": the environment overrides it");
	else
		say("config", NOTE, "no %s: the environment alone configures gpumutex", GM_SYSTEM_CONFIG);
	if (info->user_file)
		say("config", NOTE, "GPUMUTEX_CONFIG: settings from %s", info->file);
	if (info->notes[0])
		say("config", NOTE, "refused: %s", info->notes);
	if (rc == 1) {
		say("config", PROBLEM, "gpumutex is not configured for this shell: no visible_devices in a configuration file and no GPUMUTEX_VISIBLE_DEVICES, so CUDA programs pass through unqueued");
		return 0;
	}
	gm_format_list(list, sizeof list, cfg->devices, cfg->ndevices);
	say("config", OK, "from %s%s%s: GPU%s %s managed, %d GPU%s per job, lock directory %s, %s",
	    src, info->from_file ? " " : "", info->from_file ? info->file : "",
	    cfg->ndevices == 1 ? "" : "s", list, cfg->want,
	    cfg->want == 1 ? "" : "s", cfg->lock_dir,
	    cfg->timeout_s < 0 ? "waiting for ever" : "waiting with a time-out");
	return 1;
}

/* ---- The lock directory ------------------------------------------------ */

/* What the lock directory's owner and mode say: `gpumutex init` as root
 * leaves it root's with mode 0755; a job (gpumutex-run, a preloaded
 * program) makes it 1777, whoever runs it, root included. */
static const char *owner_note(const struct stat *st)
{
	if (st->st_uid == 0 && !(st->st_mode & 0022))
		return " (prepared by root: gpumutex init)";
	if (st->st_uid == 0)
		return "; made by a job run as root, not by `gpumutex init`: any user can still add device files to it; let root prepare it (gpumutex init)";
	return "; its owner can remove anybody's lock files: let root prepare it (gpumutex init)";
}

static int check_lockdir(const struct gm_config *cfg)
{
	struct gm__dir d;
	struct stat st;
	char err[GM_ERR_MAX];
	int rc, ok = 1;

	if (lstat(cfg->lock_dir, &st) < 0) {
		if (errno != ENOENT) {
			say("lock_dir", PROBLEM, "cannot look at %s: %s", cfg->lock_dir, strerror(errno));
			return 0;
		}
		say("lock_dir", NOTE, "%s does not exist yet: the first CUDA program makes it, as its user; on a shared machine let root make it (gpumutex init, or gpumutex install --system)",
		    cfg->lock_dir);
		return 1;
	}
	rc = gm__dir_open(cfg->lock_dir, 0, &d, err, sizeof err);
	if (rc == -ENOENT) {
		say("lock_dir", NOTE, "%s is incomplete (a subdirectory is missing): the first CUDA program completes it", cfg->lock_dir);
		return 1;
	}
	if (rc) {
		say("lock_dir", PROBLEM, "%s; CUDA programs fail closed", err);
		return 0;
	}
	for (int i = 0; i < cfg->ndevices; i++) {
		char name[16];
		snprintf(name, sizeof name, "%d", cfg->devices[i]);
		if (fstatat(d.dev, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* made by the first claim */
		if (!S_ISFIFO(st.st_mode)) {
			say("lock_dir", PROBLEM, "%s/dev/%s is not a FIFO (owned by uid %u, mode %04o): GPU %s fails closed; remove it (as its owner or root) and run gpumutex init",
			    cfg->lock_dir, name, (unsigned)st.st_uid,
			    (unsigned)(st.st_mode & 07777), name);
			ok = 0;
		}
	}
	{
		/* Stale files: tickets of processes that died waiting, and
		 * temporary names of interrupted claims. Harmless (nobody
		 * waits for them), and removed by their users' later claims. */
		DIR *q = gm__listdir(d.queue);
		struct dirent *de;
		int dead = 0, tmp = 0;

		while (q && (de = readdir(q)) != NULL) {
			uint64_t seq, mask;
			unsigned uid;
			int pid, want, fd;

			if (!strncmp(de->d_name, ".tmp", 4)) {
				tmp++;
				continue;
			}
			if (gm__ticket_parse(de->d_name, &seq, &uid, &pid, &want,
					     &mask, NULL, 0))
				continue;
			fd = gm__ticket_open(d.queue, de->d_name, uid, NULL, 0);
			if (fd < 0)
				continue;
			dead += gm__probe(fd, F_WRLCK, 0) != F_WRLCK;
			close(fd);
		}
		if (q)
			closedir(q);
		if (dead || tmp)
			say("lock_dir", NOTE, "%d stale ticket%s and %d temporary name%s in %s/queue (left by processes that died): harmless, removed by their users' later claims",
			    dead, dead == 1 ? "" : "s", tmp, tmp == 1 ? "" : "s",
			    cfg->lock_dir);
	}
	if (fstat(d.root, &st) == 0)
		say("lock_dir", ok ? (st.st_uid == 0 && !(st.st_mode & 0022) ? OK : NOTE) : PROBLEM,
		    "%s: owned by uid %u, mode %04o%s", cfg->lock_dir,
		    (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
		    owner_note(&st));
	gm__dir_close(&d);
	{
		struct gm_state s;
		if (gm_state_read(cfg->lock_dir, &s, err, sizeof err) == 0) {
			say("lock_dir", NOTE, "%d lease%s held, %d waiting",
			    s.nleases, s.nleases == 1 ? "" : "s", s.nwaiters);
			gm_state_free(&s);
		}
	}
	return ok;
}

/* ---- The driver -------------------------------------------------------- */

/* How many GPUs the driver reports, without cuInit: NVML, then the
 * kernel module's /proc entries; -1 when neither tells. */
static int device_count(const char **how)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	int n = -1;

	if (h) {
		int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
		int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
		int (*fini)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
		unsigned c;

		if (init && count && init() == 0) {
			if (count(&c) == 0) {
				n = (int)c;
				*how = "NVML";
			}
			if (fini)
				fini();
		}
		dlclose(h);
	}
	if (n < 0) {
		DIR *dir = opendir("/proc/driver/nvidia/gpus");
		struct dirent *de;
		if (dir) {
			n = 0;
			while ((de = readdir(dir)) != NULL)
				n += de->d_name[0] != '.';
			closedir(dir);
			*how = "/proc/driver/nvidia/gpus";
		}
	}
	return n;
}

static int check_driver(const struct gm_config *cfg, int configured)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	const char *how = "";
	struct link_map *lm = NULL;
	int n, ok = 1;

	if (!h) {
		say("driver", PROBLEM, "no NVIDIA driver library (libcuda.so.1) found: %s", dlerror());
		return 0;
	}
	dlinfo(h, RTLD_DI_LINKMAP, &lm);
	say("driver", OK, "driver library %s", lm && lm->l_name[0] ? lm->l_name : "libcuda.so.1");
	n = device_count(&how);
	if (n < 0) {
		say("driver", NOTE, "the number of GPUs cannot be told without cuInit (no NVML, no /proc/driver/nvidia): the managed indices are not checked");
		return 1;
	}
	say("driver", OK, "%d GPU%s (from %s)", n, n == 1 ? "" : "s", how);
	for (int i = 0; configured && i < cfg->ndevices; i++)
		if (cfg->devices[i] >= n) {
			say("devices", PROBLEM, "managed GPU %d does not exist (the driver reports %d, indices 0 to %d)",
			    cfg->devices[i], n, n - 1);
			ok = 0;
		}
	if (configured && ok)
		say("devices", OK, "every managed GPU exists");
	return ok;
}

/* CUDA_VISIBLE_DEVICES of this shell hides every GPU: a program then
 * uses none, and gpumutex lets it through without a lease. */
static int check_cvd(const struct gm_config *cfg)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	uint64_t listed = 0;
	int any = 0;

	if (!cvd)
		return 1;
	for (const char *p = cvd; *p;) {
		uint64_t v;
		const char *end;
		while (*p == ' ' || *p == ',')
			p++;
		if (!strncmp(p, "-1", 2))
			break;
		if (gm_scan_uint(p, 10, GM_MAX_DEVICES - 1, &v, &end) != 0) {
			say("devices", PROBLEM, "CUDA_VISIBLE_DEVICES=\"%s\" is not a list of GPU indices: CUDA programs of this shell fail closed", cvd);
			return 0;
		}
		listed |= UINT64_C(1) << v;
		p = end;
	}
	for (int i = 0; i < cfg->ndevices; i++)
		any |= (listed >> cfg->devices[i]) & 1;
	if (!any) {
		say("devices", PROBLEM, "CUDA_VISIBLE_DEVICES=\"%s\" leaves none of the managed GPUs: CUDA programs of this shell %s",
		    cvd, listed ? "fail closed" : "use no GPU and are not queued");
		return 0;
	}
	say("devices", NOTE, "CUDA_VISIBLE_DEVICES=\"%s\" narrows the candidates", cvd);
	return 1;
}

int gm_doctor_main(int argc, char **argv)
{
	static struct gm_config cfg;
	struct gm_conf_info info;
	char err[GM_ERR_MAX], mech[32], list[GM_MAX_DEVICES * 4] = "";
	int json = 0, rc = 1, configured;
	int pre, conf, dir = 1, drv, cvd = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: gpumutex doctor [--json]\n"
			       "\n"
			       "Say whether a CUDA program started from this shell would queue:\n"
			       "the preload, the configuration and where it comes from, enforce\n"
			       "mode, the lock directory, the driver and its GPUs. Exit status 0\n"
			       "only when it would be queued. Calls no cuInit, takes no lock.\n");
			return 0;
		} else {
			return gm_cli_usage_error("unknown argument '%s'", argv[i]);
		}
	}
	pre = check_preload(mech, sizeof mech);
	conf = check_config(&cfg, &info, installed, err, sizeof err, &rc);
	configured = rc == 0;
	if (configured) {
		dir = check_lockdir(&cfg);
		cvd = check_cvd(&cfg);
		gm_format_list(list, sizeof list, cfg.devices, cfg.ndevices);
	}
	drv = check_driver(&cfg, configured);
	rc = pre && conf && dir && drv && cvd ? 0 : 1;
	if (json) {
		printf("{\"schema\": 1, \"queued\": %s, \"preload\": ", rc ? "false" : "true");
		gm_json_str(stdout, mech);
		printf(", \"enforce\": %s, \"config_file\": ", info.enforce ? "true" : "false");
		gm_json_str(stdout, info.file);
		printf(", \"config_source\": ");
		gm_json_str(stdout, !configured ? "" : info.from_file && info.from_env ? "both" :
			 info.from_file ? "file" : "environment");
		printf(", \"visible_devices\": [%s], \"num_devices\": %d, \"lock_dir\": ",
		       list, configured ? cfg.want : 0);
		gm_json_str(stdout, configured ? cfg.lock_dir : "");
		printf(", \"findings\": [");
		for (int i = 0; i < nfound; i++) {
			printf("%s{\"check\": ", i ? ", " : "");
			gm_json_str(stdout, found[i].check);
			printf(", \"level\": ");
			gm_json_str(stdout, found[i].level == OK ? "ok" :
				 found[i].level == NOTE ? "note" : "problem");
			printf(", \"text\": ");
			gm_json_str(stdout, found[i].text);
			printf("}");
		}
		printf("]}\n");
		return rc;
	}
	for (int i = 0; i < nfound; i++)
		printf("%-7s %-8s %s\n", found[i].level == OK ? "ok" :
		       found[i].level == NOTE ? "note" : "PROBLEM",
		       found[i].check, found[i].text);
	printf("%s\n", rc ? "=> a CUDA program started from this shell would NOT be queued (see PROBLEM above)" :
	       "=> a CUDA program started from this shell would be queued");
	return rc;
}
