/*
 * cmd_report.c - `gpu-offload report DIR`: what the traces of a run say
 * (layout: src/offload/trace.h). Per operation and precision: calls, work,
 * calls and time per device, copy time, the reasons; and the copies that
 * could have been avoided had unchanged data stayed on the GPU.
 *
 * The avoidable copies are estimated per process by replaying its GPU
 * calls: after a GPU call the device holds each operand as it was then
 * (inputs as copied in, outputs as copied back), named by (address,
 * size, fingerprint); a later GPU call that copies in an operand with the
 * same address, size and fingerprint copied it for nothing. Fingerprints
 * sample 8 words, so a change elsewhere in a buffer goes unseen: an
 * estimate, on the generous side. Inputs that residency kept on the GPU
 * (the record's resident flag) were not copied: they count as saved, not
 * as avoidable; "moved MB" is what the GPU calls did copy, in and out.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "policy.h"
#include "trace.h"

struct gpo__row {
	char op[17];
	char prec;
	uint64_t calls, dev_calls[2], reasons[GPO_R_MAX], avoid_n;
	double flops, dev_s[2], copy_s, avoid_bytes, avoid_s, in_bytes;
	double moved_bytes, saved_bytes;        /* copied; kept (residency) */
};

static struct gpo__row *gpo__rows;
static int gpo__nrows;

static struct gpo__row *gpo__row(const struct gpo_trace_rec *r)
{
	struct gpo__row *g;

	for (int i = 0; i < gpo__nrows; i++)
		if (gpo__rows[i].prec == r->prec &&
		    strncmp(gpo__rows[i].op, r->opname, 16) == 0)
			return &gpo__rows[i];
	g = realloc(gpo__rows, (size_t)(gpo__nrows + 1) * sizeof *g);
	if (!g)
		return NULL;
	gpo__rows = g;
	g = &gpo__rows[gpo__nrows++];
	memset(g, 0, sizeof *g);
	memcpy(g->op, r->opname, 16);
	g->prec = r->prec;
	return g;
}

/* What the device holds: (ptr, bytes) -> fingerprint, open addressing. */
struct gpo__res {
	uint64_t ptr, bytes, fp;
};
static struct gpo__res *gpo__tab;
static size_t gpo__cap, gpo__used;

static struct gpo__res *gpo__slot(uint64_t ptr, uint64_t bytes, int add)
{
	size_t h;

	if (add && (gpo__used + 1) * 2 > gpo__cap) {
		struct gpo__res *old = gpo__tab;
		size_t oc = gpo__cap;
		gpo__cap = oc ? oc * 2 : 1024;
		gpo__tab = calloc(gpo__cap, sizeof *gpo__tab);
		if (!gpo__tab) {
			gpo__tab = old;
			gpo__cap = oc;
			return NULL;
		}
		gpo__used = 0;
		for (size_t i = 0; i < oc; i++)
			if (old[i].ptr || old[i].bytes) {
				struct gpo__res *s = gpo__slot(old[i].ptr, old[i].bytes, 1);
				*s = old[i];
			}
		free(old);
	}
	if (!gpo__cap)
		return NULL;
	h = (size_t)((ptr * 0x9e3779b97f4a7c15u) ^ bytes) & (gpo__cap - 1);
	for (;; h = (h + 1) & (gpo__cap - 1)) {
		struct gpo__res *s = &gpo__tab[h];
		if (s->ptr == ptr && s->bytes == bytes && (ptr || bytes))
			return s;
		if (!s->ptr && !s->bytes) {
			if (!add)
				return NULL;
			s->ptr = ptr;
			s->bytes = bytes;
			s->fp = 0;
			gpo__used++;
			return s;
		}
	}
}

static struct {
	uint64_t procs, calls, starts, stops, refused, kept;
	double startup_s;
} gpo__tot;

static void gpo__account(const struct gpo_trace_rec *r)
{
	struct gpo__row *g;
	double in_bytes = 0;

	if (r->kind == GPO_TK_GPU_START) {
		gpo__tot.starts++;
		gpo__tot.startup_s += r->dur_ns / 1e9;
		return;
	}
	if (r->kind == GPO_TK_GPU_STOP) {
		gpo__tot.stops++;
		if (gpo__tab)
			memset(gpo__tab, 0, gpo__cap * sizeof *gpo__tab);
		gpo__used = 0;
		return;
	}
	if (r->kind == GPO_TK_GPU_KEPT) {
		gpo__tot.kept++;
		return;
	}
	if (r->kind == GPO_TK_LEASE_REFUSED) {
		gpo__tot.refused++;
		return;
	}
	if (r->kind != GPO_TK_CALL || !(g = gpo__row(r)))
		return;
	gpo__tot.calls++;
	g->calls++;
	g->flops += r->flops;
	g->dev_calls[r->device & 1]++;
	g->dev_s[r->device & 1] += r->dur_ns / 1e9;
	if (r->reason < GPO_R_MAX)
		g->reasons[r->reason]++;
	if (r->device != GPO_GPU)
		return;
	g->copy_s += r->copy_in_s + r->copy_out_s;
	for (int i = 0; i < r->nbuf && i < 4; i++) {
		if (r->buf[i].in && r->buf[i].resident)
			g->saved_bytes += (double)r->buf[i].bytes;
		else if (r->buf[i].in)
			in_bytes += (double)r->buf[i].bytes;
		if (r->buf[i].out)
			g->moved_bytes += (double)r->buf[i].bytes;
	}
	g->moved_bytes += in_bytes;
	g->in_bytes += in_bytes;
	for (int i = 0; i < r->nbuf && i < 4; i++) {
		const struct gpo_trace_buf *b = &r->buf[i];
		struct gpo__res *s;
		if (b->in && !b->resident && b->fp_before &&
		    (s = gpo__slot(b->ptr, b->bytes, 0)) && s->fp == b->fp_before) {
			g->avoid_n++;
			g->avoid_bytes += (double)b->bytes;
			if (in_bytes > 0)
				g->avoid_s += r->copy_in_s * (double)b->bytes / in_bytes;
		}
	}
	for (int i = 0; i < r->nbuf && i < 4; i++) {
		const struct gpo_trace_buf *b = &r->buf[i];
		uint64_t fp = b->out ? b->fp_after : b->in ? b->fp_before : 0;
		struct gpo__res *s;
		if (fp && (s = gpo__slot(b->ptr, b->bytes, 1)))
			s->fp = fp;
	}
}

