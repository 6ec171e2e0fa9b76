"""?gesvd and ?gesdd on the GPU path answer as LAPACK does where callers
look (found by SciPy's own tests on the H200, forced offload):

- A is destroyed: LAPACK leaves its work in A (jobs other than 'O'), and
  SciPy's overwrite_a tests check that the memory was reused. The
  frontend copies the GPU's A back (in-out, committed with the rest).
- A NaN in A: LAPACK's ?gesdd answers info = -4 (SciPy then raises
  "... NaN"), where a GPU library computes NaN singular values; a NaN
  among them sends the call to the CPU.

Under Debian's SciPy and LAPACK with the CPU test backend, every GPU-
capable call forced to the (test) GPU."""
import json
import subprocess

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("scipy")

import ofront as F

pytestmark = F.needs_lapack

PROG = r"""
import json, sys
import numpy as np
import scipy.linalg as sl
from scipy.linalg import lapack as L
out = {}
for driver in ("gesdd", "gesvd"):
    for m, n in ((3, 5), (5, 3)):
        for dt in (float, complex):
            a = np.arange(m * n).reshape(m, n).astype(dt, order="F")
            ref = a.copy()
            u, s, vh = sl.svd(a, lapack_driver=driver, full_matrices=False,
                              overwrite_a=True, check_finite=False)
            out["%s %dx%d %s" % (driver, m, n, dt.__name__)] = {
                "ok": bool(np.allclose(u @ np.diag(s) @ vh, ref, atol=1e-10)),
                "changed": bool((a != ref).any())}
a = np.eye(2)
a[0, 0] = np.nan
out["dgesdd nan info"] = int(L.dgesdd(a)[-1])
out["zgesdd nan info"] = int(L.zgesdd(a.astype(complex))[-1])
print(json.dumps(out))
"""


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()


def run(tmp, mode):
    env = F.env(tmp, mode, GPU_OFFLOAD_MIN_FLOPS=0) if mode else F.env(tmp)
    p = subprocess.run([F.PY, "-c", PROG], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return run(tmp_path_factory.mktemp("plain"), None)


def test_destroyed_a_comes_back_like_the_cpu_librarys(tmp_path, plain):
    got = run(tmp_path, "gpu")
    ops = {r[0] for r in F.runs(tmp_path)}
    assert {50, 51} <= ops, "the svds did not reach the (test) GPU"
    for case, r in got.items():
        if "nan" in case:
            continue
        assert r["ok"], case
        # as without the offloader: LAPACK left its work in A
        assert r["changed"] == plain[case]["changed"] == True, case  # noqa: E712


def test_nan_in_a_gets_lapacks_answer(tmp_path, plain):
    got = run(tmp_path, "gpu")
    assert plain["dgesdd nan info"] == -4   # this LAPACK checks (3.10 on)
    assert got["dgesdd nan info"] == plain["dgesdd nan info"]
    assert got["zgesdd nan info"] == plain["zgesdd nan info"]
