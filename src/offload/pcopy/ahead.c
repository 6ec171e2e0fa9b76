/*
 * ahead.c - the copy engine's preparation of a gather's destination
 * (ahead.h): the huge-page hint and the faulting in, ahead of the copy,
 * of the regions numpy's next calls will write. Called by pcopy.c under
 * its job lock, before the copy job; the populate jobs run on the
 * engine's threads (gpo_pcopy_populate).
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "ahead.h"
#include "pcopy.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  /* Linux 5.14 */
#endif

/* A run of gathers (gpo_ahead); under the engine's job lock. */
static struct {
	uintptr_t last;         /* the last job's first byte */
	uintptr_t run_first;    /* the run's first job's first byte */
	uintptr_t top;          /* its mapping's end at the last look, aligned
	                         * down to a region (0: not looked at) */
	uintptr_t done;         /* the run's regions below are done with
	                         * (UINTPTR_MAX: the run is left alone) */
	int hinted;             /* the run's mapping was advised */
	int pop_ok;             /* MADV_POPULATE_WRITE: 0 not asked, 1 works,
	                         * -1 unknown to the kernel (Linux < 5.14) */
} R;

void gpo_ahead_forget(void)
{
	R.run_first = 0;
}

/* How far beyond a gather's job its run's mapping is made ready, and in
 * batches of how many regions (one populate job: a region per thread). */
#define GPO__AHEAD 16
#define GPO__POP_BATCH 8

/* Whether the kernel knows MADV_POPULATE_WRITE (Linux 5.14), asked once
 * on a page of our own, so that an error on the program's memory (a
 * protection, a hole) is never taken for an old kernel. */
static int gpo__pop_supported(void)
{
	if (!R.pop_ok) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		R.pop_ok = -1;
		if (p != MAP_FAILED) {
			if (madvise(p, 4096, MADV_POPULATE_WRITE) == 0)
				R.pop_ok = 1;
			munmap(p, 4096);
		}
	}
	return R.pop_ok == 1;
}

/*
 * glibc's malloc gives a large buffer (numpy's linearization buffer) a
 * mapping of its own, with the chunk's header at the mapping's first
 * byte: prev_size 0, then the size with IS_MMAPPED (2) as its only flag,
 * the pointer 16 bytes (two size_t) after it. The kernel may merge that
 * mapping with an anonymous neighbour, and /proc/self/maps then shows
 * one mapping that begins below the buffer (the steady state of a loop
 * of solves: the freed buffer's hole is refilled next to the last
 * call's result). When the run's first byte p is such a pointer inside
 * [vlo, vhi), *clo and *chi are the chunk's own mapping: a hint on
 * exactly it splits the merged mapping where the program's own mappings
 * meet, as numpy's own hint on its arrays does, and realloc's mremap of
 * the chunk stays inside one mapping. 0 when found; -1 when not (another
 * allocator, or the program's own mmap: only the mapping's first page
 * then tells that the buffer is the mapping). The header lies in p's own
 * page, inside the mapping as just read, but outside every destination
 * the program handed over: read only where that page is resident
 * (mincore; malloc wrote the header there), so that a page the program
 * has since made a guard region (MADV_GUARD_INSTALL: a fault on any
 * access, the mapping still one in /proc/self/maps) or registered with
 * userfaultfd is never touched. (mincore also wants c page-aligned:
 * with 64 KiB pages, where glibc's chunk is, a 4 KiB boundary alone
 * is not looked at.)
 */
static int gpo__chunk(uintptr_t p, uintptr_t vlo, uintptr_t vhi,
		      uintptr_t *clo, uintptr_t *chi)
{
	uintptr_t c = p - 2 * sizeof(size_t);
	size_t head[2];
	unsigned char in;

	if (p < vlo + 2 * sizeof(size_t) || (c & 4095) ||
	    mincore((void *)c, sizeof head, &in) != 0 || !(in & 1))
		return -1;
	memcpy(head, (const void *)c, sizeof head);
	if (head[0] != 0 || (head[1] & 4095) != 2 ||
	    head[1] < 2 * GPO_AHEAD_REGION || head[1] - 2 > vhi - c)
		return -1;
	*clo = c;
	*chi = c + (head[1] - 2);
	return 0;
}

