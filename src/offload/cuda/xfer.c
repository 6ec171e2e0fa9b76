/*
 * xfer.c - host<->device copies (xfer.h): the plain version. Each copy is
 * one cuMemcpy2DAsync on the copy stream, then a synchronize; staged
 * results are held in malloc()ed buffers until commit.
 *
 * TODO(xfer): pinned staging with chunked, double-buffered copies
 * (pageable cuMemcpy runs at 7 GB/s host-to-device on the H200 machine,
 * pinned at 55); see the xfer brief.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "xfer.h"

static gpc_stream gpc__copy;

struct gpc__staged {
	void *dst, *buf;
	uint64_t dpitch, width, rows;
};
static struct gpc__staged gpc__st[8];
static int gpc__nst;

int gpc_xfer_start(void)
{
	if (gpc__copy)
		return 0;
	return gpc_cu.StreamCreate(&gpc__copy, GPC_STREAM_NON_BLOCKING) ? -1 : 0;
}

void gpc_xfer_stop(void)
{
	gpc_discard();
	if (gpc__copy)
		(void)gpc_cu.StreamDestroy(gpc__copy);
	gpc__copy = NULL;
}

static int gpc__copy2d(struct gpc_memcpy2d *c)
{
	if (gpc_cu.Memcpy2DAsync(c, gpc__copy) != 0)
		return -1;
	return gpc_cu.StreamSynchronize(gpc__copy) ? -1 : 0;
}

int gpc_h2d(gpc_dptr dev, uint64_t dpitch, const void *host, uint64_t spitch,
	    uint64_t width, uint64_t rows)
{
	struct gpc_memcpy2d c;

	memset(&c, 0, sizeof c);
	c.srcMemoryType = GPC_MEMORYTYPE_HOST;
	c.srcHost = host;
	c.srcPitch = spitch;
	c.dstMemoryType = GPC_MEMORYTYPE_DEVICE;
	c.dstDevice = dev;
	c.dstPitch = dpitch;
	c.WidthInBytes = width;
	c.Height = rows;
	return gpc__copy2d(&c);
}

static int gpc__d2h(void *host, uint64_t dpitch, gpc_dptr dev,
		    uint64_t spitch, uint64_t width, uint64_t rows)
{
	struct gpc_memcpy2d c;

	memset(&c, 0, sizeof c);
	c.srcMemoryType = GPC_MEMORYTYPE_DEVICE;
	c.srcDevice = dev;
	c.srcPitch = spitch;
	c.dstMemoryType = GPC_MEMORYTYPE_HOST;
	c.dstHost = host;
	c.dstPitch = dpitch;
	c.WidthInBytes = width;
	c.Height = rows;
	return gpc__copy2d(&c);
}

int gpc_d2h(void *host, uint64_t dpitch, gpc_dptr dev, uint64_t spitch,
	    uint64_t width, uint64_t rows, unsigned flags)
{
	struct gpc__staged *s;

	if (!(flags & GPO_BE_STAGE))
		return gpc__d2h(host, dpitch, dev, spitch, width, rows);
	if (gpc__nst == (int)(sizeof gpc__st / sizeof gpc__st[0]))
		return -1;
	s = &gpc__st[gpc__nst];
	s->buf = malloc(width * rows > 0 ? width * rows : 1);
	if (!s->buf)
		return -1;
	if (gpc__d2h(s->buf, width, dev, spitch, width, rows) != 0) {
		free(s->buf);
		return -1;
	}
	s->dst = host;
	s->dpitch = dpitch;
	s->width = width;
	s->rows = rows;
	gpc__nst++;
	return 0;
}

void gpc_commit(void)
{
	for (int i = 0; i < gpc__nst; i++) {
		struct gpc__staged *s = &gpc__st[i];
		for (uint64_t r = 0; r < s->rows; r++)
			memcpy((char *)s->dst + r * s->dpitch,
			       (char *)s->buf + r * s->width, s->width);
	}
	gpc_discard();
}

void gpc_discard(void)
{
	for (int i = 0; i < gpc__nst; i++)
		free(gpc__st[i].buf);
	gpc__nst = 0;
}

void gpc_xfer_trim(void)
{
}
