/*
 * unit-parse.c - lease-unit's parsing tests: device lists, the number
 * wanted, timeouts, unsigned numbers (gm_parse_uint, the only number
 * parser of src/), job ids, and the configuration read from the
 * environment (gm_config_resolve). Apart from the lock directory and
 * lease tests because these need no directory at all: pure functions of
 * strings and the environment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lease.h"
#include "lease-unit.h"

/* ---- parsing ---------------------------------------------------------- */

void test_parse_devices(void)
{
	int d[GM_MAX_DEVICES], n = -1;
	char err[GM_ERR_MAX];
	static const char *const bad[] = {
		"", "0,,1", "a", "-1", "1,1", "64", ",0", "0,", " 0", "0 ,1",
		"1000", "+1", "0x1", "0;1", "1.5", "99999999999999999999",
	};

	CHECK_INT(gm_parse_devices("V", "0,2,3", d, &n, err, sizeof err), 0);
	CHECK_INT(n, 3);
	CHECK_INT(d[0], 0);
	CHECK_INT(d[1], 2);
	CHECK_INT(d[2], 3);
	CHECK_INT(gm_parse_devices("V", "63", d, &n, err, sizeof err), 0);
	CHECK_INT(d[0], 63);
	CHECK_INT(gm_parse_devices("V", "3,1", d, &n, err, sizeof err), 0);
	CHECK_INT(d[0], 3);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		CHECK_INT(gm_parse_devices("GPUMUTEX_VISIBLE_DEVICES", bad[i], d, &n,
					   err, sizeof err), -EINVAL);
		CHECK_HAS(err, "GPUMUTEX_VISIBLE_DEVICES");
		if (bad[i][0])
			CHECK_HAS(err, bad[i]);
	}
	gm_parse_devices("GPUMUTEX_VISIBLE_DEVICES", "1,1", d, &n, err, sizeof err);
	CHECK_HAS(err, "twice");
	gm_parse_devices("GPUMUTEX_VISIBLE_DEVICES", "", d, &n, err, sizeof err);
	CHECK_HAS(err, "empty");
}

void test_parse_want(void)
{
	int w = 0;
	char err[GM_ERR_MAX];
	static const char *const bad[] = { "0", "-1", "abc", "5", "", "1.0",
					   " 1", "+1", "1x", "99999999999",
					   "\t1", "\n1", "1\n", "0x1",
					   "99999999999999999999999" };

	CHECK_INT(gm_parse_want("N", "1", 4, &w, err, sizeof err), 0);
	CHECK_INT(w, 1);
	CHECK_INT(gm_parse_want("N", "4", 4, &w, err, sizeof err), 0);
	CHECK_INT(w, 4);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		CHECK_INT(gm_parse_want("GPUMUTEX_NUM_DEVICES", bad[i], 4, &w, err,
					sizeof err), -EINVAL);
		CHECK_HAS(err, "GPUMUTEX_NUM_DEVICES");
	}
	gm_parse_want("GPUMUTEX_NUM_DEVICES", "5", 4, &w, err, sizeof err);
	CHECK_HAS(err, "from 1 to 4");
}

