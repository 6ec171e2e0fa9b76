/*
 * namespace.h - dlmopen outside the main link-map namespace (namespace.c).
 * Prefix gmp_: internal to the preload library.
 */
#ifndef GPUMUTEX_PRELOAD_NAMESPACE_H
#define GPUMUTEX_PRELOAD_NAMESPACE_H

/*
 * 1 when dlmopen(lmid, file, ...) needs no check and goes straight to the
 * real dlmopen: lmid is LM_ID_BASE (where this library's hooks are seen),
 * file is NULL (nothing is loaded), or gpumutex is not configured
 * (GPUMUTEX_VISIBLE_DEVICES unset). Never changes errno.
 */
int gmp_ns_passes(long lmid, const char *file);

/*
 * The checked dlmopen, for every other call: the real dlmopen made on
 * behalf of the code at `caller` (the file name resolved first as glibc
 * would for that caller: $ORIGIN, and its RPATH/RUNPATH for a name without
 * a slash), then the link-map namespace it loaded into is inspected. If
 * that namespace holds the NVIDIA driver (an object called libcuda.so*,
 * by file name or SONAME), or cannot be inspected, the handle is closed
 * and NULL returned, with one "gpumutex:" line on stderr and dlerror()
 * saying why. Otherwise the real dlmopen's result, dlerror() and errno
 * unchanged.
 */
void *gmp_ns_dlmopen(long lmid, const char *file, int mode,
		     const void *caller);

#endif
