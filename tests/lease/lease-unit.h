/*
 * lease-unit.h - what the files of lease-unit share: the checks (each
 * failed one counts in `failures` and prints its line), the private
 * directory, descriptor counting, a plain configuration, and the tests
 * each file defines for main's table (lease-unit.c).
 */
#ifndef GM_LEASE_UNIT_H
#define GM_LEASE_UNIT_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "lease.h"

/* Failed checks of the test now running (each test runs in its own
 * child). */
extern int failures;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "  %s:%d: CHECK(%s) failed\n",       \
				__FILE__, __LINE__, #cond);                  \
			failures++;                                          \
		}                                                            \
	} while (0)

#define CHECK_INT(a, b)                                                      \
	do {                                                                 \
		long long _a = (long long)(a), _b = (long long)(b);          \
		if (_a != _b) {                                              \
			fprintf(stderr, "  %s:%d: %s == %lld, expected %s == %lld\n", \
				__FILE__, __LINE__, #a, _a, #b, _b);         \
			failures++;                                          \
		}                                                            \
	} while (0)

#define CHECK_HAS(str, sub)                                                  \
	do {                                                                 \
		if (!strstr((str), (sub))) {                                 \
			fprintf(stderr, "  %s:%d: \"%s\" lacks \"%s\"\n",    \
				__FILE__, __LINE__, (str), (sub));           \
			failures++;                                          \
		}                                                            \
	} while (0)

/* A private directory for the run, mode 0755; removed at the end. */
extern char tmpdir[256];

/* This process's open descriptors. */
int count_fds(void);
/* 1 when this process has exactly one descriptor of an events.log, and
 * it is close-on-exec (the lease's log descriptor). */
int log_fd_cloexec(void);
/* `c` with devices 0..ndev-1, `want` of them, no timeout, lock directory
 * `dir`, job "unitjob". */
void base_config(struct gm_config *c, const char *dir, int ndev, int want);

/* unit-parse.c: parsing and the configuration from the environment */
void test_parse_devices(void);
void test_parse_want(void);
void test_parse_timeout(void);
void test_parse_uint(void);
void test_job(void);
void test_config_env(void);
/* unit-lockdir.c: the lock directory's safety checks */
void test_lockdir_checks(void);

#endif
