/*
 * wrap.h - the driver entry points' wrappers: what the generated tables
 * (tools/gen-wrappers.sh, from driver-names.txt and driver-policy.txt)
 * and wrap.c share. Prefix gmp_: internal to the preload library.
 *
 * Every driver function that can touch a device is reached through a
 * wrapper: "lease held (or not needed)? then tail-jump to the real
 * function, else take the lease first". Pure queries are handed out
 * unwrapped. See docs/preload.md, "When the lease is taken".
 */
#ifndef GPUMUTEX_PRELOAD_WRAP_H
#define GPUMUTEX_PRELOAD_WRAP_H

#include "resolve.h"

/* How the library treats one driver function (driver-policy.txt). */
enum gmp_wclass {
	GMP_W_WORK,     /* takes the lease, then a tail jump */
	GMP_W_QUERY,    /* handed out unwrapped */
	GMP_W_OWN,      /* cuInit, cuGetProcAddress*: hooks.c */
	GMP_W_CTX_NEW,  /* creates a context: counted */
	GMP_W_PCTX_NEW, /* retains a primary context */
	GMP_W_CTX_DEL,  /* destroys a context: counted */
	GMP_W_PCTX_DEL, /* releases or resets a primary context */
	GMP_W_ALLOC,    /* allocates device memory: retried after an
			 * exiting holder is gone (exit.c) */
};

/* What gmp_wrap_leave returns to the assembly for "call the real
 * function again with the same arguments" (no CUresult is negative). */
#define GMP_WRAP_AGAIN (-1)

/* Wrappers for driver functions the table does not name. */
#define GMP_SPARES 512

/*
 * The generated tables. Weak: a build without the generated file (the
 * README's one-line build, or an architecture without wrappers) has none,
 * and then the lease is taken in cuInit, as before wrappers existed.
 */
extern const unsigned gmp_wrap_n __attribute__((weak));
/* The names, NUL-separated, and where each starts: no pointer tables,
 * which would cost every process a relocation per entry at load. */
extern const char gmp_wrap_strs[] __attribute__((weak));
extern const unsigned short gmp_wrap_off[] __attribute__((weak));
extern const unsigned char gmp_wrap_class[] __attribute__((weak));
extern void *gmp_wrap_real[] __attribute__((weak)); /* hand-out targets */
extern void *gmp_wrap_plt[] __attribute__((weak));  /* exported targets */
extern void *gmp_spare_real[] __attribute__((weak));
/* The hand-out wrappers, as offsets from gmp_wrap_base (same reason);
 * 0 for a name that has none (queries, own). */
extern char gmp_wrap_base[] __attribute__((weak));
extern const int gmp_wrap_hoff[] __attribute__((weak));
extern const int gmp_spare_hoff[] __attribute__((weak));

/* Name i of the table (i < gmp_wrap_n, wrappers built in). */
static inline const char *gmp_wrap_name(unsigned i)
{
	return gmp_wrap_strs + gmp_wrap_off[i];
}

/* The hand-out wrapper of name i, and spare k. */
static inline void *gmp_wrap_h_at(unsigned i)
{
	return gmp_wrap_base + gmp_wrap_hoff[i];
}

static inline void *gmp_spare_h_at(unsigned k)
{
	return gmp_wrap_base + gmp_spare_hoff[k];
}

/* 1: the generated wrappers are built in. */
static inline int gmp_wrappers(void)
{
	return &gmp_wrap_n != 0;
}

/*
 * Read by every wrapper: 1 when calls may go straight to the driver (the
 * lease is held, or none is needed), 0 when the slow path must decide.
 * Written only by gate.c (gmp_go_set).
 */
extern int gmp_go;
/* Set once a wrapper for a function the table does not name was called:
 * the process may hold a context we cannot see, so it never gives its
 * lease back. */
extern unsigned char gmp_doubt;

/*
 * What a lookup (dlsym, dlvsym, cuGetProcAddress*) hands out for `p`, a
 * function of the real driver `c` other than cuInit and cuGetProcAddress*:
 * p itself for a pure query, else a wrapper that jumps to p. Without a
 * wrapper to spare, the lease is taken now and p returned (and the lease
 * never given back); if that fails, NULL.
 */
void *gmp_wrap_handout(void *p, const struct gmp_cuda *c);

/* The name of wrapped driver function `p`'s table entry, for messages;
 * "a driver function" when unknown. */
const char *gmp_wrap_name_of(unsigned i);

/*
 * The give-back check, run by wrap.c's helper thread: 1 when this process
 * may hold a context (or cannot tell), 0 when it surely holds none. Waits
 * for context calls in flight first; call with the gate's lock held and
 * gmp_go already 0, so that no new one starts.
 */
int gmp_wrap_may_hold_context(void);

/* Start (first call) or wake the helper thread that gives the lease back
 * after `delay_ms` without a context. Returns 0, or -1 when no thread can
 * be started (then the lease is kept). */
int gmp_wrap_giveback_arm(unsigned delay_ms);

/*
 * Start a helper thread running fn(NULL): pthread_create found at run
 * time, every signal blocked in the thread, never joined; errno kept.
 * 1 when it runs, 0 when it could not be started.
 */
int gmp_thread_start(void *(*fn)(void *));

/* The real driver's function `name` (the driver as loaded, looked up
 * past every wrapper), or NULL. */
void *gmp_wrap_driver_fn(const char *name);

/*
 * For the exit release (exit.c): wait for the context calls in flight
 * (call with the gate's lock held and gmp_go 0), then 0 when every
 * context this process may have is a primary one (which exit.c can
 * find and synchronise), 1 when it may hold another (a non-primary
 * context, or a call through a wrapper the table does not name).
 */
int gmp_wrap_ctx_settled(void);

/* Fork: a child has no helper thread; forget it (atfork child handler). */
void gmp_wrap_atfork_child(void);

#endif
