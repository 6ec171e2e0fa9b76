"""Helpers of the offload frontend's tests: the build, the environment of
a program run under libgpuoffload.so with the test backend, the test
backend's journal, and comparisons of opcheck's outputs."""
import ctypes.util
import os
import pathlib
import shutil
import struct
import subprocess

import pytest

try:
    import numpy as np
except ImportError:         # the distro-check roots have no NumPy
    np = None

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
LIB = BUILD / "libgpuoffload.so"
TESTBE = BUILD / "libgpuoffload-test.so"
T = BUILD / "tests" / "offload"
PY = "/usr/bin/python3"

# The host-only test packages (.ci/packages, below its marker): NumPy and
# SciPy, whose dependencies bring libblas.so.3/liblapack.so.3, and gfortran.
HAVE_LAPACK = bool(ctypes.util.find_library("lapack") and ctypes.util.find_library("blas"))
HAVE_NUMPY = np is not None
HAVE_FC = shutil.which("gfortran") is not None
needs_lapack = pytest.mark.skipif(not (HAVE_LAPACK and HAVE_NUMPY),
                                  reason="needs python3-numpy (libblas3, liblapack3)")
needs_fc = pytest.mark.skipif(not HAVE_FC, reason="needs gfortran")

_built = False
_tracking = None


def tracking():
    """Whether this kernel has what residency's write tracking needs
    (asynchronous userfaultfd write-protection, Linux 6.7+): the probe
    exits 77 when not."""
    global _tracking
    if _tracking is None:
        probe = T / "wtprobe"
        subprocess.run(["make", "-C", str(REPO), "-s",
                        str(probe.relative_to(REPO))],
                       check=True, stdout=subprocess.DEVNULL)
        p = subprocess.run([str(probe), "--cases"], capture_output=True,
                           text=True, timeout=120)
        _tracking = p.returncode != 77
    return _tracking


NO_TRACKING = "no async userfaultfd write-protect (Linux 6.7+)"


def build():
    global _built
    if not _built:
        # The test programs link the system's libblas.so.3/liblapack.so.3,
        # which the distro-check roots do not have: there only the library
        # itself is built (and its own tests run).
        goals = (["offload"] + (["offload-tests"] if HAVE_LAPACK else [])
                 + (["offload-ftests"] if HAVE_FC and HAVE_LAPACK else []))
        subprocess.run(["make", "-C", str(REPO), "-s"] + goals,
                       check=True, stdout=subprocess.DEVNULL)
        _built = True


def env(tmp, mode=None, backend=TESTBE, **extra):
    """Environment for a program under the offloader. mode: None (no
    preload), "cpu"/"gpu" (GPU_OFFLOAD_FORCE), or "" (preload, policy
    default)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("GPU_OFFLOAD") and k != "LD_PRELOAD"}
    if mode is None:
        return e
    e["LD_PRELOAD"] = str(LIB)
    if mode:
        e["GPU_OFFLOAD_FORCE"] = mode
    if backend is not None:
        e["GPU_OFFLOAD_BACKEND"] = str(backend)
    e["GPU_OFFLOAD_TEST_JOURNAL"] = str(pathlib.Path(tmp) / "be.journal")
    e.update({k: str(v) for k, v in extra.items()})
    return e


def journal(tmp):
    """The test backend's journal lines, split."""
    p = pathlib.Path(tmp) / "be.journal"
    if not p.exists():
        return []
    return [line.split() for line in p.read_text().splitlines()]


def opcheck_ref(tmp, *args):
    """opcheck's results without the library (the reference the GPU
    path's are compared with), in tmp/ref; args: its prefix, if any."""
    out = pathlib.Path(tmp) / "ref"
    out.mkdir()
    p = subprocess.run([str(T / "opcheck"), str(out), *args], env=env(tmp),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
    return out


def runs(tmp):
    """(op number, precision, int64) of every kernel the backend ran."""
    return [(int(r[1]), r[2], int(r[7])) for r in journal(tmp) if r[0] == "run"]


def run_pids(tmp):
    return {int(r[8]) for r in journal(tmp) if r[0] == "run"}


OP = {"gemm": 1, "symm": 2, "hemm": 3, "syrk": 4, "herk": 5, "syr2k": 6,
      "her2k": 7, "trmm": 8, "trsm": 9, "getrf": 40, "getrs": 41, "gesv": 42,
      "potrf": 43, "potrs": 44, "posv": 45, "syev": 46, "heev": 47,
      "syevd": 48, "heevd": 49, "gesvd": 50, "gesdd": 51, "geqrf": 52,
      "gels": 53}


def read_out(path):
    data = pathlib.Path(path).read_bytes()
    rows, cols, cplx, cmp, nvec = struct.unpack("<5q", data[:40])
    v = np.frombuffer(data[40:], dtype=np.float64)
    if cplx:
        v = v[0::2] + 1j * v[1::2]
    return v.reshape((cols, rows)).T, cmp, nvec


def compare(ref_dir, got_dir, single_tol=2e-3, double_tol=1e-8):
    """Mismatches between two opcheck output directories (got's files, a
    run of all or of some cases, against the same files of ref):
    values relative to the largest, vectors through |cos| of each pair,
    pivots exactly, LU factors when the pivots agree."""
    bad = []
    ref_dir, got_dir = pathlib.Path(ref_dir), pathlib.Path(got_dir)
    names = sorted(p.name for p in got_dir.iterdir())
    assert names and set(names) <= {p.name for p in ref_dir.iterdir()}
    piv_ok = {}
    for name in names:
        if name.endswith(".ipiv"):
            r, _, _ = read_out(ref_dir / name)
            g, _, _ = read_out(got_dir / name)
            piv_ok[name.rsplit(".", 1)[0]] = np.array_equal(r, g)
    for name in names:
        case = name.rsplit(".", 1)[0]
        tol = single_tol if _prec(case) in "sc" else double_tol
        r, cmp, nvec = read_out(ref_dir / name)
        g, _, _ = read_out(got_dir / name)
        if cmp == 0:
            continue
        if cmp == 4:
            if not np.array_equal(r, g):
                bad.append((name, "pivots differ"))
            continue
        if cmp == 5 and not piv_ok.get(case, True):
            continue
        if cmp in (2, 3):
            if cmp == 3:
                r, g = r.T, g.T
            for j in range(nvec):
                c = abs(np.vdot(r[:, j], g[:, j])) / (
                    np.linalg.norm(r[:, j]) * np.linalg.norm(g[:, j]))
                if not abs(c - 1) <= 50 * tol:
                    bad.append((name, f"vector {j}: |cos| {c}"))
                    break
            continue
        scale = np.abs(r).max() or 1.0
        d = np.abs(r - g).max() / scale
        if not d <= tol:
            bad.append((name, f"differs by {d:.3g} (tolerance {tol})"))
    return bad


def _prec(case):
    for pre in ("cblas_col_", "cblas_row_"):
        if case.startswith(pre):
            return case[len(pre)]
    return case[0]
