"""The build under `make -j`: a generator that writes two files runs once;
plain `make` builds what ships, in parallel, and nothing else; the targets
that run tests build them.

A rule with two targets (`a b: deps`) is two rules to make: under -j both
recipes run at once, and each run of tools/gen-wrappers.sh moves the other
one's temporary files away ("mv: cannot stat 'build/gen/wrappers.c.tmp'"),
which failed `make -j2` now and then (tests/system's setup, the GPU
machine's build). make -n shows how many runs make plans, without timing."""
import os
import subprocess

from conftest import REPO

GEN = ["gen/wrappers.c", "gen/wrap-exports.list"]


def test_driver_wrappers_are_generated_by_one_run(tmp_path):
    b = str(tmp_path / "b")
    r = subprocess.run(["make", "-C", REPO, "-n", "-j2", "B=" + b] +
                       [os.path.join(b, g) for g in GEN],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    runs = [ln for ln in r.stdout.splitlines() if ln.startswith("sh tools/gen-wrappers.sh")]
    assert len(runs) == 1, r.stdout


def test_parallel_build_of_both_files(tmp_path):
    b = str(tmp_path / "b")
    r = subprocess.run(["make", "-C", REPO, "-s", "-j2", "B=" + b] +
                       [os.path.join(b, g) for g in GEN],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert all(os.path.getsize(os.path.join(b, g)) > 0 for g in GEN)
    # The export list alone missing is made again.
    os.unlink(os.path.join(b, GEN[1]))
    r = subprocess.run(["make", "-C", REPO, "-s", "B=" + b, os.path.join(b, GEN[1])],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and os.path.getsize(os.path.join(b, GEN[1])) > 0, r.stderr


SHIP = ["gpumutex", "gpumutex-run", "gpu-offload", "gpu-offload-calib",
        "libgpumutex.so", "libgpuoffload.so", "libgpuoffload-cuda.so",
        "libgpuoffload-test.so"]


def plan(tmp_path, *goals):
    """What `make GOALS` would run from a clean build directory (make -n),
    started afresh as a user's shell starts it (no parent make)."""
    b = str(tmp_path / "b")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "-C", REPO, "-n", "B=" + b,
                        f"FAKECUDA_BUILD={b}/tests/fakecuda"] + list(goals),
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return b, r.stdout


def test_plain_make_builds_what_ships_and_nothing_else(tmp_path):
    b, out = plan(tmp_path)
    for f in SHIP:
        assert f"cp {b}/ungated/{f} {b}/{f}" in out, f
    # No test or benchmark program, no sanitizer build.
    for part in ("/tests/", "/bench/", "/san/", "-fsanitize"):
        assert part not in out, part


def test_the_targets_that_run_tests_build_them(tmp_path):
    b, out = plan(tmp_path, "check-run")
    for f in (f"{b}/tests/lease-unit", f"{b}/tests/lease-unit-san",
              f"{b}/tests/lease-holder"):
        assert f"-o {f} " in out, f
    assert f"cp {b}/ungated/gpumutex {b}/gpumutex" in out
    b, out = plan(tmp_path, "demo-run")
    assert f"-o {b}/demo/fakejob " in out and "/tests/lease-unit" not in out


def test_make_is_parallel_by_default(tmp_path):
    b = str(tmp_path / "b")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "-C", REPO, "-pn", "B=" + b], env=env,
                       capture_output=True, text=True, timeout=120)
    flags = [ln for ln in r.stdout.splitlines() if ln.startswith("MAKEFLAGS = ")]
    # nproc: the CPUs this process may run on
    assert flags and f"-j{len(os.sched_getaffinity(0))}" in flags[0].split(), flags
