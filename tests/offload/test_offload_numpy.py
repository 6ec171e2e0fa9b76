"""Debian's NumPy and SciPy (reference BLAS/LAPACK or OpenBLAS, standard
names, loaded by extension modules with RTLD_LOCAL) under libgpuoffload.so:
the CPU path is bit-identical to running without it, the GPU path (the
test backend) gives the expected results, and numpy.linalg's own test
suite passes with every call it makes sent to the (test) GPU."""
import importlib.util
import subprocess

import pytest

np = pytest.importorskip("numpy")

import ofront as F

pytestmark = F.needs_lapack

NPCHECK = str(F.REPO / "tests" / "offload" / "npcheck.py")


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()


def npcheck(tmp_path, tag, env):
    out = tmp_path / f"{tag}.npz"
    p = subprocess.run([F.PY, NPCHECK, str(out)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stdout == "npcheck ok\n", p.stdout + p.stderr
    return dict(np.load(out)), p.stderr


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("np")
    r, err = npcheck(tmp, "ref", F.env(tmp))
    assert err == ""
    return r


@pytest.mark.parametrize("mode", ["cpu", ""])
def test_numpy_cpu_path_is_bit_identical(tmp_path, ref, mode):
    got, err = npcheck(tmp_path, "cpu", F.env(tmp_path, mode))
    assert err == ""
    assert sorted(got) == sorted(ref)
    for k in ref:
        assert got[k].dtype == ref[k].dtype and got[k].tobytes() == ref[k].tobytes(), k
    assert F.runs(tmp_path) == []


def _cols_match(r, g, tol):
    """Columns equal up to a phase (eigen-/singular vectors)."""
    for j in range(r.shape[1]):
        c = abs(np.vdot(r[:, j], g[:, j])) / (np.linalg.norm(r[:, j]) * np.linalg.norm(g[:, j]))
        if not abs(c - 1) < tol:
            return False
    return True


def test_numpy_gpu_path_gives_the_expected_results(tmp_path, ref):
    got, err = npcheck(tmp_path, "gpu", F.env(tmp_path, "gpu"))
    assert err == ""
    for k in ref:
        r, g = ref[k], got[k]
        if k in ("eigh_v", "zeigh_v", "svd_u"):
            assert _cols_match(r, g, 1e-8), k
        elif k == "svd_vt":
            assert _cols_match(r.T, g.T, 1e-8), k
        elif k == "piv":
            assert np.array_equal(r, g), k
        elif k == "qr_r":       # R is unique up to the signs of its rows
            assert np.allclose(abs(r), abs(g), rtol=0, atol=1e-9 * abs(r).max()), k
        else:
            tol = 2e-3 if r.dtype in (np.float32, np.complex64) else 1e-8
            assert abs(r - g).max() <= tol * abs(r).max(), k
    ran = {(op, prec) for op, prec, _ in F.runs(tmp_path)}
    want = {("gemm", "d"), ("gemm", "s"), ("gemm", "z"), ("syrk", "d"),
            ("gesv", "d"), ("gesv", "z"), ("syevd", "d"), ("heevd", "z"),
            ("gesdd", "d"), ("potrf", "d"), ("getrf", "d"), ("getrs", "d"),
            ("geqrf", "d")}
    assert {(F.OP[o], p) for o, p in want} <= ran, sorted(ran)


@pytest.mark.skipif(importlib.util.find_spec("hypothesis") is None,
                    reason="numpy's test suite needs python3-hypothesis")
def test_numpy_linalg_suite_passes_with_every_call_offloaded(tmp_path):
    """numpy.linalg's own tests, every BLAS/LAPACK call the table has sent
    to the test backend whatever its size (threshold 0)."""
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0)
    p = subprocess.run([F.PY, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--pyargs", "numpy.linalg"], env=e, cwd=tmp_path,
                       capture_output=True, text=True, timeout=900)
    tail = p.stdout[-3000:] + p.stderr[-2000:]
    assert p.returncode == 0, tail
    assert " passed" in p.stdout and " failed" not in p.stdout, tail
    assert len(F.runs(tmp_path)) > 100, tail
