/*
 * install.c - `gpumutex install --system` and `gpumutex uninstall --system`:
 * the machine-wide mode (docs/deploy.md).
 *
 * install: copies the library to GM_INSTALL_LIB, writes or updates
 * /etc/gpumutex.conf from the flags, prepares the lock directory as
 * `gpumutex init` does, checks that the copied library loads into a
 * program, and only then puts it first in /etc/ld.so.preload. That order
 * matters: a line in ld.so.preload naming a missing or broken library
 * breaks, or clutters the stderr of, every program on the machine.
 * uninstall: takes the line out again (the file is otherwise byte for byte
 * what it was), then removes the library. The configuration file stays.
 *
 * Every file is replaced atomically (written under a temporary name in the
 * same directory, synced, renamed), with the previous contents kept in a
 * backup next to it. --root DIR (for the tests, not documented in --help)
 * does everything inside DIR as if it were /.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "lease.h"
#include "sysfile.h"

#define PRELOAD_FILE "/etc/ld.so.preload"

struct opts {
	const char *prog, *root, *lib;
	const char *val[GM_CONF_NKEYS]; /* from the flags; NULL: keep */
	int dry;
};

static char *rooted(const struct opts *o, const char *path)
{
	char *p = NULL;

	if (asprintf(&p, "%s%s", o->root ? o->root : "", path) < 0) {
		fprintf(stderr, "%s: out of memory\n", o->prog);
		exit(1);
	}
	return p;
}

/* ---- The configuration file --------------------------------------------- */

/* The configuration file's new text: `old` (may be NULL) with each key
 * that a flag gives set on its own line (in place, or appended). */
static char *conf_text(const struct opts *o, const char *old, size_t oldlen,
		       const struct gm_conf *c)
{
	size_t cap = oldlen + 64 * 1024, len = 0;
	char *out = malloc(cap);
	int done[GM_CONF_NKEYS] = { 0 }, lineno = 0;

	if (!out)
		return NULL;
	if (!old)
		len = (size_t)snprintf(out, cap,
				       "# gpumutex machine-wide configuration (docs/deploy.md).\n"
				       "# Written by gpumutex install --system; edit with care: a file\n"
				       "# that does not parse makes every CUDA program fail closed.\n");
	for (size_t i = 0; old && i < oldlen;) {
		const char *nl = memchr(old + i, '\n', oldlen - i);
		size_t n = nl ? (size_t)(nl - (old + i)) : oldlen - i;
		int k, hit = -1;

		lineno++;
		for (k = 0; k < GM_CONF_NKEYS; k++)
			if (o->val[k] && c->line[k] == lineno)
				hit = k;
		if (hit >= 0) {
			len += (size_t)snprintf(out + len, cap - len, "%s = %s\n",
						gm_conf_key_name(hit), o->val[hit]);
			done[hit] = 1;
		} else {
			memcpy(out + len, old + i, n);
			len += n;
			out[len++] = '\n';
		}
		i += nl ? n + 1 : n;
	}
	for (int k = 0; k < GM_CONF_NKEYS; k++)
		if (o->val[k] && !done[k])
			len += (size_t)snprintf(out + len, cap - len, "%s = %s\n",
						gm_conf_key_name(k), o->val[k]);
	out[len] = '\0';
	return out;
}

/* ---- The commands -------------------------------------------------------- */

