/*
 * cuptiabi.c - src/preload/cuptiapi.h against the CUDA toolkit's CUPTI
 * headers (`make cupti-abi`, where they are installed): a compile-time
 * check of the values and record layouts the GPU-time collector declares
 * itself, so that it builds without the toolkit. The program prints the
 * CUPTI API version it was checked against.
 */
#include <stddef.h>
#include <stdio.h>

#include <cupti.h>

#include "cuptiapi.h"

_Static_assert(GMP_CUPTI_SUCCESS == CUPTI_SUCCESS, "success");
_Static_assert(GMP_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS ==
	       CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "subscribers");
_Static_assert(GMP_CUPTI_KIND_MEMCPY == CUPTI_ACTIVITY_KIND_MEMCPY, "memcpy");
_Static_assert(GMP_CUPTI_KIND_KERNEL == CUPTI_ACTIVITY_KIND_KERNEL, "kernel");
_Static_assert(GMP_CUPTI_KIND_CONCURRENT_KERNEL ==
	       CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "concurrent kernel");
_Static_assert(GMP_CUPTI_FLUSH_FORCED == CUPTI_ACTIVITY_FLAG_FLUSH_FORCED,
	       "forced flush");
_Static_assert(offsetof(CUpti_ActivityKernel10, kind) == 0, "kernel kind");
_Static_assert(offsetof(CUpti_ActivityKernel10, start) == GMP_CUPTI_OFF_START,
	       "kernel start");
_Static_assert(offsetof(CUpti_ActivityKernel10, end) == GMP_CUPTI_OFF_END,
	       "kernel end");
_Static_assert(offsetof(CUpti_ActivityKernel10, deviceId) ==
	       GMP_CUPTI_OFF_KERNEL_DEV, "kernel device");
_Static_assert(offsetof(CUpti_ActivityMemcpy6, kind) == 0, "copy kind");
_Static_assert(offsetof(CUpti_ActivityMemcpy6, start) == GMP_CUPTI_OFF_START,
	       "copy start");
_Static_assert(offsetof(CUpti_ActivityMemcpy6, end) == GMP_CUPTI_OFF_END,
	       "copy end");
_Static_assert(offsetof(CUpti_ActivityMemcpy6, deviceId) ==
	       GMP_CUPTI_OFF_COPY_DEV, "copy device");

int main(void)
{
	printf("cupti-abi: ok against CUPTI_API_VERSION %d\n", CUPTI_API_VERSION);
	return 0;
}
