/*
 * sysfile.c - the file operations of `gpumutex install/uninstall --system`
 * (src/cli/install.c): read a whole system file without following links,
 * replace one atomically with a backup, drop lines from ld.so.preload, and
 * check that a library loads before any program is made to load it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sysfile.h"

/* The whole of a file (no link followed, regular files only): 0 with
 * *text (NUL-terminated) and *st, 1 when it does not exist, -1 after a
 * message. */
int gm_sys_slurp(const char *prog, const char *path, char **text,
		 size_t *len, struct stat *st)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	ssize_t n;

	*text = NULL;
	*len = 0;
	if (fd < 0 && errno == ENOENT)
		return 1;
	if (fd < 0 || fstat(fd, st) < 0) {
		fprintf(stderr, "%s: cannot read %s: %s\n", prog, path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!S_ISREG(st->st_mode) || st->st_size > FILE_MAX) {
		fprintf(stderr, "%s: %s is not a regular file of at most %d bytes; fix or remove it first\n",
			prog, path, FILE_MAX);
		close(fd);
		return -1;
	}
	*text = malloc((size_t)st->st_size + 2);
	if (!*text) {
		close(fd);
		return -1;
	}
	while ((n = read(fd, *text + *len, (size_t)st->st_size + 1 - *len)) > 0)
		*len += (size_t)n;
	close(fd);
	(*text)[*len] = '\0';
	return 0;
}

/* Replace `path` by `len` bytes of `text`, atomically, with mode/owner
 * `mode`/0:0; the old contents (if any) go to path BACKUP_SUFFIX first.
 * 0 or -1 after a message. */
int gm_sys_replace(const char *prog, const char *path, const char *text,
		   size_t len, mode_t mode, int backup)
{
	char *tmp = NULL, *bak = NULL;
	int fd, rc = -1;

	if (asprintf(&tmp, "%s.gpumutex-tmp.%d", path, (int)getpid()) < 0 ||
	    asprintf(&bak, "%s%s", path, BACKUP_SUFFIX) < 0)
		goto out;
	if (backup) {
		/* A hard link: the old file stays whole under the backup
		 * name, and the rename below replaces only the name. */
		unlink(bak);
		if (link(path, bak) < 0 && errno != ENOENT) {
			fprintf(stderr, "%s: cannot keep a backup %s: %s\n",
				prog, bak, strerror(errno));
			goto out;
		}
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  0600);
	if (fd < 0 || write(fd, text, len) != (ssize_t)len ||
	    fchown(fd, 0, 0) < 0 || fchmod(fd, mode) < 0 || fsync(fd) < 0) {
		fprintf(stderr, "%s: cannot write %s: %s\n", prog, tmp,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		goto out;
	}
	close(fd);
	if (rename(tmp, path) < 0) {
		fprintf(stderr, "%s: cannot rename %s to %s: %s\n", prog,
			tmp, path, strerror(errno));
		unlink(tmp);
		goto out;
	}
	rc = 0;
out:
	free(tmp);
	free(bak);
	return rc;
}

int gm_sys_mkdirs(const char *path)
{
	char *p = strdup(path);

	if (!p)
		return -1;
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			if (mkdir(p, 0755) < 0 && errno != EEXIST) {
				free(p);
				return -1;
			}
			*s = '/';
		}
	free(p);
	return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* Does [line, line+n) name `lib` (blanks around it allowed)? */
static int is_line(const char *line, size_t n, const char *lib)
{
	size_t l = strlen(lib);

	while (n && (*line == ' ' || *line == '\t')) {
		line++;
		n--;
	}
	while (n && (line[n - 1] == ' ' || line[n - 1] == '\t' ||
		     line[n - 1] == '\r'))
		n--;
	return n == l && memcmp(line, lib, l) == 0;
}

/* `text` without the lines that name `lib`; *removed counts them. */
char *gm_sys_without(const char *text, size_t len, const char *lib,
		     size_t *outlen, int *removed)
{
	char *out = malloc(len + 1);
	size_t o = 0;

	*removed = 0;
	if (!out)
		return NULL;
	for (size_t i = 0; i < len;) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
		size_t whole = nl ? n + 1 : n;

		if (is_line(text + i, n, lib))
			(*removed)++;
		else {
			memcpy(out + o, text + i, whole);
			o += whole;
		}
		i += whole;
	}
	out[o] = '\0';
	*outlen = o;
	return out;
}

/* Does the library at `lib` (a path inside the root) load into a plain
 * program, silently? Runs /bin/true with it in LD_PRELOAD, chrooted into
 * the root when there is one. 0, or -1 after a message. */
int gm_sys_loads(const char *prog, const char *root, const char *lib)
{
	int pfd[2];
	char buf[512];
	ssize_t n, got = 0;
	int status;
	pid_t pid;

	if (pipe(pfd) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		char *env[] = { NULL, "PATH=/usr/bin:/bin", NULL };
		char *argv[] = { "/bin/true", NULL };
		if (asprintf(&env[0], "LD_PRELOAD=%s", lib) < 0)
			_exit(126);
		dup2(pfd[1], 2);
		dup2(pfd[1], 1);
		if (root && (chroot(root) < 0 || chdir("/") < 0))
			_exit(126);
		execve(argv[0], argv, env);
		_exit(127);
	}
	close(pfd[1]);
	while ((n = read(pfd[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0)
		got += n;
	close(pfd[0]);
	buf[got] = '\0';
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0 || got) {
		fprintf(stderr, "%s: %s does not load cleanly into /bin/true (%s%s), so it is not added to %s: %s\n",
			prog, lib, root ? "in " : "", root ? root : "",
			"/etc/ld.so.preload", got ? buf : "it failed");
		return -1;
	}
	return 0;
}

