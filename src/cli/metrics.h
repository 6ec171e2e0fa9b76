/*
 * metrics.h - `gpumutex metrics` (metrics.c) and its HTTP server
 * (metrics_http.c).
 */
#ifndef GPUMUTEX_CLI_METRICS_H
#define GPUMUTEX_CLI_METRICS_H

#include <stddef.h>
#include <stdio.h>

int gm_metrics_main(int argc, char **argv);

/* Write the exposition of lock directory `dir` to f. 0, or -1 when the
 * directory cannot be read: then only gpumutex_up 0 (and
 * gpumutex_lock_dir_exists) are written, and why[] says why. */
int gm_metrics_render(const char *dir, FILE *f, char *why, size_t whylen);

/* The same into a malloc'ed buffer (*out, *len; free it even on error):
 * 0, -1 (as above), or -2 (out of memory, why[] says so). */
int gm_metrics_text(const char *dir, char **out, size_t *len, char *why,
		    size_t whylen);

/* Serve GET /metrics at `where` ("[HOST:]PORT", HOST 127.0.0.1 unless
 * named; "[::1]:PORT" for IPv6) until SIGINT or SIGTERM, one connection at
 * a time, each bounded in time and size. Returns the exit status. */
int gm_metrics_serve(const char *dir, const char *where);

#endif
