/*
 * culinked.c - a program linked with -lcuda that calls the driver through
 * its PLT, as numba and cuda-python do. Prints "rc=" and "cvd=".
 *   culinked            cuInit(0)
 *   culinked gpa2       cuGetProcAddress_v2("cuInit") via the PLT, then it
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cuInit(unsigned int flags);
int cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
			unsigned long long flags, int *status);

int main(int argc, char **argv)
{
	const char *cvd;
	int rc;

	if (argc > 1 && strcmp(argv[1], "gpa2") == 0) {
		int (*f)(unsigned int) = NULL;
		int st = -1;
		rc = cuGetProcAddress_v2("cuInit", (void **)&f, 12000, 0, &st);
		printf("gpa-rc=%d\n", rc);
		rc = f ? f(0) : -1;
	} else {
		rc = cuInit(0);
	}
	cvd = getenv("CUDA_VISIBLE_DEVICES");
	printf("rc=%d\ncvd=%s\n", rc, cvd ? cvd : "-unset-");
	return 0;
}
