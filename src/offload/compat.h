/*
 * compat.h - bind libgpuoffload.so's references to libdl functions to their
 * oldest symbol versions, so that a library built on a new glibc loads on
 * an old one (tools/gate.sh: glibc 2.17 or newer). Why: see
 * src/preload/compat.h; this library also calls dlsym and dladdr (which
 * libgpumutex.so exports itself and so never references), and the
 * pthread functions that moved into libc.so.6 with glibc 2.34 under a new
 * default version (pthread_once, the thread-specific keys, pthread_create,
 * pthread_join, pthread_sigmask, pthread_attr_setstacksize,
 * pthread_mutex_trylock); their old
 * versions remain as aliases there and live in libpthread.so.0 before.
 * src/offload/module.mk force-includes this into every object of the
 * library (-include), so that no file of either half can forget it.
 */
#ifndef GPUOFFLOAD_COMPAT_H
#define GPUOFFLOAD_COMPAT_H

#if defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver dladdr1,dladdr1@GLIBC_2.3.3");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
__asm__(".symver pthread_key_create,pthread_key_create@GLIBC_2.2.5");
__asm__(".symver pthread_getspecific,pthread_getspecific@GLIBC_2.2.5");
__asm__(".symver pthread_setspecific,pthread_setspecific@GLIBC_2.2.5");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
__asm__(".symver pthread_attr_setstacksize,pthread_attr_setstacksize@GLIBC_2.2.5");
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlclose,dlclose@GLIBC_2.17");
__asm__(".symver dlerror,dlerror@GLIBC_2.17");
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
__asm__(".symver dladdr,dladdr@GLIBC_2.17");
__asm__(".symver dladdr1,dladdr1@GLIBC_2.17");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.17");
__asm__(".symver pthread_key_create,pthread_key_create@GLIBC_2.17");
__asm__(".symver pthread_getspecific,pthread_getspecific@GLIBC_2.17");
__asm__(".symver pthread_setspecific,pthread_setspecific@GLIBC_2.17");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.17");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.17");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.17");
__asm__(".symver pthread_attr_setstacksize,pthread_attr_setstacksize@GLIBC_2.17");
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@GLIBC_2.17");
#endif

#endif
