/*
 * resid.c - the residency table (resid.h): device copies of operands kept
 * between GPU calls, each valid while the write tracker
 * (wtrack/wtrack.h) says its host range is unchanged.
 *
 * A fixed table (no allocation), under gpu.c's lock. Entries without a
 * device buffer remember an operand seen once, or one that changed
 * between calls and is backing off. Which operand a slot holds is its key
 * (address, pitch, width, columns): the same memory seen through another
 * shape is another entry, and arming either drops the other (overlap).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"
#include "model.h"
#include "pstate.h"
#include "resid.h"
#include "wtrack/wtrack.h"

#define GPO_RES_SLOTS 64
#define GPO_RES_BACKOFF_MAX 4096u

struct gpo__res {
	struct gpo_res_key k;
	void *dev;              /* the device copy; NULL: seen only */
	uint64_t bytes;         /* dev's size */
	uint64_t last;          /* LRU clock at the last use */
	uint32_t skip;          /* sightings left before it is armed again */
	uint32_t backoff;       /* the next skip after a change */
	uint8_t used;
	uint8_t read;           /* seen as an input: an output worth keeping */
};

static struct gpo__res gpo__res[GPO_RES_SLOTS];
static uint64_t gpo__res_clock, gpo__res_bytes;
static uint64_t gpo__res_hits, gpo__res_saved, gpo__res_kept;
static int gpo__res_state = -1;         /* -1 unknown, 0 off, 1 on */
static int gpo__res_reason;             /* GPO_WT_R_* when off */
static uint64_t gpo__res_min = GPO_RES_MIN_DEFAULT;

int gpo_res_enabled(void)
{
	if (gpo__res_state < 0) {
		const char *s = getenv("GPU_OFFLOAD_RESIDENT");
		const char *m = getenv("GPU_OFFLOAD_RESIDENT_MIN");
		uint64_t v;
		if (m && *m && gm_parse_uint(m, 10, UINT64_MAX, &v) == 0)
			gpo__res_min = v;
		/* The tracker itself starts at the first arming (no
		 * descriptor before an operand is seen twice); one that
		 * cannot start turns residency off there (gpo_res_arm). */
		if (s && strcmp(s, "0") == 0)
			gpo__res_reason = GPO_WT_R_OFF;
		gpo__res_state = gpo__res_reason == 0;
	}
	return gpo__res_state;
}

const char *gpo_res_why(void)
{
	if (gpo__res_state < 0)
		return "unused";
	return gpo__res_state ? "on" : gpo_wt_reason(gpo__res_reason);
}

static uintptr_t gpo__lo(const struct gpo_res_key *k)
{
	return (uintptr_t)k->host;
}

static uintptr_t gpo__hi(const struct gpo_res_key *k)
{
	return (uintptr_t)k->host + k->pitch * (k->cols - 1) + k->width;
}

static int gpo__same(const struct gpo_res_key *a, const struct gpo_res_key *b)
{
	return a->host == b->host && a->pitch == b->pitch &&
	       a->width == b->width && a->cols == b->cols;
}

static struct gpo__res *gpo__find(const struct gpo_res_key *k)
{
	for (int i = 0; i < GPO_RES_SLOTS; i++)
		if (gpo__res[i].used && gpo__same(&gpo__res[i].k, k))
			return &gpo__res[i];
	return NULL;
}

static void gpo__unkeep(const struct gpo_backend *be, struct gpo__res *r)
{
	if (r->dev) {
		be->release(r->dev);
		gpo__res_bytes -= r->bytes;
		r->dev = NULL;
		r->bytes = 0;
	}
}

/* A slot for k: its own, else a free one, else the least recently used
 * (a seen-only one before one that holds a buffer). */
static struct gpo__res *gpo__slot(const struct gpo_backend *be,
				  const struct gpo_res_key *k)
{
	struct gpo__res *r = gpo__find(k), *old = NULL;

	if (r)
		return r;
	for (int i = 0; i < GPO_RES_SLOTS; i++) {
		struct gpo__res *s = &gpo__res[i];
		if (!s->used) {
			old = s;
			break;
		}
		if (!old || (!s->dev && old->dev) ||
		    (!s->dev == !old->dev && s->last < old->last))
			old = s;
	}
	gpo__unkeep(be, old);
	memset(old, 0, sizeof *old);
	old->used = 1;
	old->k = *k;
	old->backoff = 2;
	return old;
}

void *gpo_res_take(const struct gpo_backend *be, const struct gpo_res_key *k)
{
	struct gpo__res *r = gpo__find(k);
	void *dev;

	if (!r || !r->dev)
		return NULL;
	r->last = ++gpo__res_clock;
	if (!gpo_wt_clean(k->host, gpo__hi(k) - gpo__lo(k))) {
		/* Changed (or not provably unchanged): drop it and wait
		 * before arming it again. */
		gpo__unkeep(be, r);
		r->skip = r->backoff;
		if (r->backoff < GPO_RES_BACKOFF_MAX)
			r->backoff *= 2;
		return NULL;
	}
	dev = r->dev;
	gpo__res_bytes -= r->bytes;
	r->dev = NULL;
	r->bytes = 0;
	gpo__res_hits++;
	gpo__res_saved += k->width * k->cols;
	return dev;
}

int gpo_res_known(const struct gpo_res_key *k)
{
	const struct gpo__res *r;

	if (k->width * k->cols < gpo__res_min)
		return 0;
	r = gpo__find(k);
	return r && (r->dev || !r->skip);
}

int gpo_res_held(const struct gpo_res_key *k)
{
	const struct gpo__res *r;

	if (k->width * k->cols < gpo__res_min)
		return 0;
	r = gpo__find(k);
	return r && r->dev;
}

