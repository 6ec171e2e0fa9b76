"""The build under `make -j`: a generator that writes two files runs once.

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
