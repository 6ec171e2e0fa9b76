/*
 * profile.h - the machine profile: what this machine's CPU library, GPU
 * and bus cost, as a plain text file a person can read and edit.
 *
 * The format (docs/offload.md, "The machine profile"), one item a line,
 * '#' starts a comment, blanks separate fields:
 *
 *   gpu-offload-profile 1          first line: format and version
 *   source test-backend            free text: who measured (informative)
 *   cpu-library PATH               free text: the CPU library measured
 *   calibration TEXT               free text: when, how long, repeats
 *   startup 0.35                   GPU start-up cost, seconds
 *   h2d 1.2e-05 2.1e+10            host to device: fixed s, bytes/s
 *   d2h 1.1e-05 2.2e+10            device to host: fixed s, bytes/s
 *   cpu dgemm 1e6:2.1e10 1e9:8.3e10 ...   speed curve: flops:flops/s
 *   gpu dgemm 1e6:1.0e9  1e9:5.0e12 ...   (GPU compute only, no copies)
 *
 * A curve is named by the precision letter and the operation's name
 * (gpo_op_name: "gemm", "getrf", ...), up to GPO_CURVE_MAX points in
 * increasing work. Unknown keywords are skipped (a newer writer may add
 * some); a malformed line is an error naming its number.
 */
#ifndef GPUOFFLOAD_PROFILE_H
#define GPUOFFLOAD_PROFILE_H

#include <stddef.h>

#define GPO_CURVE_MAX 16
#define GPO_PROFILE_VERSION 1

struct gpo_curve {
	char dev;                   /* 'c' cpu, 'g' gpu */
	char prec;                  /* s d c z */
	char op[16];                /* "gemm" */
	int n;
	double work[GPO_CURVE_MAX]; /* flops, increasing, > 0 */
	double speed[GPO_CURVE_MAX];/* flops per second, > 0 */
	/* ln of work[] and speed[], by gpo_curve_prepare (model.h: the
	 * policy prepares the profile it loaded), so that an interpolation on
	 * the per-call path costs one ln and one exp; ln_ready 0 (the reader
	 * leaves it so): gpo_curve_speed takes them as it goes. */
	int ln_ready;
	double lnwork[GPO_CURVE_MAX];
	double lnspeed[GPO_CURVE_MAX];
};

struct gpo_profile {
	char source[64];
	char cpu_library[256];      /* the CPU library measured (informative) */
	char calibration[256];      /* how it went (informative) */
	double startup_s;           /* < 0: not given */
	double h2d_fixed, h2d_bw;   /* bw <= 0: not given */
	double d2h_fixed, d2h_bw;
	int ncurves;
	struct gpo_curve *curves;   /* heap */
};

/* Parse the text `buf` (`len` bytes) into `p`. Returns 0, or -EINVAL with
 * "line N: what" in err, or -ENOMEM. On error `p` holds nothing to free. */
int gpo_profile_parse(const char *buf, size_t len, struct gpo_profile *p,
		      char *err, size_t errlen);
/* Read and parse the file `path` (at most 1 MiB). 0 or -errno / -EINVAL. */
int gpo_profile_load(const char *path, struct gpo_profile *p, char *err,
		     size_t errlen);
/* Write `p` in the format above to `buf`; returns the length it needs
 * (as snprintf). */
size_t gpo_profile_format(const struct gpo_profile *p, char *buf,
			  size_t len);
void gpo_profile_free(struct gpo_profile *p);
/* The curve of (dev, prec, op), or NULL. */
const struct gpo_curve *gpo_profile_curve(const struct gpo_profile *p,
					  char dev, char prec,
					  const char *op);
/* The profile's path: $GPU_OFFLOAD_PROFILE, else
 * $XDG_CONFIG_HOME/gpu-offload/profile, else ~/.config/gpu-offload/profile
 * ($HOME). Returns 0, or -ENOENT when none can be formed. */
int gpo_profile_path(char *buf, size_t len);

/* Numbers without the C library's strtod (see src/lease/num.c for why):
 * [digits][.digits][e[+-]digits], no sign, no inf/nan. Reads the longest
 * such prefix of `s`; 0 and *end set, or -EINVAL. */
int gpo_scan_double(const char *s, double *out, const char **end);

#endif
