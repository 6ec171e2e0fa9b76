/*
 * compat.h - bind this library's references to libdl functions to their
 * oldest symbol versions, so that a libgpumutex.so built on a new glibc
 * still loads on an old one (tools/gate.sh: glibc 2.17 or newer).
 *
 * Since glibc 2.34, dlopen & co. live in libc.so.6 under a new default
 * version (dlopen@@GLIBC_2.34); a library linked there would refuse to load
 * on an older glibc ("version GLIBC_2.34 not found"). The old versions are
 * still in libc.so.6 as aliases of the same functions, and on an older
 * glibc they are found in libdl.so.2, which the build therefore keeps in
 * DT_NEEDED (it is an empty stub on new glibc; the build names it
 * -l:libdl.so.2 because -ldl finds an empty libdl.a there).
 * Include this first, in every file that calls a dl* function.
 */
#ifndef GPUMUTEX_PRELOAD_COMPAT_H
#define GPUMUTEX_PRELOAD_COMPAT_H

#if defined(__GLIBC__) || defined(__linux__)
#if defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dladdr1,dladdr1@GLIBC_2.3.3");
__asm__(".symver dlinfo,dlinfo@GLIBC_2.3.3");
#elif defined(__aarch64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlclose,dlclose@GLIBC_2.17");
__asm__(".symver dlerror,dlerror@GLIBC_2.17");
__asm__(".symver dladdr1,dladdr1@GLIBC_2.17");
__asm__(".symver dlinfo,dlinfo@GLIBC_2.17");
#endif
#endif

#endif