static int gpo__file(int dirfd, const char *name, const char *dir)
{
	struct gpo_trace_header h;
	struct gpo_trace_rec r;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	FILE *f;

	if (fd < 0 || !(f = fdopen(fd, "rb"))) {
		fprintf(stderr, GPO_PROG ": cannot read %s/%s: %s\n", dir, name,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (fread(&h, sizeof h, 1, f) != 1 ||
	    memcmp(h.magic, GPO_TRACE_MAGIC, 8) != 0) {
		fprintf(stderr, GPO_PROG ": %s/%s is not a trace\n", dir, name);
		fclose(f);
		return -1;
	}
	if (h.version != GPO_TRACE_VERSION || h.rec_size != GPO_TRACE_REC_SIZE ||
	    h.endian != GPO_TRACE_ENDIAN) {
		fprintf(stderr, GPO_PROG ": %s/%s is a trace of another version or machine (version %u, records of %u bytes)\n",
			dir, name, h.version, h.rec_size);
		fclose(f);
		return -1;
	}
	gpo__tot.procs++;
	gpo__used = 0;
	if (gpo__tab)
		memset(gpo__tab, 0, gpo__cap * sizeof *gpo__tab);
	while (fread(&r, sizeof r, 1, f) == 1)
		gpo__account(&r);
	fclose(f);
	return 0;
}

int gpo_cmd_report(int argc, char **argv)
{
	DIR *d;
	struct dirent *e;
	int bad = 0;
	double avoid_b = 0, avoid_s = 0, moved_b = 0, saved_b = 0;
	uint64_t avoid_n = 0;

	if (argc == 2 && gpo_cli_is_help(argv[1])) {
		gpo_cli_usage("report", stdout);
		return 0;
	}
	if (argc == 2 && argv[1][0] == '-')
		return gpo_cli_unknown("report", argv[1]);
	if (argc != 2) {
		gpo_cli_usage("report", stderr);
		return 2;
	}
	d = opendir(argv[1]);
	if (!d) {
		fprintf(stderr, GPO_PROG ": report: cannot open the trace directory %s: %s\n",
			argv[1], strerror(errno));
		return 2;
	}
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (strncmp(e->d_name, "gpo-", 4) == 0 && n > 10 &&
		    strcmp(e->d_name + n - 6, ".trace") == 0)
			bad |= gpo__file(dirfd(d), e->d_name, argv[1]) != 0;
	}
	closedir(d);
	printf("%s: %llu processes, %llu calls; GPU started %llu times (%.3f s start-up), given back %llu times, kept for the process %llu times, %llu leases refused\n",
	       argv[1], (unsigned long long)gpo__tot.procs,
	       (unsigned long long)gpo__tot.calls,
	       (unsigned long long)gpo__tot.starts, gpo__tot.startup_s,
	       (unsigned long long)gpo__tot.stops,
	       (unsigned long long)gpo__tot.kept,
	       (unsigned long long)gpo__tot.refused);
	printf("%-10s %8s %10s %9s %9s %9s %9s %9s %10s %10s %10s  %s\n", "op",
	       "calls", "Gflop", "cpu", "cpu s", "gpu", "gpu s", "copy s",
	       "moved MB", "saved MB", "avoid MB", "reasons");
	for (int i = 0; i < gpo__nrows; i++) {
		const struct gpo__row *g = &gpo__rows[i];
		char name[24];
		int first = 1;
		snprintf(name, sizeof name, "%c%s", g->prec ? g->prec : '?', g->op);
		printf("%-10s %8llu %10.3f %9llu %9.4f %9llu %9.4f %9.4f %10.3f %10.3f %10.3f  ",
		       name, (unsigned long long)g->calls, g->flops / 1e9,
		       (unsigned long long)g->dev_calls[0], g->dev_s[0],
		       (unsigned long long)g->dev_calls[1], g->dev_s[1],
		       g->copy_s, g->moved_bytes / 1e6, g->saved_bytes / 1e6,
		       g->avoid_bytes / 1e6);
		for (int r = 1; r < GPO_R_MAX; r++)
			if (g->reasons[r]) {
				printf("%s%s:%llu", first ? "" : ",",
				       gpo_reason_name((unsigned)r),
				       (unsigned long long)g->reasons[r]);
				first = 0;
			}
		printf("\n");
		avoid_b += g->avoid_bytes;
		avoid_s += g->avoid_s;
		avoid_n += g->avoid_n;
		moved_b += g->moved_bytes;
		saved_b += g->saved_bytes;
	}
	printf("copies: %.3f MB moved; %.3f MB saved by residency (inputs the GPU already held)\n",
	       moved_b / 1e6, saved_b / 1e6);
	printf("avoidable copies (unchanged data already on the GPU): %llu copies, %.3f MB, about %.4f s\n",
	       (unsigned long long)avoid_n, avoid_b / 1e6, avoid_s);
	free(gpo__rows);
	free(gpo__tab);
	return bad;
}
