/*
 * cuptiapi.h - the few parts of CUPTI (NVIDIA's profiling interface) that
 * the GPU-time collector (gputime.c) uses, declared here so that the
 * library builds without the CUDA toolkit and has no DT_NEEDED on
 * libcupti: every entry point is a function, found with dlsym at run
 * time. The values and layouts are CUPTI's own (cupti_result.h,
 * cupti_activity.h, cupti_callbacks.h, cupti_version.h);
 * tests/preload/cuptiabi.c checks them against the toolkit's headers
 * where those are installed (`make cupti-abi`).
 */
#ifndef GPUMUTEX_PRELOAD_CUPTIAPI_H
#define GPUMUTEX_PRELOAD_CUPTIAPI_H

#include <stddef.h>
#include <stdint.h>

typedef int gmp_cupti_result;
#define GMP_CUPTI_SUCCESS 0
#define GMP_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS 39

/* CUpti_ActivityKind values. */
#define GMP_CUPTI_KIND_MEMCPY 1
#define GMP_CUPTI_KIND_KERNEL 3
#define GMP_CUPTI_KIND_CONCURRENT_KERNEL 10

/*
 * The start of every kernel record (CUpti_ActivityKernel4 to 10, CUDA 9
 * to 13) and memory-copy record (CUpti_ActivityMemcpy to Memcpy6): kind
 * first, start and end (ns) at bytes 16 and 24, the device at byte 40
 * (kernel) or 32 (copy). CUPTI delivers the newest record of its own
 * version, so these offsets hold for the versions gputime.c accepts.
 */
#define GMP_CUPTI_OFF_START 16
#define GMP_CUPTI_OFF_END 24
#define GMP_CUPTI_OFF_KERNEL_DEV 40
#define GMP_CUPTI_OFF_COPY_DEV 32

/* cuptiActivityFlushAll's CUPTI_ACTIVITY_FLAG_FLUSH_FORCED. */
#define GMP_CUPTI_FLUSH_FORCED 1u

typedef void (*gmp_cupti_cb)(void *userdata, int domain, unsigned cbid,
			     const void *cbdata);
typedef void (*gmp_cupti_buf_req)(uint8_t **buffer, size_t *size,
				  size_t *max_records);
typedef void (*gmp_cupti_buf_done)(void *ctx, uint32_t stream,
				   uint8_t *buffer, size_t size,
				   size_t valid);

/* The entry points, as gputime.c resolves them. */
struct gmp_cupti {
	gmp_cupti_result (*get_version)(uint32_t *);
	gmp_cupti_result (*subscribe)(void **, gmp_cupti_cb, void *);
	gmp_cupti_result (*unsubscribe)(void *);
	gmp_cupti_result (*enable)(int kind);
	gmp_cupti_result (*disable)(int kind);
	gmp_cupti_result (*register_cbs)(gmp_cupti_buf_req,
					 gmp_cupti_buf_done);
	gmp_cupti_result (*flush_all)(uint32_t flag);
	gmp_cupti_result (*next_record)(uint8_t *buffer, size_t valid,
					void **record);
	gmp_cupti_result (*timestamp)(uint64_t *);
};

#endif
