"""gpumutex-run (src/preload's launcher): version and help, usage errors,
the checks of variables and of the lock directory before anything runs,
the environment it sets, the library override, exit statuses, exec in
place, and a job end to end on the fake driver. Shared with
test_preload.py: tests/preloadlib.py."""

import os
import re
import shutil
import subprocess

import pytest

from preloadlib import LIB, RUN, T, TIMEOUT, assert_caught, grun, kv
from preloadlib import built, env  # noqa: F401 (fixtures)


# ---- gpumutex-run ------------------------------------------------------------

def test_run_version_and_help(env):
    r = grun(["--version"], env)
    assert (r.returncode, r.stdout) == (0, "gpumutex-run 0.1.0\n")
    r = grun(["--help"], env)
    assert r.returncode == 0
    for word in ("--visible-devices", "--num-devices", "--lock-dir",
                 "--timeout", "--quiet", "--help", "--version",
                 "GPUMUTEX_VISIBLE_DEVICES", "GPUMUTEX_NUM_DEVICES",
                 "GPUMUTEX_LOCK_DIR", "GPUMUTEX_TIMEOUT", "GPUMUTEX_QUIET",
                 "GPUMUTEX_JOB", "GPUMUTEX_LIBRARY", "LD_PRELOAD",
                 "default 1", "/tmp/libgpumutex", "wait forever"):
        assert word in r.stdout, word