void test_parse_timeout(void)
{
	double t = -5;
	char err[GM_ERR_MAX];
	static const char *const bad[] = { "", "-1", "abc", "inf", "nan", "1e3",
					   "0x10", " 1", "1s", ".", "+1", "1.2.3",
					   "\t1", "1 ", "1000000001", "-0",
					   "99999999999999999999999", "1.5e2" };

	CHECK_INT(gm_parse_timeout("T", "0", &t, err, sizeof err), 0);
	CHECK(t == 0);
	CHECK_INT(gm_parse_timeout("T", "0.5", &t, err, sizeof err), 0);
	CHECK(t == 0.5);
	CHECK_INT(gm_parse_timeout("T", "30", &t, err, sizeof err), 0);
	CHECK(t == 30);
	CHECK_INT(gm_parse_timeout("T", ".25", &t, err, sizeof err), 0);
	CHECK(t == 0.25);
	CHECK_INT(gm_parse_timeout("T", "5.", &t, err, sizeof err), 0);
	CHECK(t == 5);
	CHECK_INT(gm_parse_timeout("T", "1000000000", &t, err, sizeof err), 0);
	CHECK(t == 1e9);
	gm_parse_timeout("GPUMUTEX_TIMEOUT", "1e3", &t, err, sizeof err);
	CHECK_HAS(err, "from 0 to 1000000000");
	gm_parse_timeout("GPUMUTEX_TIMEOUT", "1000000001", &t, err, sizeof err);
	CHECK_HAS(err, "out of range");
	gm_parse_timeout("GPUMUTEX_TIMEOUT", "inf", &t, err, sizeof err);
	CHECK_HAS(err, "from 0 to 1000000000");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		CHECK_INT(gm_parse_timeout("GPUMUTEX_TIMEOUT", bad[i], &t, err,
					   sizeof err), -EINVAL);
		CHECK_HAS(err, "GPUMUTEX_TIMEOUT");
	}
}

