/*
 * exitjob - a fake-driver job for tests/test_exit_early.py: takes MEM
 * bytes of device memory on its GPU and launches a kernel, then exits.
 *
 *   exitjob hold FIFO MEM [late|-] [READY]   before any CUDA call, opens FIFO for
 *       reading and registers an atexit handler; that handler (which runs
 *       after libgpumutex.so's exit release, registered later, at the
 *       grant) waits until someone writes to FIFO (at most 60 s, then
 *       _exit(3): the deadlock of a lease kept to the end), then, with
 *       `late`, launches one more kernel (GPU work during its exit) and
 *       frees its memory; with READY, writes a byte to that FIFO once
 *       its GPU work is done (its memory taken)
 *   exitjob next FIFO MEM   after its first kernel, writes a byte to FIFO
 *   exitjob plain - MEM     neither
 *
 * Exit status 0, or the failing call's CUresult (1 for usage).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;

CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
			unsigned bx, unsigned by, unsigned bz, unsigned shmem,
			void *stream, void **params, void **extra);
CUresult cuCtxSynchronize(void);

static int fifo_fd = -1, late;
static CUdeviceptr mem;

static void at_exit(void)
{
	struct pollfd p = { .fd = fifo_fd, .events = POLLIN };

	if (poll(&p, 1, 60000) != 1)
		_exit(3);
	if (late) {
		CUresult rc = cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL,
					     NULL, NULL);
		if (rc == 0)
			rc = cuCtxSynchronize();
		if (rc)
			_exit(rc);
	}
	if (mem && cuMemFree_v2(mem))
		_exit(4);
}

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;
	CUresult rc;

	if (argc < 4)
		return 1;
	if (strcmp(argv[1], "hold") == 0) {
		fifo_fd = open(argv[2], O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (fifo_fd < 0)
			return 1;
		late = argc > 4 && strcmp(argv[4], "late") == 0;
		atexit(at_exit);
	}
	if ((rc = cuInit(0)) || (rc = cuDeviceGet(&dev, 0)) ||
	    (rc = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
	    (rc = cuCtxSetCurrent(ctx)) ||
	    (rc = cuMemAlloc_v2(&mem, strtoull(argv[3], NULL, 10))) ||
	    (rc = cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL,
				 NULL)) ||
	    (rc = cuCtxSynchronize())) {
		fprintf(stderr, "exitjob: CUDA error %d\n", rc);
		return rc;
	}
	if (strcmp(argv[1], "next") == 0 ||
	    (strcmp(argv[1], "hold") == 0 && argc > 5)) {
		const char *to = strcmp(argv[1], "next") == 0 ? argv[2] : argv[5];
		int fd = open(to, O_WRONLY | O_NONBLOCK | O_CLOEXEC);

		if (fd < 0 || write(fd, "n", 1) != 1)
			return 1;
		close(fd);
	}
	return 0;
}