static void usage(FILE *f, int install)
{
	if (install)
		fprintf(f,
			"usage: gpumutex install --system [OPTIONS]\n"
			"\n"
			"Make gpumutex binding on this machine (root only): copy the library\n"
			"to %s, write or update %s from the\n"
			"options below, prepare the lock directory (as gpumutex init), and put\n"
			"the library first in %s. Running it again with the same\n"
			"options changes nothing. docs/deploy.md has the details.\n"
			"\n"
			"  --visible-devices LIST  the managed GPUs, such as 0,1,2,3 (required\n"
			"                          unless the file already has them)\n"
			"  --num-devices N         GPUs one job takes (default 1)\n"
			"  --lock-dir DIR          the lock directory (default %s)\n"
			"  --timeout SECONDS       longest wait (default: for ever)\n"
			"  --quiet, --quiet=1|0    no waiting line (1), or the line (0; the\n"
			"                          default), as `gpumutex run --quiet`\n"
			"  --gpu-time yes|no       measure each process's GPU time per lease\n"
			"                          (gpu_time; docs/gputime.md)\n"
			"  --enforce yes|no        binding (default yes): the environment may\n"
			"                          narrow but not widen or turn gpumutex off\n"
			"  --lib PATH              the library to install (default: the\n"
			"                          libgpumutex.so next to this program)\n"
			"  --dry-run               say what would change, change nothing\n",
			GM_INSTALL_LIB, GM_SYSTEM_CONFIG, PRELOAD_FILE,
			GM_DEFAULT_LOCK_DIR);
	else
		fprintf(f,
			"usage: gpumutex uninstall --system [--dry-run]\n"
			"\n"
			"Take the library out of %s (every other byte of\n"
			"the file stays as it is; a backup is kept as %s%s) and\n"
			"remove %s. %s and the lock directory\n"
			"stay; remove them by hand if wanted.\n",
			PRELOAD_FILE, PRELOAD_FILE, BACKUP_SUFFIX, GM_INSTALL_LIB,
			GM_SYSTEM_CONFIG);
}

static const char *const flag_names[GM_CONF_NKEYS] = {
	[GM_CONF_VISIBLE_DEVICES] = "--visible-devices",
	[GM_CONF_NUM_DEVICES] = "--num-devices",
	[GM_CONF_LOCK_DIR] = "--lock-dir",
	[GM_CONF_TIMEOUT] = "--timeout",
	[GM_CONF_QUIET] = "--quiet",
	[GM_CONF_RECHECK_MS] = "--recheck-ms",
	[GM_CONF_ENFORCE] = "--enforce",
	[GM_CONF_IDLE_SUSPEND_MS] = "--idle-suspend-ms",
	[GM_CONF_GPU_TIME] = "--gpu-time",
};

/* argv -> o; 0, or the exit status of a usage error. */
static int parse_args(int argc, char **argv, struct opts *o, int install)
{
	int system = 0;

	for (int i = 1; i < argc; i++) {
		const char *v;
		int k, hit = 0;

		if (!strcmp(argv[i], "--system")) {
			system = 1;
			continue;
		}
		if (!strcmp(argv[i], "--dry-run")) {
			o->dry = 1;
			continue;
		}
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout, install);
			exit(0);
		}
		/* As `gpumutex run` takes it: alone, or =1|0 (never a separate
		 * value, which would swallow the next flag). */
		if (install && !strcmp(argv[i], "--quiet")) {
			o->val[GM_CONF_QUIET] = "1";
			continue;
		}
		if (install && !strncmp(argv[i], "--quiet=", 8)) {
			char err[GM_ERR_MAX];
			int q;
			if (gm_parse_quiet("--quiet", argv[i] + 8, &q, err, sizeof err))
				return gm_cli_usage_error("%s", err);
			o->val[GM_CONF_QUIET] = argv[i] + 8;
			continue;
		}
		if ((v = gm_cli_opt(argc, argv, &i, "--root")) != NULL) {
			o->root = v;
			continue;
		}
		if (install && (v = gm_cli_opt(argc, argv, &i, "--lib")) != NULL) {
			o->lib = v;
			continue;
		}
		for (k = 0; install && k < GM_CONF_NKEYS; k++)
			if (k != GM_CONF_QUIET && (v = gm_cli_opt(argc, argv, &i, flag_names[k])) != NULL) {
				o->val[k] = v;
				hit = 1;
				break;
			}
		if (hit)
			continue;
		return gm_cli_usage_error("unknown argument '%s'", argv[i]);
	}
	if (!system) {
		fprintf(stderr, "%s: only --system is supported (machine-wide mode, for root); for one user or one shell, use LD_PRELOAD or gpumutex run (docs/deploy.md)\n",
			o->prog);
		return 2;
	}
	if (o->root && o->root[0] != '/') {
		fprintf(stderr, "%s: --root must be an absolute path\n", o->prog);
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "%s: --system changes %s and %s, which only root can do; run it as root (sudo)\n",
			o->prog, PRELOAD_FILE, GM_SYSTEM_CONFIG);
		return 1;
	}
	return 0;
}

