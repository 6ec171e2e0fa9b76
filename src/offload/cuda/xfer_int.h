/*
 * xfer_int.h - what the two files of the copy engine share: xfer.c (start,
 * stop, the chunked copies) and xstage.c (the pinned staging blocks of
 * GPO_BE_STAGE results, commit, discard, their bounds). Not an interface:
 * xfer.h is.
 */
#ifndef GPUOFFLOAD_XFER_INT_H
#define GPUOFFLOAD_XFER_INT_H

#include <pthread.h>
#include <stdint.h>

#include "cuapi.h"
#include "xfer.h"

#define GPC_NBUF_MAX 8
#define GPC_MAX_STAGED 8
#define GPC_MAX_BLOCKS 8
#define GPC_BLOCK_GRAIN (2ull << 20)    /* staging blocks round up to this */
#define GPC_STAGE_ALIGN 256ull

struct gpc_xblock {
	void *p;
	uint64_t cap, used;
	int pinned;
	uint64_t last_call;     /* gpc_xst.calls when last used */
};

struct gpc_xstaged {
	void *dst;
	const void *src;        /* inside a block, packed (pitch width) */
	uint64_t dpitch, width, rows;
};

struct gpc_xstate {
	int on;
	struct gpc_xfer_tune t;
	gpc_stream s;
	void *pin[GPC_NBUF_MAX];
	gpc_event ev[GPC_NBUF_MAX];
	int busy[GPC_NBUF_MAX];         /* an event recorded, not yet waited */
	struct gpc_xblock blk[GPC_MAX_BLOCKS];
	int nblk;
	struct gpc_xstaged st[GPC_MAX_STAGED];
	int nst;
	/* A staged result being filled in parts (gpc_stage_open): its room
	 * is taken (the block's used), it is no result until closed. */
	int open_on, open_pinned;
	struct gpc_xstaged open;
	char *open_at;
	uint64_t calls;                 /* commits and discards so far */
	struct gpc_xfer_stats stats;
};
extern struct gpc_xstate gpc_xst;

/* Orders every entry point against gpc_xfer_idle (the backend's idle
 * thread): xfer.c's and xstage.c's. */
extern pthread_mutex_t gpc_xmu;

/* xstage.c, called with gpc_xmu: */
/* Free every staging block no staged result of this call uses. */
void gpc_xst_free_unused(void);
/* Bytes of staging blocks held. */
uint64_t gpc_xst_block_bytes(void);
/* Room for `bytes` of staged results (*at), in a block with space left or
 * a new one (pinned if the driver gives it); NULL when there is none. */
struct gpc_xblock *gpc_xst_room(uint64_t bytes, char **at);
/* Forget the staged results; the bound and the idle rule (gpc_xst_trim). */
void gpc_xst_discard(void);
void gpc_xst_trim(void);

#endif