int gpo_res_wanted(const struct gpo_backend *be, const struct gpo_res_key *k,
		   int input)
{
	struct gpo__res *r;

	if (k->width * k->cols < gpo__res_min)
		return 0;       /* not even remembered */
	r = gpo__find(k);
	if (!r) {
		r = gpo__slot(be, k);
		r->last = ++gpo__res_clock;
		r->read = input != 0;
		return 0;
	}
	r->last = ++gpo__res_clock;
	if (input)
		r->read = 1;
	if (r->skip) {
		r->skip--;
		return 0;
	}
	/* A pure output is armed (after its copy back) only once that
	 * memory was read by a call: an output the program never passes
	 * back is not worth the arming on every call. */
	return r->read;
}

void gpo_res_forget(const struct gpo_backend *be, const struct gpo_res_key *k)
{
	uintptr_t pg = 4096, lo = gpo__lo(k) & ~(pg - 1),
		  hi = (gpo__hi(k) + pg - 1) & ~(pg - 1);

	/* (Pages of 4 KiB at least: a bigger page size only widens what
	 * is dropped.) */
	for (int i = 0; i < GPO_RES_SLOTS; i++) {
		struct gpo__res *r = &gpo__res[i];
		if (r->used && r->dev && gpo__lo(&r->k) < hi &&
		    ((gpo__hi(&r->k) + pg - 1) & ~(pg - 1)) > lo)
			gpo__unkeep(be, r);
	}
}

int gpo_res_arm(const struct gpo_backend *be, const struct gpo_res_key *k)
{
	int rc;

	/* Every other copy whose pages these share: arming forgets the
	 * writes there, so they cannot be trusted after it. */
	gpo_res_forget(be, k);
	rc = gpo_wt_protect(k->host, gpo__hi(k) - gpo__lo(k));
	if (rc == GPO_WT_R_KERNEL || rc == GPO_WT_R_PERM) {
		/* For the life of the process: nothing was ever kept. */
		gpo__res_state = 0;
		gpo__res_reason = rc;
	}
	return rc;
}

/* What the table may hold: half the device memory the level leaves
 * beyond its reserve (the other half for the calls themselves). */
static uint64_t gpo__cap(const struct gpo_backend *be)
{
	uint64_t free_b = 0, total = 0;
	double reserve = gpo_level_get(gpo_pol.level)->reserve;

	if (be->memory(&free_b, &total) != 0 || !total)
		return 0;
	return (uint64_t)((double)total * (1.0 - reserve) / 2);
}

int gpo_res_keep(const struct gpo_backend *be, const struct gpo_res_key *k,
		 void *dev, uint64_t bytes)
{
	uint64_t cap = gpo__cap(be);
	struct gpo__res *r;

	if (bytes > cap)
		return 0;
	while (gpo__res_bytes + bytes > cap) {
		struct gpo__res *old = NULL;
		for (int i = 0; i < GPO_RES_SLOTS; i++)
			if (gpo__res[i].used && gpo__res[i].dev &&
			    (!old || gpo__res[i].last < old->last))
				old = &gpo__res[i];
		if (!old)
			return 0;
		gpo__unkeep(be, old);
	}
	r = gpo__slot(be, k);
	if (r->dev)
		return 0;       /* the same operand twice in one call */
	r->dev = dev;
	r->bytes = bytes;
	r->last = ++gpo__res_clock;
	gpo__res_bytes += bytes;
	__atomic_add_fetch(&gpo__res_kept, 1, __ATOMIC_RELAXED);
	return 1;
}

int gpo_res_ever_kept(void)
{
	return __atomic_load_n(&gpo__res_kept, __ATOMIC_RELAXED) != 0;
}

int gpo_res_evict(const struct gpo_backend *be, uint64_t need)
{
	int any = 0;

	for (;;) {
		struct gpo__res *old = NULL;
		uint64_t free_b = 0, total = 0;
		if (be->memory(&free_b, &total) == 0 && free_b >= need)
			return any;
		for (int i = 0; i < GPO_RES_SLOTS; i++)
			if (gpo__res[i].used && gpo__res[i].dev &&
			    (!old || gpo__res[i].last < old->last))
				old = &gpo__res[i];
		if (!old)
			return any;
		gpo__unkeep(be, old);
		any = 1;
	}
}

void gpo_res_drop_all(const struct gpo_backend *be)
{
	for (int i = 0; i < GPO_RES_SLOTS; i++)
		if (gpo__res[i].used)
			gpo__unkeep(be, &gpo__res[i]);
	memset(gpo__res, 0, sizeof gpo__res);
	gpo__res_bytes = 0;
	/* The program's own userfaultfd may register this memory again. */
	gpo_wt_reset(0);
}

void gpo_res_totals(uint64_t *hits, uint64_t *saved, uint64_t *kept)
{
	*hits = gpo__res_hits;
	*saved = gpo__res_saved;
	*kept = gpo__res_kept;
}

void gpo_res_summary(void)
{
	/* Only when it did something, or could not: nothing to say of a
	 * program whose operands were all small or used once, or of
	 * residency switched off on purpose. */
	if (!gpo__res_kept && (gpo__res_state != 0 ||
			       gpo__res_reason == GPO_WT_R_OFF))
		return;
	fprintf(stderr, "gpu-offload: residency: %s; %llu copies avoided (%.1f MB), %llu device copies kept\n",
		gpo_res_why(), (unsigned long long)gpo__res_hits,
		(double)gpo__res_saved / 1e6,
		(unsigned long long)gpo__res_kept);
}
