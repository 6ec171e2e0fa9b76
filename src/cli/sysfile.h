/*
 * sysfile.h - file operations of the machine-wide install (sysfile.c).
 * Each prints its own message, prefixed with `prog`, when it fails.
 */
#ifndef GPUMUTEX_SYSFILE_H
#define GPUMUTEX_SYSFILE_H

#include <stddef.h>
#include <sys/stat.h>

#define BACKUP_SUFFIX ".gpumutex-backup"
#define FILE_MAX (1 << 20) /* the largest system file handled */

/* The whole of `path` (no link followed, a regular file of at most
 * FILE_MAX bytes): 0 with *text (NUL-terminated, malloc'd), *len and *st;
 * 1 when it does not exist; -1 after a message. */
int gm_sys_slurp(const char *prog, const char *path, char **text,
		 size_t *len, struct stat *st);

/* Replace `path` by `len` bytes of `text` atomically (a temporary name in
 * the same directory, fsync, rename), owned by root with `mode`; with
 * `backup`, the old file is kept as path BACKUP_SUFFIX first. 0 or -1. */
int gm_sys_replace(const char *prog, const char *path, const char *text,
		   size_t len, mode_t mode, int backup);

/* mkdir -p with mode 0755. 0 or -1 (errno set). */
int gm_sys_mkdirs(const char *path);

/* `text` without the lines that name `lib` (blanks around it allowed);
 * *removed counts them; every other byte kept. NULL when out of memory. */
char *gm_sys_without(const char *text, size_t len, const char *lib,
		     size_t *outlen, int *removed);

/* Does the library `lib` load silently into /bin/true (chrooted into
 * `root` when not NULL)? 0, or -1 after a message. */
int gm_sys_loads(const char *prog, const char *root, const char *lib);

#endif
