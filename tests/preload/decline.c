/*
 * decline - programs that do awkward things around cuInit, for
 * tests/test_decline.py. Linked with -lcuda against the fake driver.
 *
 *   decline closeall      cuInit, a context, close every descriptor above
 *                         2 (as a daemon does), then cuInit again: prints
 *                         "first=RC second=RC", then waits for stdin EOF
 *   decline setuid UID    setgid/setuid to UID, then cuInit: prints
 *                         "rc=RC cvd=CUDA_VISIBLE_DEVICES"
 *   decline hold          cuInit, a context, then wait for stdin EOF
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;

CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);

static int context(void)
{
	CUdevice d;
	CUcontext c;
	return cuDeviceGet(&d, 0) || cuCtxCreate_v2(&c, 0, d);
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "closeall")) {
		int first = cuInit(0), second;
		if (first == 0 && context())
			return 3;
		for (int fd = 3; fd < 4096; fd++)
			close(fd);
		second = cuInit(0);
		printf("first=%d second=%d\n", first, second);
		fflush(stdout);
		{
			char buf[16];
			while (read(0, buf, sizeof buf) > 0)
				;
		}
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "setuid")) {
		uid_t u = (uid_t)atoi(argv[2]);
		const char *cvd;
		int rc;
		if (setgid(u) || setuid(u))
			return 4;
		rc = cuInit(0);
		cvd = getenv("CUDA_VISIBLE_DEVICES");
		printf("rc=%d cvd=%s\n", rc, cvd ? cvd : "-unset-");
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "hold")) {
		char buf[16];
		if (cuInit(0) || context())
			return 5;
		puts("held");
		fflush(stdout);
		while (read(0, buf, sizeof buf) > 0)
			;
		return 0;
	}
	fprintf(stderr, "usage: decline closeall | setuid UID | hold\n");
	return 2;
}