/* The library to copy: --lib, else libgpumutex.so beside this program
 * (build/ of a source tree), else ../lib/gpumutex/libgpumutex.so. */
static char *find_lib(const struct opts *o)
{
	char self[PATH_MAX], *p = NULL;
	ssize_t n;

	if (o->lib)
		return strdup(o->lib);
	n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return NULL;
	self[n] = '\0';
	dirname(self);
	if (asprintf(&p, "%s/libgpumutex.so", self) < 0)
		return NULL;
	if (access(p, R_OK) == 0)
		return p;
	free(p);
	if (asprintf(&p, "%s/../lib/gpumutex/libgpumutex.so", self) < 0)
		return NULL;
	return p;
}

static int copy_lib(const struct opts *o, const char *from, const char *to)
{
	char *text, *dir = strdup(to);
	size_t len;
	struct stat st;
	int rc;

	if (!dir)
		return -1;
	rc = gm_sys_slurp(o->prog, from, &text, &len, &st);
	if (rc == 1)
		fprintf(stderr, "%s: no library at %s; build it (make) or pass --lib PATH\n",
			o->prog, from);
	if (rc == 0 && gm_sys_mkdirs(dirname(dir)) < 0) {
		fprintf(stderr, "%s: cannot make the directory of %s: %s\n",
			o->prog, to, strerror(errno));
		rc = -1;
	}
	/* Renamed into place, never written in place: running programs
	 * map the old file, and rewriting it would crash them. */
	if (rc == 0)
		rc = gm_sys_replace(o->prog, to, text, len, 0644, 0);
	free(text);
	free(dir);
	return rc ? -1 : 0;
}