/*
 * A gather (contiguous destination [lo, hi)): numpy writes it into a
 * buffer it has just malloc'd, so every page is faulted in by the copy,
 * 4 KiB at a time, and the engine's threads fault in parallel into one
 * mm (measured on the H200 machine: 4 KiB faults of fresh memory do not
 * scale beyond 4 threads, and made a 4096 x 4096 gather into fresh
 * memory cost about three times the same gather into touched memory).
 *
 * Runs: consecutive gathers whose destinations ascend by at most twice
 * a job's length, as the columns of one linearization do (each follows
 * the last); any other destination starts a new run (the next numpy
 * call's buffer, often at the address of the one just freed). From a
 * run's second job on, every GPO__POP_BATCH regions (and at the
 * mapping's end), the mapping is looked at again in /proc/self/maps,
 * so that nothing is done to a mapping that replaced the one the run
 * began in; the run is left alone unless the job lies in private
 * anonymous memory (never a file or shared memory), and nothing is done
 * past that mapping's end. Then, for the regions after the job's last
 * byte up to GPO__AHEAD of them, when none of their pages is
 * resident (mincore: nothing there was ever written):
 *
 * - once per run, MADV_HUGEPAGE, the hint numpy gives its own large
 *   arrays, on the buffer's WHOLE mapping, so that it is faulted in 2 MiB
 *   at a time and the program's mapping stays one (a sub-range would
 *   split it, and mremap of a range over two mappings fails): malloc's
 *   mmap'd chunk where its header says so (gpo__chunk: also when the
 *   kernel merged it with a neighbour, which is then left alone, and
 *   nothing is populated past the chunk), else the whole mapping when
 *   the run began in its first page; never the heap. Only a hint: the
 *   kernel may ignore it (THP "never", prctl PR_SET_THP_DISABLE),
 *   content is never touched.
 * - those regions are populated by the engine's threads at once
 *   (gpo__populate), so that no copy job waits for a huge page to be
 *   zeroed by one of its threads while the others wait at the join.
 *
 * What the program would read there is zeros, before and after. Another
 * thread of the program replacing the mapping between the look and the
 * madvise is the one race left (docs/offload.md). Under the job lock,
 * before the copy job.
 */
void gpo_ahead(uintptr_t lo, uintptr_t hi, int t)
{
	/* static: under the job lock, and the caller's stack may be small */
	static unsigned char vec[GPO__AHEAD * (GPO_AHEAD_REGION / 4096)];
	uintptr_t up, from, end, vlo, vhi, clo, chi;
	size_t i, n;
	int heap;

	if (hi < lo || hi > UINTPTR_MAX - GPO_AHEAD_REGION * (GPO__AHEAD + 1))
		return;
	if (!R.run_first || lo < R.last || lo - R.last > 2 * (hi - lo)) {
		R.run_first = lo;       /* a new run: its first job */
		R.last = lo;
		R.top = 0;
		R.done = 0;
		R.hinted = 0;
		return;
	}
	R.last = lo;
	if (R.done == UINTPTR_MAX)
		return;
	up = (hi + GPO_AHEAD_REGION - 1) & ~(GPO_AHEAD_REGION - 1);
	from = up > R.done ? up : R.done;
	end = up + GPO_AHEAD_REGION * GPO__AHEAD;
	if (R.top && end > R.top)
		end = R.top;
	if (end <= from || (end - from < GPO__POP_BATCH * GPO_AHEAD_REGION && end != R.top))
		return;
	/* A batch is due: the mapping as it is now. */
	if (gpo_pcopy_anon_vma(lo, &vlo, &vhi, &heap) != 0 || hi > vhi) {
		R.done = UINTPTR_MAX;
		return;
	}
	/* The buffer's own mapping where malloc's header tells it (a merged
	 * neighbour is then neither advised nor populated), else the
	 * mapping's, advised only when the run began in its first page. */
	if (!heap && gpo__chunk(R.run_first, vlo, vhi, &clo, &chi) == 0) {
		if (hi > chi) {
			R.done = UINTPTR_MAX;
			return;
		}
		vhi = chi;
	} else {
		clo = vlo;
		if (R.run_first - vlo >= 4096)
			clo = 0;        /* not the buffer's own: no hint */
	}
	R.top = vhi & ~(GPO_AHEAD_REGION - 1);
	if (end > R.top)
		end = R.top;
	if (end <= from)
		return;
	R.done = end;
	n = (size_t)((end - from) / 4096);
	if (mincore((void *)from, end - from, vec) != 0)
		return;
	for (i = 0; i < n && !(vec[i] & 1); i++)
		;
	if (i < n) {
		R.done = UINTPTR_MAX;   /* the program's pages: the run */
		return;                 /* is left as it is */
	}
	if (!R.hinted && !heap && clo) {
		(void)madvise((void *)clo, vhi - clo, MADV_HUGEPAGE);
		R.hinted = 1;
	}
	if (t < 2 || !gpo__pop_supported())
		return;
	gpo_pcopy_populate(from, (int64_t)((end - from) / GPO_AHEAD_REGION), t);
}
