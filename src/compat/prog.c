/*
 * prog.c - what a shipped program needs, besides compat.h, to run on glibc
 * 2.17 when built on a newer one (tools/gate.sh --program checks the
 * result). Linked into every shipped program with
 *   -Wl,--wrap=__libc_start_main,--wrap=stat,--wrap=lstat,--wrap=fstat,
 *   --wrap=fstatat
 * (GM_PROG_LDFLAGS in the Makefile), so that the references the C start-up
 * file and the programs' own objects make to those names come here.
 *
 * x86_64 only; elsewhere the file is empty and the programs carry the build
 * host's floor (the gate says so).
 */
#if defined(__x86_64__) && defined(__linux__)
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Since glibc 2.34 the start-up file (Scrt1.o) calls
 * __libc_start_main@GLIBC_2.34, passing no init function: the new glibc
 * runs the program's constructors itself. The old version of the same
 * function is in every glibc; given an init function (as an old start-up
 * file gave one), every glibc calls it instead of running the constructors
 * itself, so the program's constructors run exactly once everywhere. */
typedef int (*gm_main_fn)(int, char **, char **);
typedef void (*gm_init_fn)(int, char **, char **);

__asm__(".symver gm_old_libc_start_main,__libc_start_main@GLIBC_2.2.5");
int gm_old_libc_start_main(gm_main_fn main, int argc, char **argv,
			   gm_init_fn init, void (*fini)(void),
			   void (*rtld_fini)(void), void *stack_end);
int __wrap___libc_start_main(gm_main_fn main, int argc, char **argv,
			     gm_init_fn init, void (*fini)(void),
			     void (*rtld_fini)(void), void *stack_end);

/* The linker's bounds of the program's constructor arrays, and the
 * crti.o/crtn.o _init (the order of the old glibc's __libc_csu_init). */
extern gm_init_fn __preinit_array_start[] __attribute__((visibility("hidden")));
extern gm_init_fn __preinit_array_end[] __attribute__((visibility("hidden")));
extern gm_init_fn __init_array_start[] __attribute__((visibility("hidden")));
extern gm_init_fn __init_array_end[] __attribute__((visibility("hidden")));
extern void _init(void);

/* The number of entries between two linker-defined bounds (two symbols,
 * one array: counted by address, as the linker laid them out). */
static size_t gm_entries(gm_init_fn *start, gm_init_fn *end)
{
	return ((uintptr_t)end - (uintptr_t)start) / sizeof(gm_init_fn);
}

static void gm_run_init(int argc, char **argv, char **envp)
{
	size_t i, n;

	n = gm_entries(__preinit_array_start, __preinit_array_end);
	for (i = 0; i < n; i++)
		__preinit_array_start[i](argc, argv, envp);
	_init();
	n = gm_entries(__init_array_start, __init_array_end);
	for (i = 0; i < n; i++)
		__init_array_start[i](argc, argv, envp);
}

/* Contract: called once, by the start-up file, with its arguments; returns
 * never (the old function calls exit with main's status). */
int __wrap___libc_start_main(gm_main_fn main, int argc, char **argv,
			     gm_init_fn init, void (*fini)(void),
			     void (*rtld_fini)(void), void *stack_end)
{
	return gm_old_libc_start_main(main, argc, argv,
				      init ? init : gm_run_init, fini,
				      rtld_fini, stack_end);
}

/* stat and friends became glibc functions (GLIBC_2.33) only recently;
 * before, they were inline wrappers of __xstat and friends. The system
 * call is the same everywhere and fills the same struct stat on x86_64
 * (as gm__fstatat in src/lease/prim.c). Contract: the functions' own. */
int __wrap_fstatat(int dirfd, const char *path, struct stat *st, int flags);
int __wrap_stat(const char *path, struct stat *st);
int __wrap_lstat(const char *path, struct stat *st);
int __wrap_fstat(int fd, struct stat *st);

int __wrap_fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	return (int)syscall(SYS_newfstatat, dirfd, path, st, flags);
}

int __wrap_stat(const char *path, struct stat *st)
{
	return __wrap_fstatat(AT_FDCWD, path, st, 0);
}

int __wrap_lstat(const char *path, struct stat *st)
{
	return __wrap_fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}

int __wrap_fstat(int fd, struct stat *st)
{
	return __wrap_fstatat(fd, "", st, AT_EMPTY_PATH);
}
#else
/* ISO C forbids an empty translation unit. */
typedef int gm_prog_compat_unused;
#endif
