/*
 * gtload.h - finding and checking CUPTI at run time (gtload.c), for the
 * GPU-time collector (gputime.c) and the CUPTI hooks (hooks.c).
 */
#ifndef GPUMUTEX_PRELOAD_GTLOAD_H
#define GPUMUTEX_PRELOAD_GTLOAD_H

#include <stddef.h>

#include "cuptiapi.h"

/* Load CUPTI (gtload.c says where from), resolve *api and check its
 * version: 0, or -1 with `why` set to a clause for the decline line. */
int gmp_gt_load(struct gmp_cupti *api, char *why, size_t len);

/* A libcupti already loaded in the process (dlopen'ed again with
 * RTLD_NOLOAD, so the caller dlcloses it), or NULL. */
void *gmp_gt_loaded_handle(void);

/* The program's CUPTI function `name`, as a reference from the object
 * that contains `caller` binds it without this library: the global
 * scope after this library (*global = 1: the same for every caller),
 * else that object's own lookup scope, else any loaded object that has
 * it (CUPTI-named ones first); never ours. NULL when there is none.
 * Microseconds. */
void *gmp_gt_find_real(const char *name, const void *caller, int *global);

#endif