void test_parse_uint(void)
{
	uint64_t v = 7;
	const char *end = NULL;

	CHECK_INT(gm_parse_uint("0", 10, 5, &v), 0);
	CHECK(v == 0);
	CHECK_INT(gm_parse_uint("18446744073709551615", 10, UINT64_MAX, &v), 0);
	CHECK(v == UINT64_MAX);
	CHECK_INT(gm_parse_uint("18446744073709551616", 10, UINT64_MAX, &v),
		  -ERANGE);
	CHECK_INT(gm_parse_uint("6", 10, 5, &v), -ERANGE);
	CHECK_INT(gm_parse_uint("ffffffffffffffff", 16, UINT64_MAX, &v), 0);
	CHECK(v == UINT64_MAX);
	CHECK_INT(gm_parse_uint("DEADbeef", 16, UINT64_MAX, &v), 0);
	CHECK(v == 0xdeadbeef);
	v = 7;
	static const char *const bad[] = { "", " 1", "+1", "-0", "1 ", "0x1",
					   "\t1", "1\n", "a" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK_INT(gm_parse_uint(bad[i], 10, UINT64_MAX, &v), -EINVAL);
	CHECK_INT(gm_parse_uint(NULL, 10, UINT64_MAX, &v), -EINVAL);
	CHECK_INT(gm_parse_uint("99999999999999999999x", 10, UINT64_MAX, &v),
		  -EINVAL);
	CHECK(v == 7);
	CHECK_INT(gm_scan_uint("12.5", 10, 100, &v, &end), 0);
	CHECK(v == 12 && *end == '.');
	CHECK_INT(gm_scan_uint("x", 10, 100, &v, &end), -EINVAL);
	CHECK_INT(gm_scan_uint("1", 8, 100, &v, &end), -EINVAL);
}

void test_job(void)
{
	char j[GM_JOB_MAX + 1], k[GM_JOB_MAX + 1], err[GM_ERR_MAX];
	char longid[GM_JOB_MAX + 2];

	gm_job_generate(j);
	gm_job_generate(k);
	CHECK_INT(strlen(j), 32);
	CHECK(strcmp(j, k) != 0);
	CHECK_INT(gm_job_check("J", j, err, sizeof err), 0);
	CHECK_INT(gm_job_check("J", "a-b_C9", err, sizeof err), 0);
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", "", err, sizeof err), -EINVAL);
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", "a/b", err, sizeof err), -EINVAL);
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", "..", err, sizeof err), -EINVAL);
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", "a.lease", err, sizeof err), -EINVAL);
	memset(longid, 'x', sizeof longid - 1);
	longid[sizeof longid - 1] = '\0';
	CHECK_INT(gm_job_check("GPUMUTEX_JOB", longid, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_JOB");
}

void test_config_env(void)
{
	struct gm_config c;
	char err[GM_ERR_MAX];

	unsetenv("GPUMUTEX_VISIBLE_DEVICES");
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), 1);

	setenv("GPUMUTEX_VISIBLE_DEVICES", "0,1,2,3", 1);
	unsetenv("GPUMUTEX_NUM_DEVICES");
	unsetenv("GPUMUTEX_LOCK_DIR");
	unsetenv("GPUMUTEX_TIMEOUT");
	unsetenv("GPUMUTEX_JOB");
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
	CHECK_INT(c.ndevices, 4);
	CHECK_INT(c.want, 1);
	CHECK(c.timeout_s < 0);
	CHECK(strcmp(c.lock_dir, GM_DEFAULT_LOCK_DIR) == 0);
	CHECK_INT(c.job[0], 0);

	setenv("GPUMUTEX_NUM_DEVICES", "5", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_NUM_DEVICES=\"5\"");
	setenv("GPUMUTEX_NUM_DEVICES", "2", 1);
	setenv("GPUMUTEX_LOCK_DIR", "relative/dir", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_LOCK_DIR=\"relative/dir\"");
	setenv("GPUMUTEX_LOCK_DIR", "", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	setenv("GPUMUTEX_LOCK_DIR", "/x/y", 1);
	setenv("GPUMUTEX_TIMEOUT", "soon", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_TIMEOUT=\"soon\"");
	setenv("GPUMUTEX_TIMEOUT", "2.5", 1);
	setenv("GPUMUTEX_JOB", "bad/job", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "GPUMUTEX_JOB");
	setenv("GPUMUTEX_JOB", "good-job", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
	CHECK_INT(c.want, 2);
	CHECK(c.timeout_s == 2.5);
	CHECK(strcmp(c.job, "good-job") == 0);
	CHECK(strcmp(c.lock_dir, "/x/y") == 0);
	{
		static const char *const bad[] = { " 5", "+5", "-0", "5 ", "",
						   "86400001", "0x10", "1e3" };
		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			setenv("GPUMUTEX_RECHECK_MS", bad[i], 1);
			CHECK_INT(gm_config_from_env(&c, err, sizeof err),
				  -EINVAL);
			CHECK_HAS(err, "GPUMUTEX_RECHECK_MS");
		}
		setenv("GPUMUTEX_RECHECK_MS", "0", 1);
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.recheck_ms, 0);
		setenv("GPUMUTEX_RECHECK_MS", "86400000", 1);
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.recheck_ms, 86400000);
		unsetenv("GPUMUTEX_RECHECK_MS");
	}
	setenv("GPUMUTEX_VISIBLE_DEVICES", "0,,1", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), -EINVAL);
	CHECK_HAS(err, "0,,1");
	setenv("GPUMUTEX_VISIBLE_DEVICES", "0", 1);
	unsetenv("GPUMUTEX_NUM_DEVICES");
	{
		static const char *const bad[] = { "", "false", "no", "off",
						   "yes", "true", "2", "00",
						   " 1", "1 " };
		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			setenv("GPUMUTEX_QUIET", bad[i], 1);
			CHECK_INT(gm_config_from_env(&c, err, sizeof err),
				  -EINVAL);
			CHECK_HAS(err, "GPUMUTEX_QUIET=\"");
			CHECK_HAS(err, bad[i]);
			CHECK_HAS(err, "expected 1");
		}
		setenv("GPUMUTEX_QUIET", "1", 1);
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.quiet, 1);
		setenv("GPUMUTEX_QUIET", "0", 1);
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.quiet, 0);
		unsetenv("GPUMUTEX_QUIET");
		CHECK_INT(gm_config_from_env(&c, err, sizeof err), 0);
		CHECK_INT(c.quiet, 0);
	}
	/* Empty is not configured, like unset, whatever the others say. */
	setenv("GPUMUTEX_VISIBLE_DEVICES", "", 1);
	setenv("GPUMUTEX_NUM_DEVICES", "x", 1);
	CHECK_INT(gm_config_from_env(&c, err, sizeof err), 1);
	unsetenv("GPUMUTEX_NUM_DEVICES");
}
