"""`gpu-offload calibrate` (docs/offload.md, "Calibration") with the CPU
test backend as its GPU: the profile is written where `gpu-offload
profile` finds it and parsed; calls with info != 0 and GPU calls that
failed are left out; the canary's repeat rule, on synthetic timings
(calib-unit.c) and through a hook that makes one point's canary slow; the
CPU library chosen by its symbols (the wheels' 64-bit scipy_ names) or
asked of numpy. No timing thresholds: which calls and points count, never
how fast they were."""

import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import BUILD, REPO  # noqa: E402
from policylib import GPU_OFFLOAD, GUARD, have_lapack, needs_lapack  # noqa: E402
import ofront as F  # noqa: E402

TESTBE = os.path.join(BUILD, "libgpuoffload-test.so")
CALIB_UNIT = os.path.join(BUILD, "tests", "offload", "calib-unit")
SBLAS = os.path.join(BUILD, "tests", "offload", "libsblas.so")
SMALL = ["--max-size", "128", "--reps", "2"]


@pytest.fixture(scope="module", autouse=True)
def build():
    # The stand-in scipy_ BLAS needs no system BLAS; the other test
    # programs do, and the distro-check roots have none.
    goals = ["all", os.path.join("build", "tests", "offload", "libsblas.so")]
    if have_lapack():
        goals.append("offload-tests")
    subprocess.run(["make", "-C", REPO, "-s"] + goals, check=True)



def clean_env(tmp_path, **extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("GPU_OFFLOAD_", "GPUMUTEX_", "GPO_CALIB_"))}
    e.update(extra)
    return e


def calibrate(tmp_path, args, e=None, out=None):
    out = out or tmp_path / "cfg" / "profile"
    e = e if e is not None else clean_env(tmp_path)
    r = subprocess.run([GPU_OFFLOAD, "calibrate", "--output", str(out),
                        "--backend", TESTBE, *args], env=e,
                       capture_output=True, text=True, timeout=GUARD)
    return r, out