@pytest.mark.parametrize("args", [
    [],
    ["--bogus", "--", "true"],
    ["--visible-devices"],
    ["--visible-devices", "a", "--", "true"],
    ["--visible-devices=0,0", "--", "true"],
    ["--visible-devices", "0,1", "--num-devices", "3", "--", "true"],
    ["--lock-dir", "relative", "--", "true"],
    ["--timeout", "x", "--", "true"],
    ["--visible-devices", "0"],
], ids=lambda a: " ".join(a) or "nothing")
def test_run_usage_errors(env, args):
    r = grun(args, env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("gpumutex-run: ")
    assert r.stdout == ""


def test_run_checks_variables_too(env):
    env["GPUMUTEX_QUIET"] = "off"
    r = grun(["--", "true"], env)
    assert r.returncode == 2, r.stderr
    assert 'GPUMUTEX_QUIET="off"' in r.stderr and "expected 1" in r.stderr
    del env["GPUMUTEX_QUIET"]
    env["GPUMUTEX_NUM_DEVICES"] = "9"
    r = grun(["--", "true"], env)
    assert r.returncode == 2 and "GPUMUTEX_NUM_DEVICES" in r.stderr
    del env["GPUMUTEX_VISIBLE_DEVICES"]
    del env["GPUMUTEX_NUM_DEVICES"]
    r = grun(["--", "true"], env)
    assert r.returncode == 2 and "--visible-devices" in r.stderr


@pytest.mark.parametrize("var,value", [
    ("GPUMUTEX_RECHECK_MS", "soon"), ("GPUMUTEX_RECHECK_MS", "-1"),
    ("GPUMUTEX_RECHECK_MS", "86400001"), ("GPUMUTEX_QUIET", "yes"),
    ("GPUMUTEX_LOCK_DIR", "x" * 10),
])
def test_run_checks_variables_without_a_flag(env, tmp_path, var, value):
    """Variables gpumutex-run has no flag for are checked as the library
    reads them: exit 2 naming the variable, and the command never runs
    (rather than running with a cuInit that fails)."""
    marker = tmp_path / "ran"
    env[var] = value
    r = grun(["--", "touch", marker], env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("gpumutex-run: ")
    assert '%s="%s"' % (var, value) in r.stderr
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["file", "symlink", "open-dir",
                                  "parent-is-a-file"])
def test_run_checks_the_lock_directory(env, tmp_path, kind):
    """An unusable lock directory is gpumutex-run's setup error (exit 2,
    the path and the reason in the message), not CUDA_ERROR_NO_DEVICE in
    the command's cuInit."""
    bad = tmp_path / "bad"
    why = {"file": "exists but is not a directory",
           "symlink": "symbolic link", "open-dir": "unsafe permissions",
           "parent-is-a-file": "a component of the path above it is not a "
                               "directory"}
    if kind == "file":
        bad.write_text("")
    elif kind == "symlink":
        (tmp_path / "real").mkdir()
        bad.symlink_to(tmp_path / "real")
    elif kind == "open-dir":
        bad.mkdir()
        bad.chmod(0o777)  # writable by all, not sticky
    else:
        (tmp_path / "parent").write_text("")
        bad = tmp_path / "parent" / "locks"
    marker = tmp_path / "ran"
    for args in (["--lock-dir", bad], []):
        e = dict(env) if args else dict(env, GPUMUTEX_LOCK_DIR=str(bad))
        r = grun(args + ["--", "touch", marker], e)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("gpumutex-run: cannot use the lock "
                                   "directory %s (%s)" % (
                                       bad, "--lock-dir" if args else
                                       "GPUMUTEX_LOCK_DIR")), r.stderr
        assert why[kind] in r.stderr, r.stderr
        assert not marker.exists()


def test_run_makes_a_missing_lock_directory(env, tmp_path):
    """As the command's first cuInit would: mode 1777, with the device
    files of the managed GPUs; then the command runs."""
    d = tmp_path / "new" / "locks"
    (tmp_path / "new").mkdir()
    r = grun(["--lock-dir", d, "--visible-devices", "0,3", "--", "true"], env)
    assert r.returncode == 0, r.stderr
    assert (d.stat().st_mode & 0o7777) == 0o1777
    assert sorted(os.listdir(d / "dev")) == ["0", "3"]


def test_run_refuses_an_empty_visible_devices(env, tmp_path):
    """Empty GPUMUTEX_VISIBLE_DEVICES is "not configured" for the library;
    gpumutex-run, whose job is to queue the command, refuses it (exit 2,
    the command does not run) unless --visible-devices is given."""
    marker = tmp_path / "ran"
    env["GPUMUTEX_VISIBLE_DEVICES"] = ""
    r = grun(["--", "touch", marker], env)
    assert r.returncode == 2, r.stderr
    assert "GPUMUTEX_VISIBLE_DEVICES is empty" in r.stderr
    assert "--visible-devices" in r.stderr
    assert not marker.exists()
    r = grun(["--visible-devices=", "--", "touch", marker], env)
    assert r.returncode == 2 and "--visible-devices is empty" in r.stderr
    assert not marker.exists()
    out = kv(grun(["--visible-devices", "1", "--", "env"], env).stdout)
    assert out["GPUMUTEX_VISIBLE_DEVICES"] == "1"


def test_run_sets_the_environment(env, tmp_path):
    other = T / "libnexttwo.so"
    env.update(GPUMUTEX_VISIBLE_DEVICES="0", GPUMUTEX_NUM_DEVICES="1",
               GPUMUTEX_JOB="inherited", LD_PRELOAD=str(other))
    r = grun(["--visible-devices=2,3", "--num-devices", "2", "--lock-dir",
              tmp_path / "l2", "--timeout=7", "--quiet", "--", "env"], env)
    assert r.returncode == 0, r.stderr
    out = kv(r.stdout)
    assert out["GPUMUTEX_VISIBLE_DEVICES"] == "2,3"
    assert out["GPUMUTEX_NUM_DEVICES"] == "2"
    assert out["GPUMUTEX_LOCK_DIR"] == str(tmp_path / "l2")
    assert out["GPUMUTEX_TIMEOUT"] == "7"
    assert out["GPUMUTEX_QUIET"] == "1"
    assert re.fullmatch(r"[0-9a-f]{32}", out["GPUMUTEX_JOB"])
    assert out["LD_PRELOAD"] == "%s:%s" % (LIB, other)
    again = kv(grun(["--", "env"], env).stdout)
    assert again["GPUMUTEX_JOB"] != out["GPUMUTEX_JOB"]  # always fresh
    assert again["GPUMUTEX_VISIBLE_DEVICES"] == "0"  # the variable


def test_run_library_override(env, tmp_path):
    copy = tmp_path / "copy.so"
    shutil.copy(LIB, copy)
    env["GPUMUTEX_LIBRARY"] = str(copy)
    out = kv(grun(["--", "env"], env).stdout)
    assert out["LD_PRELOAD"] == str(copy)


def test_run_exit_status(env, tmp_path):
    assert grun(["--", "sh", "-c", "exit 7"], env).returncode == 7
    r = grun(["--", "no-such-command-gpumutex"], env)
    assert r.returncode == 127 and "no-such-command-gpumutex" in r.stderr
    plain = tmp_path / "notexec"
    plain.write_text("#!/bin/sh\n")
    assert grun(["--", plain], env).returncode == 126
    r = grun(["true"], env)  # no "--"
    assert r.returncode == 0


def test_run_execs_in_place(env):
    p = subprocess.Popen([str(RUN), "--", "sh", "-c", "echo $$"], env=env,
                         stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=TIMEOUT)
    assert int(out) == p.pid


def test_run_end_to_end(env):
    res = grun(["--num-devices", "2", "--", T / "cuprobe", "dlopen"], env)
    ev = assert_caught(env, res, n=2)
    assert ev["cvd"] == "0,1"
