/*
 * cli_check.c - what `gpu-offload run` checks before it starts the
 * program (cli.h): that the backend it names loads, and that the trace
 * directory can be written. Both would otherwise fail inside the
 * program, as one warning line among its own output, with the program's
 * exit status: a newcomer's typo looked like a run without offloading.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "cli.h"
#include "compat.h"     /* dlopen & co. at versions old glibc has */

/* In the child: load, find the entry point, ask for our ABI. Writes the
 * reason to fd on failure; exits 0 or 1 (never returns). */
static void gpo__try_backend(const char *path, int fd)
{
	char why[PATH_MAX + 256];
	const struct gpo_backend *be;
	gpo_backend_entry_fn entry;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		const char *e = dlerror();
		snprintf(why, sizeof why, "%s", e ? e : "cannot be loaded");
	} else if (!(entry = (gpo_backend_entry_fn)dlsym(h, GPO_BACKEND_ENTRY))) {
		snprintf(why, sizeof why, "not a GPU backend (no %s)",
			 GPO_BACKEND_ENTRY);
	} else if (!(be = entry(GPO_BACKEND_ABI)) || be->abi != GPO_BACKEND_ABI) {
		snprintf(why, sizeof why,
			 "does not implement the backend ABI version %u (it has %u)",
			 GPO_BACKEND_ABI, be ? be->abi : 0);
	} else {
		_exit(0);
	}
	if (write(fd, why, strlen(why)) < 0) {
		/* the parent then says "cannot be loaded" */
	}
	_exit(1);
}

int gpo_cli_backend_ok(const char *opt, const char *path)
{
	char why[PATH_MAX + 256];
	int p[2], st = 0;
	ssize_t n;
	pid_t pid;

	if (access(path, R_OK) != 0) {
		fprintf(stderr, GPO_PROG ": %s %s: %s\n", opt, path, strerror(errno));
		return -1;
	}
	/* In a child: the backend's constructors and libraries do not stay
	 * in this process, whose environment the program inherits. */
	if (pipe(p) != 0 || (pid = fork()) < 0) {
		fprintf(stderr, GPO_PROG ": cannot check %s %s: %s\n", opt, path,
			strerror(errno));
		return -1;
	}
	if (pid == 0) {
		close(p[0]);
		gpo__try_backend(path, p[1]);
	}
	close(p[1]);
	n = read(p[0], why, sizeof why - 1);
	close(p[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	why[n > 0 ? n : 0] = '\0';
	fprintf(stderr, GPO_PROG ": %s %s cannot be loaded: %s\n", opt, path,
		why[0] ? why : "the check died");
	return -1;
}

int gpo_cli_trace_ok(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		fprintf(stderr, GPO_PROG ": --trace %s: cannot make the directory: %s\n",
			dir, strerror(errno));
		return -1;
	}
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, GPO_PROG ": --trace %s: not a directory\n", dir);
		return -1;
	}
	if (access(dir, W_OK | X_OK) != 0) {
		fprintf(stderr, GPO_PROG ": --trace %s: not writable: %s\n", dir,
			strerror(errno));
		return -1;
	}
	return 0;
}