def curves(text):
    """{('cpu', 'dgemm'): [work, ...]} of a profile's text."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0] in ("cpu", "gpu"):
            out[(f[0], f[1])] = [float(p.split(":")[0]) for p in f[2:]]
    return out


def pass_line(err, dev):
    m = [l for l in err.splitlines() if l.startswith(f"gpu-offload: {dev} pass:")
         and "measured again after" in l]
    assert len(m) == 1, err
    return m[0]


def test_canary_rule_on_synthetic_timings():
    r = subprocess.run([CALIB_UNIT], capture_output=True, text=True,
                       timeout=GUARD)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr


@needs_lapack
def test_calibrate_writes_a_profile_that_profile_prints(tmp_path):
    r, out = calibrate(tmp_path, SMALL + ["--ops", "sgemm,dgemm,zgemm,dgetrf,dgesv,dpotrf,dsyevd,zheevd,dgesdd,sgesvd",
                                          "--cpu-library", "system"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{out}\n"
    assert f"gpu-offload: the profile is {out}" in r.stderr
    # no complaint about the missing profile of the forced passes
    assert "machine profile" not in r.stderr, r.stderr
    e = clean_env(tmp_path, GPU_OFFLOAD_PROFILE=str(out))
    p = subprocess.run([GPU_OFFLOAD, "profile"], env=e, capture_output=True,
                       text=True, timeout=GUARD)
    assert p.returncode == 0, p.stderr
    text = p.stdout
    assert "source calibrate libgpuoffload-test.so" in text
    assert "cpu-library libblas.so.3:liblapack.so.3" in text
    assert re.search(r"^calibration \S+, \d+ s, 20\+20 points, \d+ measured again, 0 calls left out$",
                     text, re.M), text
    c = curves(text)
    for dev in ("cpu", "gpu"):
        for op in ("sgemm", "dgemm", "zgemm", "dgetrf", "dgesv", "dpotrf",
                   "dsyevd", "zheevd", "dgesdd", "sgesvd"):
            # sizes 64 and 128: two points each
            assert len(c.get((dev, op), [])) == 2, (dev, op, text)
    assert len(c) == 20, text
    m = [l.split() for l in text.splitlines() if l.startswith(("startup",
                                                               "h2d", "d2h"))]
    assert len(m) == 3 and all(float(x) >= 0 for f in m for x in f[1:])


@needs_lapack
def test_the_default_place_is_where_profile_looks(tmp_path):
    xdg = tmp_path / "xdg"
    e = clean_env(tmp_path, XDG_CONFIG_HOME=str(xdg))
    r = subprocess.run([GPU_OFFLOAD, "calibrate", "--backend", TESTBE,
                        "--max-size", "64", "--reps", "1", "--ops", "dgemm",
                        "--cpu-library", "system"],
                       env=e, capture_output=True, text=True, timeout=GUARD)
    want = xdg / "gpu-offload" / "profile"
    assert r.returncode == 0 and r.stdout == f"{want}\n", r.stderr
    p = subprocess.run([GPU_OFFLOAD, "profile"], env=e, capture_output=True,
                       text=True, timeout=GUARD)
    assert p.returncode == 0 and p.stdout.startswith(f"# {want}\n"), p.stderr
    assert ("gpu", "dgemm") in curves(p.stdout)


@needs_lapack
def test_every_operation_and_precision_is_measured(tmp_path):
    r, out = calibrate(tmp_path, ["--max-size", "64", "--reps", "1",
                                  "--cpu-library", "system"])
    assert r.returncode == 0, r.stderr
    c = curves(out.read_text())
    # (gemv: not at size 64, under the residency minimum; see the gemv
    # tests below)
    want = {p + op for op in ("gemm", "getrf", "gesv", "potrf", "gesdd")
            for p in "sdcz"} | {"ssyevd", "dsyevd", "cheevd", "zheevd",
                                "sgesvd", "dgesvd"}
    for dev in ("cpu", "gpu"):
        assert {op for d, op in c if d == dev} == want, sorted(c)


def journal(path):
    return [l.split() for l in path.read_text().splitlines()] if path.exists() else []


@needs_lapack
@pytest.mark.skipif(not F.tracking(), reason=F.NO_TRACKING)
def test_gemv_is_measured_with_its_matrix_resident(tmp_path):
    """gemv's calls are offloaded only with their matrix resident, so the
    workload measures it at the sizes whose matrix reaches the residency
    minimum (here 32769 bytes: s and d 128, c 128, z 64 and 128; d, s and
    c 64 are under it), in both passes; in the GPU pass every measured
    call ran on the GPU, and each point's matrix went to the device once
    (the test backend's journal: one copy of each matrix shape, before
    the measured calls, whose copies are their vectors alone)."""
    j = tmp_path / "be.journal"
    e = clean_env(tmp_path, GPU_OFFLOAD_RESIDENT_MIN="32769",
                  GPU_OFFLOAD_TEST_JOURNAL=str(j), GPO_CALIB_TEST_QUIET="1")
    r, out = calibrate(tmp_path, SMALL + ["--reps", "3", "--ops",
                                          "sgemv,dgemv,cgemv,zgemv",
                                          "--cpu-library", "system"], e)
    assert r.returncode == 0, r.stderr
    c = curves(out.read_text())
    # work 2 n^2, a complex one 4 times that
    want = {"sgemv": [2 * 128 ** 2], "dgemv": [2 * 128 ** 2],
            "cgemv": [8 * 128 ** 2], "zgemv": [8 * 64 ** 2, 8 * 128 ** 2]}
    for dev in ("cpu", "gpu"):
        for op, work in want.items():
            assert c.get((dev, op)) == [pytest.approx(w) for w in work], (dev, op, c)
    assert len(c) == 8, c
    assert "GPU failed or declined: 0" in pass_line(r.stderr, "GPU"), r.stderr
    ev = journal(j)
    runs = [x for x in ev if x[0] == "run" and x[1] == "20"]
    # 5 points, each a copy-in call and 3 measured calls
    assert len(runs) == 5 * 4, runs
    # "to_device WIDTH COLUMNS": a vector is one element wide (at most 16
    # bytes); the matrices copied in are the first call's dgemm 64 (A and
    # B: 512 bytes a column), then each gemv point's matrix once
    mats = sorted((int(x[1]), int(x[2])) for x in ev
                  if x[0] == "to_device" and int(x[1]) > 16)
    assert mats == sorted([(512, 64), (512, 64), (512, 128), (1024, 128),
                           (1024, 128), (1024, 64), (2048, 128)]), mats


def test_gemv_is_not_measured_where_it_is_never_offloaded(tmp_path):
    """Under the default residency minimum (4 MiB: size 128 is far
    below) and with residency off, no gemv call can be offloaded: no gemv
    point is measured, and nothing says the library lacks it."""
    for extra in ({}, {"GPU_OFFLOAD_RESIDENT": "0",
                       "GPU_OFFLOAD_RESIDENT_MIN": "0"}):
        r, out = calibrate(tmp_path, SMALL + ["--ops", "dgemm,dgemv",
                                              "--cpu-library", SBLAS],
                           clean_env(tmp_path, **extra))
        assert r.returncode == 0, r.stderr
        assert {op for _, op in curves(out.read_text())} == {"dgemm"}, extra
        assert "lacks" not in r.stderr, r.stderr


@needs_lapack
def test_a_failed_lapack_point_is_left_out(tmp_path):
    """Singular matrices at dgetrf n=128 (a test hook of the workload):
    every call there has info > 0, on the CPU and (the backend's result
    not being taken) in the GPU pass: none of them is a point."""
    e = clean_env(tmp_path, GPO_CALIB_TEST_SINGULAR="dgetrf:128")
    r, out = calibrate(tmp_path, SMALL + ["--ops", "dgemm,dgetrf",
                                          "--cpu-library", "system"], e)
    assert r.returncode == 0, r.stderr
    c = curves(out.read_text())
    for dev in ("cpu", "gpu"):
        assert len(c[(dev, "dgemm")]) == 2, c
        # only n = 64: 2/3 * 64^3 flops
        assert c[(dev, "dgetrf")] == [pytest.approx(64 ** 3 * 2 / 3, rel=1e-3)], c
    for dev in ("CPU", "GPU"):
        m = re.search(r"(\d+) left out \(info != 0: (\d+), GPU failed or declined: 0\)",
                      pass_line(r.stderr, dev))
        assert m and int(m.group(1)) == int(m.group(2)) >= 1, r.stderr
    assert re.search(r"\d+ measured again, [1-9]\d* calls left out",
                     out.read_text()), out.read_text()


@needs_lapack
def test_a_failed_gpu_call_is_left_out(tmp_path):
    """The backend fails its third kernel (the first is the warm-up call,
    outside every point): that call ran on the CPU and is not a GPU
    point's time. (A quiet canary, so that no point is measured again
    and the third kernel is a kept call.)"""
    e = clean_env(tmp_path, GPU_OFFLOAD_TEST_FAIL="kernel:3",
                  GPO_CALIB_TEST_QUIET="1")
    r, out = calibrate(tmp_path, SMALL + ["--ops", "dgemm",
                                          "--cpu-library", "system"], e)
    assert r.returncode == 0, r.stderr
    assert "GPU failed or declined: 0" in pass_line(r.stderr, "CPU")
    assert "(info != 0: 0, GPU failed or declined: 1)" in pass_line(r.stderr, "GPU")
    assert len(curves(out.read_text())[("gpu", "dgemm")]) == 2


@needs_lapack
def test_a_point_whose_canary_slowed_is_measured_again(tmp_path):
    """The canary after the first measurement of dgemm n=128 reports slow
    (a test hook; every other canary is quiet): that point, and only
    that one, is measured again, only the second measurement's calls are
    used, and the output and the profile say so."""
    e = clean_env(tmp_path, GPO_CALIB_TEST_SLOW="dgemm:128",
                  GPO_CALIB_TEST_QUIET="1")
    r, out = calibrate(tmp_path, SMALL + ["--ops", "dgemm,sgemm",
                                          "--cpu-library", "system"], e)
    assert r.returncode == 0, r.stderr
    for dev in ("CPU", "GPU"):
        line = pass_line(r.stderr, dev)
        assert "1 measured again after a slow canary: dgemm 128;" in line, line
        # the kept measurement's calls only: 2 per point
        assert "8 calls used, 0 left out" in line, line
    assert ", 2 measured again, 0 calls left out" in out.read_text()


def test_the_cpu_library_by_its_symbols(tmp_path):
    """libsblas.so has the wheels' names: scipy_dgemm_64_ (64-bit
    integers) is the scheme taken, and its calls are the CPU curve."""
    r, out = calibrate(tmp_path, ["--max-size", "64", "--reps", "1",
                                  "--ops", "dgemm,dgesv",
                                  "--cpu-library", SBLAS])
    assert r.returncode == 0, r.stderr
    assert f"CPU library {SBLAS} (names scipy_ _64_ 1)" in r.stderr
    c = curves(out.read_text())
    assert {k for k in c} == {(d, o) for d in ("cpu", "gpu")
                              for o in ("dgemm", "dgesv")}, c
    assert "the CPU library lacks" not in r.stderr


def test_numpy_s_library_asked_of_python(tmp_path):
    """--cpu-library numpy asks python3 (GPU_OFFLOAD_PYTHON) for numpy's
    bundled OpenBLAS; a python that names none is an error."""
    fake = tmp_path / "python3"
    fake.write_text(f"#!/bin/sh\necho {SBLAS}\n")
    fake.chmod(0o755)
    e = clean_env(tmp_path, GPU_OFFLOAD_PYTHON=str(fake))
    r, out = calibrate(tmp_path, ["--max-size", "64", "--reps", "1",
                                  "--ops", "dgemm", "--cpu-library", "numpy"], e)
    assert r.returncode == 0, r.stderr
    assert f"cpu-library {SBLAS}" in out.read_text()
    fake.write_text("#!/bin/sh\necho\n")
    r, out = calibrate(tmp_path, ["--cpu-library", "numpy"], e)
    assert r.returncode == 2 and "no numpy with a bundled OpenBLAS" in r.stderr


def test_bad_options(tmp_path):
    for args, msg in ((["--budget", "0"], "--budget takes"),
                      (["--reps", "65"], "--reps takes"),
                      (["--max-size", "32"], "--max-size takes"),
                      (["--frobnicate"], "usage:")):
        r, _ = calibrate(tmp_path, args)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)


def test_the_h200_example_profile_parses():
    e = clean_env(None, GPU_OFFLOAD_PROFILE=os.path.join(REPO, "docs",
                                                         "profile-h200.txt"))
    p = subprocess.run([GPU_OFFLOAD, "profile"], env=e, capture_output=True,
                       text=True, timeout=GUARD)
    assert p.returncode == 0, p.stderr
    c = curves(p.stdout)
    assert ("cpu", "dgemm") in c and ("gpu", "dsyevd") in c, p.stdout
