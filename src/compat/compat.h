/*
 * compat.h - bind the shipped programs' (gpumutex, gpumutex-run,
 * gpu-offload, gpu-offload-calib) references to libdl and libpthread
 * functions to their oldest symbol versions, so that a program built on a
 * new glibc runs on glibc 2.17 (tools/gate.sh --program). The reasons are
 * the libraries' (src/preload/compat.h, src/offload/compat.h): since glibc
 * 2.34 these functions live in libc.so.6 under a new default version; the
 * old versions remain there as aliases, and on an older glibc they are in
 * libdl.so.2 and libpthread.so.0, which the programs' link keeps NEEDED.
 *
 * The Makefile force-includes this (-include) into every object of a
 * program, before the file's own feature macros: so it declares nothing
 * and includes no header, it only names symbol versions. The rest of the
 * programs' compatibility (the start-up function, stat & co.) is link-time:
 * src/compat/prog.c.
 */
#ifndef GPUMUTEX_COMPAT_H
#define GPUMUTEX_COMPAT_H

#if defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver dlinfo,dlinfo@GLIBC_2.3.3");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
#endif

#endif