int gm_install_main(int argc, char **argv)
{
	struct opts o = { .prog = "gpumutex install" };
	char *conf_path, *pre_path, *lib_to, *from, *old = NULL, *copy = NULL;
	char *text = NULL, *pre = NULL, err[GM_ERR_MAX];
	size_t oldlen = 0, prelen = 0;
	struct stat st;
	struct gm_conf c, nc;
	struct gm_config cfg;
	int rc, status = 1;

	rc = parse_args(argc, argv, &o, 1);
	if (rc)
		return rc;
	memset(&c, 0, sizeof c);
	memset(&nc, 0, sizeof nc);
	conf_path = rooted(&o, GM_SYSTEM_CONFIG);
	pre_path = rooted(&o, PRELOAD_FILE);
	lib_to = rooted(&o, GM_INSTALL_LIB);
	from = find_lib(&o);
	if (!from)
		goto out;

	/* 1. The configuration: the old file (if any) must parse, so that
	 * nothing of an administrator's is lost by accident. */
	rc = gm_sys_slurp(o.prog, conf_path, &old, &oldlen, &st);
	if (rc < 0)
		goto out;
	if (rc == 0) {
		copy = strdup(old);
		if (!copy || gm_conf_parse(conf_path, copy, oldlen, &c, err,
					   sizeof err)) {
			fprintf(stderr, "%s: %s; fix or remove it first\n",
				o.prog, err);
			goto out;
		}
	}
	if (!c.val[GM_CONF_VISIBLE_DEVICES] && !o.val[GM_CONF_VISIBLE_DEVICES]) {
		fprintf(stderr, "%s: no GPUs given: pass --visible-devices LIST such as \"0,1\"\n",
			o.prog);
		status = 2;
		goto out;
	}
	if (!c.val[GM_CONF_ENFORCE] && !o.val[GM_CONF_ENFORCE])
		o.val[GM_CONF_ENFORCE] = "yes";
	text = conf_text(&o, old, oldlen, &c);
	free(copy);
	copy = text ? strdup(text) : NULL;
	if (!copy)
		goto out;
	if (gm_conf_parse("the new configuration", copy, strlen(copy), &nc,
			  err, sizeof err)) {
		/* err says which key; name the flag too */
		fprintf(stderr, "%s: %s (from the flags)\n", o.prog, err);
		status = 2;
		goto out;
	}
	/* What the library will resolve: the same code, on the new text. */
	memset(&cfg, 0, sizeof cfg);
	cfg.want = 1;
	if (gm_parse_visible("visible_devices", nc.val[GM_CONF_VISIBLE_DEVICES],
			     cfg.devices, &cfg.ndevices, err, sizeof err) ||
	    (nc.val[GM_CONF_NUM_DEVICES] &&
	     gm_parse_want("num_devices", nc.val[GM_CONF_NUM_DEVICES],
			   cfg.ndevices, &cfg.want, err, sizeof err))) {
		fprintf(stderr, "%s: %s\n", o.prog, err);
		status = 2;
		goto out;
	}
	snprintf(cfg.lock_dir, sizeof cfg.lock_dir, "%s%s",
		 o.root ? o.root : "",
		 nc.val[GM_CONF_LOCK_DIR] ? nc.val[GM_CONF_LOCK_DIR] :
		 GM_DEFAULT_LOCK_DIR);

	rc = gm_sys_slurp(o.prog, pre_path, &pre, &prelen, &st);
	if (rc < 0)
		goto out;
	{
		size_t restlen;
		int present;
		char *rest = gm_sys_without(pre ? pre : "", prelen, GM_INSTALL_LIB,
				     &restlen, &present);
		int conf_same = old && !strcmp(old, text);
		char *newpre = NULL;

		if (!rest)
			goto out;
		if (o.dry) {
			printf("would copy %s to %s\n", from, lib_to);
			if (conf_same)
				printf("%s: unchanged\n", conf_path);
			else
				printf("would write %s:\n%s", conf_path, text);
			printf("would prepare the lock directory %s for GPUs %s (as gpumutex init)\n",
			       cfg.lock_dir, nc.val[GM_CONF_VISIBLE_DEVICES]);
			if (present)
				printf("%s: unchanged (already names %s)\n",
				       pre_path, GM_INSTALL_LIB);
			else
				printf("would add the line %s at the top of %s%s\n",
				       GM_INSTALL_LIB, pre_path,
				       pre ? " (every other line kept, in order)" :
				       " (a new file)");
			free(rest);
			status = 0;
			goto out;
		}
		free(rest);
		if (copy_lib(&o, from, lib_to))
			goto out;
		printf("gpumutex install: %s installed\n", lib_to);
		if (!conf_same) {
			if (gm_sys_replace(o.prog, conf_path, text, strlen(text), 0644,
				    old != NULL))
				goto out;
			printf("gpumutex install: %s written%s\n", conf_path,
			       old ? " (the old one kept as " BACKUP_SUFFIX ")" : "");
		}
		if (gm_lockdir_prepare(&cfg, err, sizeof err) ||
		    gm_lockdir_secure(&cfg, err, sizeof err) ||
		    gm_lockdir_declare(&cfg, err, sizeof err)) {
			fprintf(stderr, "%s: %s\n", o.prog, err);
			goto out;
		}
		printf("gpumutex install: lock directory %s ready for GPUs %s\n",
		       cfg.lock_dir, nc.val[GM_CONF_VISIBLE_DEVICES]);
		if (present) {
			printf("gpumutex install: %s already names the library\n",
			       pre_path);
			status = 0;
			goto out;
		}
		if (gm_sys_loads(o.prog, o.root, GM_INSTALL_LIB))
			goto out;
		/* First: ahead of other preloaded libraries, whose own
		 * interposers would otherwise see the driver first. */
		if (asprintf(&newpre, "%s\n%s", GM_INSTALL_LIB,
			     pre ? pre : "") < 0)
			goto out;
		rc = gm_sys_replace(o.prog, pre_path, newpre, strlen(newpre),
			     pre ? st.st_mode & 07777 : 0644, pre != NULL);
		free(newpre);
		if (rc)
			goto out;
		printf("gpumutex install: %s now preloads %s into every program\n",
		       pre_path, GM_INSTALL_LIB);
		status = 0;
	}
out:
	gm_conf_free(&c);
	gm_conf_free(&nc);
	free(conf_path);
	free(pre_path);
	free(lib_to);
	free(from);
	free(old);
	free(copy);
	free(text);
	free(pre);
	return status;
}

