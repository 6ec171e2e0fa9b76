/*
 * pcopy.h - the CPU copy engine of libgpuoffload.so: strided BLAS ?copy
 * calls (numpy's linearization of a matrix into Fortran order, one call
 * per column, and back) done by a few threads, each of which copies the
 * same range of element indices of every call.
 *
 * Why: a column of 4096 elements 32 KiB apart touches 4096 pages and 4096
 * cache lines; one thread walking them column after column misses its
 * TLB and its caches on every element. A thread that always takes the
 * same rows keeps those pages in its TLB and those lines in its L1/L2
 * from one column to the next (the next column is the next 8 bytes of
 * the same lines). docs/offload.md, "The CPU copy engine".
 *
 * No work at load time: the configuration (GPU_OFFLOAD_COPY_THREADS) is
 * read and the threads are created at the first call that qualifies.
 */
#ifndef GPUOFFLOAD_PCOPY_H
#define GPUOFFLOAD_PCOPY_H

#include <stdint.h>

/* A call qualifies when n is at least gpo_pcopy_min_n (GPO_PCOPY_MIN_N),
 * one side's stride is at least GPO_PCOPY_MIN_STRIDE bytes, neither
 * increment is 0, the source and destination ranges do not overlap, and
 * the engine is on. The thresholds are measured (bench/offload/
 * copy_bench.c on the H200 machine, docs/offload.md): n = 4096 gains 5-8x
 * there, n = 1024 loses (0.5-0.6x with 2 to 8 threads); sizes between
 * were not measured, so they stay with the CPU library. */
#define GPO_PCOPY_MIN_N 4096
#define GPO_PCOPY_MIN_STRIDE 4096
/* Threads in all, the caller included (GPU_OFFLOAD_COPY_THREADS caps). */
#define GPO_PCOPY_MAX_THREADS 64
#define GPO_PCOPY_DEFAULT_THREADS 8
/* While this process's GPU has started (gpo_pcopy_gpu), the LAPACK call
 * between a linearization and its way back runs on the GPU and the CPU
 * library's threads are idle: the engine then uses up to this many
 * (measured on the H200 machine: a 4096 x 4096 gather 40 ms with 8
 * threads, 22 ms with 16; with the CPU library computing between the
 * copies, 16 lost to 8 in np.linalg.solve: its threads spin after each
 * call and take the cores). GPU_OFFLOAD_COPY_THREADS fixes both counts. */
#define GPO_PCOPY_GPU_THREADS 16
/* How long a worker spins (with a pause instruction) for the next job
 * before it sleeps on a futex: calls of one linearization come some
 * 10-50 us apart; between matrices the workers sleep. */
#define GPO_PCOPY_SPIN_NS 300000

/*
 * gpo_pcopy: y := x, BLAS ?copy semantics (element i of x at
 * x + i*incx*esz for incx > 0, at x + (n-1-i)*|incx|*esz for incx < 0;
 * the same for y), esz 4, 8 or 16 bytes (whole elements copied), when
 * the call qualifies (above) and no other thread's job is running (a
 * second caller never waits: it gets 0 and copies by itself).
 * Returns 1 when the engine copied, 0 when it did nothing (the caller
 * must copy). errno is preserved. Never prints except one line on stderr
 * (gpo_msg_once) for an unreadable GPU_OFFLOAD_COPY_THREADS.
 */
int gpo_pcopy(int64_t n, const void *x, int64_t incx, void *y, int64_t incy,
	      unsigned esz);

/* GPO_PCOPY_MIN_N; the engine's own unit test (tests/offload/pcopy/
 * pcunit.c, linked with pcopy.c) lowers it to keep its buffers small.
 * Nothing else changes it. */
extern int64_t gpo_pcopy_min_n;

/* The policy says when this process's GPU starts (1) and stops (0);
 * the next job uses the count for that state (a fork child's the CPU
 * count: it stays on the CPU). Lock-free, cheap. */
void gpo_pcopy_gpu(int on);

/* The CPUs the defaults are computed from; 0 (the default): the
 * process's affinity mask. Only the engine's unit test sets it. */
extern int gpo_pcopy_cpus;

/* The engine's thread count, the caller included (0: off), reading the
 * configuration if it was not yet read; for tests and the benchmark. */
int gpo_pcopy_threads(void);

/* vma.c: the hex digits at *p (advanced past them, up to `end`) into *v,
 * as /proc/self/maps writes addresses and device numbers; 0 when there
 * were any and the value fits, else -1. */
int gpo_maps_hex(const char **p, const char *end, uintptr_t *v);

/* vma.c: 0 when addr lies in a private anonymous mapping (no file, not
 * shared, readable and writable), with that mapping's [*lo, *hi) and
 * *heap 1 when it is the heap ("[heap]"); -1 when not, or when
 * /proc/self/maps cannot be read. Opens and closes one descriptor
 * (O_CLOEXEC); errno is not preserved (the caller's job). Not reentrant:
 * callers are serialised (the engine's job lock). */
int gpo_pcopy_anon_vma(uintptr_t addr, uintptr_t *lo, uintptr_t *hi, int *heap);

#endif
