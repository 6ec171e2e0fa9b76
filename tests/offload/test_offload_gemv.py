"""gemv on the GPU with its matrix resident (docs/offload-residency.md,
"The model, and level 2"), under the CPU test backend.

gemvcheck (tests/offload/gemvcheck.c) calls dgemv_/zgemv_/cblas_?gemv on
one matrix again and again with new vectors and writes every result; each
test compares them with the same program's without the library (the CPU
library's results), and reads the test backend's journal ("run 20" lines:
gemv kernels) to see where the calls ran. With the tracker's clean()
forced to 1, each case that changes the matrix fails (a stale copy)."""
import array
import pathlib
import subprocess

import pytest

import ofront as F
pytestmark = F.needs_lapack
PROG = F.T / "gemvcheck"
GEMV = 20       # GPO_OP_GEMV


needs_tracking = pytest.mark.skipif(not F.tracking(), reason=F.NO_TRACKING)


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()
    subprocess.run(["make", "-C", str(F.REPO), "-s",
                    str(PROG.relative_to(F.REPO))],
                   check=True, stdout=subprocess.DEVNULL)


def results(tmp, case, mode, **extra):
    """(the results, the gemv kernels the backend ran, stderr)."""
    tmp = pathlib.Path(tmp)
    out = tmp / f"{case}.{mode or 'plain'}.bin"
    e = F.env(tmp, mode, GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_RESIDENT_MIN=0,
              GPU_OFFLOAD_SUMMARY=1, **extra)
    j = tmp / "be.journal"
    if j.exists():
        j.unlink()
    p = subprocess.run([str(PROG), str(out), case], env=e, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and f"{case} done" in p.stdout, p.stdout + p.stderr
    v = array.array("d")
    v.frombytes(out.read_bytes())
    runs = [r for r in F.journal(tmp) if r[0] == "run" and int(r[1]) == GEMV]
    return v, runs, p.stderr


def same(got, ref):
    assert len(got) == len(ref) and len(ref) > 0
    bad = [i for i, (a, b) in enumerate(zip(got, ref))
           if not abs(a - b) <= 1e-10 * (1 + abs(b))]
    assert not bad, f"{len(bad)} differ, first at {bad[0]}: {got[bad[0]]} != {ref[bad[0]]}"


@needs_tracking
def test_gemv_with_a_resident_matrix_runs_on_the_gpu_and_equals_the_cpu(tmp_path):
    ref, _, _ = results(tmp_path, "cases", None)
    got, runs, err = results(tmp_path, "cases", "gpu")
    same(got, ref)
    # Both precisions offloaded; every positive-increment case of the
    # Fortran calls (2 x 3 trans x 2 x 2 increments x 4 scalars) and
    # the warm-up's kept and reused calls (2 x 2) at least.
    assert {r[2] for r in runs} == {"d", "z"}, runs
    assert len(runs) >= 2 * 3 * 2 * 2 * 4 + 4, len(runs)
    assert "residency: on" in err, err


@needs_tracking
def test_verify_mode_covers_gemv(tmp_path):
    ref, _, _ = results(tmp_path, "cases", None)
    got, runs, err = results(tmp_path, "cases", "gpu", GPU_OFFLOAD_VERIFY=1)
    same(got, ref)
    assert runs, "no gemv ran on the GPU in verify mode"
    assert "mismatch" not in err and "differ" not in err, err


@needs_tracking
def test_gemv_with_a_matrix_not_resident_stays_on_the_cpu(tmp_path):
    # A new matrix at each of 6 calls, even with the GPU forced: none
    # offloaded; then the first matrix again, 3 times: seen before, so
    # all three run on the GPU (copied and kept, reused): 3 kernels.
    ref, _, _ = results(tmp_path, "fresh", None)
    got, runs, _ = results(tmp_path, "fresh", "gpu")
    same(got, ref)
    assert len(runs) == 3, runs


@needs_tracking
def test_gemv_stays_on_the_cpu_without_residency(tmp_path):
    ref, _, _ = results(tmp_path, "fresh", None)
    got, runs, _ = results(tmp_path, "fresh", "gpu", GPU_OFFLOAD_RESIDENT=0)
    same(got, ref)
    assert runs == [], runs
    _, runs, _ = results(tmp_path, "fresh", "gpu")
    assert runs, "residency on: the reused matrix ran on the GPU"


@needs_tracking
@pytest.mark.parametrize("case", ["write", "read", "dontneed"])
def test_changed_resident_matrix_gives_the_cpu_result(tmp_path, case):
    ref, _, _ = results(tmp_path, case, None)
    got, runs, _ = results(tmp_path, case, "gpu")
    same(got, ref)
    assert runs, "the matrix never became resident"


# The model at the default level: copies at 10 GB/s with 1 us each, the
# GPU's gemv 1000x the CPU's, no start-up cost. A 300 x 200 dgemv (1.2e5
# flops) with its 480 kB matrix copied in would take 50 us on the GPU; with
# the matrix resident, x and y (4 kB) in and y out, about 2.5 us, which no
# CPU reaches (the model learns the CPU's real speed from its calls: a
# resident call priced near the CPU's, as an earlier profile's 25 us was,
# made the decision depend on the machine's speed).
GEMV_PROFILE = """gpu-offload-profile 1
source synthetic
startup 0
h2d 1e-6 1e10
d2h 1e-6 1e10
cpu dgemv 1e3:1e9 1e12:1e9
gpu dgemv 1e3:1e12 1e12:1e12
"""


@needs_tracking
def test_the_model_offloads_gemv_once_its_matrix_is_resident(tmp_path):
    prof = tmp_path / "profile"
    prof.write_text(GEMV_PROFILE)
    ref, _, _ = results(tmp_path, "fresh", None)
    got, runs, err = results(tmp_path, "fresh", "", GPU_OFFLOAD_PROFILE=prof)
    same(got, ref)
    # The six matrices seen once stay on the CPU; the reused one is
    # priced without its copy and goes to the GPU (a CPU probe of the
    # model's may take one of its calls).
    assert 1 <= len(runs) <= 3, (runs, err)