int gm_uninstall_main(int argc, char **argv)
{
	struct opts o = { .prog = "gpumutex uninstall" };
	char *pre_path, *lib_path, *pre = NULL, *rest = NULL;
	size_t prelen = 0, restlen = 0;
	struct stat st;
	int rc, removed = 0, status = 1;

	rc = parse_args(argc, argv, &o, 0);
	if (rc)
		return rc;
	pre_path = rooted(&o, PRELOAD_FILE);
	lib_path = rooted(&o, GM_INSTALL_LIB);
	rc = gm_sys_slurp(o.prog, pre_path, &pre, &prelen, &st);
	if (rc < 0)
		goto out;
	if (pre)
		rest = gm_sys_without(pre, prelen, GM_INSTALL_LIB, &restlen, &removed);
	if (o.dry) {
		if (removed)
			printf("would remove the line %s from %s%s\n",
			       GM_INSTALL_LIB, pre_path,
			       restlen ? "" : " (then empty: removed)");
		else
			printf("%s: unchanged (does not name %s)\n", pre_path,
			       GM_INSTALL_LIB);
		if (access(lib_path, F_OK) == 0)
			printf("would remove %s\n", lib_path);
		status = 0;
		goto out;
	}
	if (removed) {
		/* Nothing left but what install added to a missing file:
		 * no file, as before (an empty file means the same to the
		 * dynamic linker). */
		if (restlen == 0) {
			char *bak = NULL;
			if (asprintf(&bak, "%s%s", pre_path, BACKUP_SUFFIX) < 0)
				goto out;
			unlink(bak);
			rc = link(pre_path, bak) < 0 || unlink(pre_path) < 0;
			free(bak);
			if (rc) {
				fprintf(stderr, "%s: cannot remove %s: %s\n",
					o.prog, pre_path, strerror(errno));
				goto out;
			}
		} else if (gm_sys_replace(o.prog, pre_path, rest, restlen,
				   st.st_mode & 07777, 1)) {
			goto out;
		}
		printf("gpumutex uninstall: %s no longer preloads %s (backup: %s%s)\n",
		       pre_path, GM_INSTALL_LIB, pre_path, BACKUP_SUFFIX);
	} else {
		printf("gpumutex uninstall: %s does not name %s\n", pre_path,
		       GM_INSTALL_LIB);
	}
	/* After the line is gone: running programs keep their mapping. */
	if (unlink(lib_path) == 0)
		printf("gpumutex uninstall: %s removed\n", lib_path);
	else if (errno != ENOENT) {
		fprintf(stderr, "%s: cannot remove %s: %s\n", o.prog, lib_path,
			strerror(errno));
		goto out;
	}
	status = 0;
out:
	free(pre_path);
	free(lib_path);
	free(pre);
	free(rest);
	return status;
}
