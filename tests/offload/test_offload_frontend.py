"""libgpuoffload.so's frontend, through opcheck (every offloadable
operation, s/d/c/z, Fortran and CBLAS column- and row-major, LAPACK) and
the CPU test backend: the CPU path is bit-identical to running without the
library; the GPU path gives the expected results; workspace queries, small
and nested calls stay on the CPU; every backend failure falls back with
correct results and one message; verify mode hands the program the CPU's
results and reports the GPU's differences."""
import subprocess

import pytest

import ofront as F

pytestmark = F.needs_lapack

OPCHECK = str(F.T / "opcheck")


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()


def opcheck(tmp_path, tag, env, prefix=None, timeout=300):
    out = tmp_path / tag
    out.mkdir()
    cmd = [OPCHECK, str(out)] + ([prefix] if prefix else [])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return p, out


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """opcheck without the library: the reference outputs."""
    tmp = tmp_path_factory.mktemp("ref")
    F.build()
    p, out = opcheck(tmp, "ref", F.env(tmp))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr == ""
    return p, out


def same_files(a, b):
    names = sorted(x.name for x in a.iterdir())
    assert names == sorted(x.name for x in b.iterdir())
    return [n for n in names if (a / n).read_bytes() != (b / n).read_bytes()]


def same_as_ref(ref_dir, out):
    """Files of out (a run of some cases) that differ from ref's."""
    names = [f.name for f in out.iterdir()]
    assert names
    return [n for n in names
            if (out / n).read_bytes() != (ref_dir / n).read_bytes()]


def info_lines(text):
    """The "<case> info=<n>" and workspace-query lines."""
    return [ln for ln in text.splitlines() if " info=" in ln]


@pytest.mark.parametrize("mode", ["cpu", ""])
def test_cpu_path_is_bit_identical(tmp_path, ref, mode):
    p, out = opcheck(tmp_path, "cpu", F.env(tmp_path, mode, MIN_FLOPS_UNUSED=1))
    assert p.returncode == 0, p.stdout + p.stderr
    assert same_files(ref[1], out) == []
    assert p.stdout == ref[0].stdout
    assert F.runs(tmp_path) == []


def test_gpu_path_gives_the_expected_results(tmp_path, ref):
    p, out = opcheck(tmp_path, "gpu", F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0))
    assert p.returncode == 0, p.stdout + p.stderr     # nothing CLOBBERED
    assert p.stderr == ""
    assert F.compare(ref[1], out) == []
    assert info_lines(p.stdout) == info_lines(ref[0].stdout)
    # Every operation of the table, in every precision it has, ran on the
    # (test) GPU.
    ran = {(op, prec) for op, prec, _ in F.runs(tmp_path)}
    for name, op in F.OP.items():
        precs = "cz" if name in ("hemm", "herk", "her2k", "heev", "heevd") else \
                "sd" if name in ("syev", "syevd") else "sdcz"
        for prec in precs:
            assert (op, prec) in ran, (name, prec)


def test_gpu_path_keeps_lapack_error_conventions(tmp_path, ref):
    """A singular gesv and a non-positive-definite potrf: the device sees
    info != 0, so the CPU library runs the call and its error conventions
    (info, the partial factors) hold exactly."""
    for prefix in ("dgesv_singular", "zpotrf_L_notpd"):
        p, out = opcheck(tmp_path, prefix, F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0),
                         prefix)
        assert p.returncode == 0 and p.stderr == ""
        assert same_as_ref(ref[1], out) == []
        assert " info=0" not in p.stdout
    assert len(F.runs(tmp_path)) == 2


def test_workspace_queries_stay_on_the_cpu(tmp_path, ref):
    """opcheck queries syev's and geqrf's workspace first (lwork = -1):
    one kernel each on the GPU, for the real call only, and the query's
    answer is the CPU library's."""
    for prefix, op in (("dsyev_VU", 46), ("zgeqrf", 52)):
        p, _ = opcheck(tmp_path, prefix, F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0),
                       prefix)
        assert p.returncode == 0, p.stderr
        q = [ln for ln in p.stdout.splitlines() if " query " in ln]
        assert q and all(ln in ref[0].stdout for ln in q)
    assert [r[0] for r in F.runs(tmp_path)] == [46, 52]


def test_small_calls_skip_the_decision(tmp_path):
    """50x40x30 gemm is 1.2e5 flops: below the default threshold (1e6) it
    never reaches the policy, even forced to the GPU; above a lowered one
    it does."""
    p, _ = opcheck(tmp_path, "small", F.env(tmp_path, "gpu"), "dgemm_NN")
    assert p.returncode == 0 and F.journal(tmp_path) == []
    p, _ = opcheck(tmp_path, "lowered",
                   F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=100000), "dgemm_NN")
    assert p.returncode == 0 and [r[0] for r in F.runs(tmp_path)] == [1]


@pytest.mark.parametrize("value,decided,said", [
    ("1e5", True, False),      # an exponent, as the profile's numbers
    ("1.5E5", False, False),   # 1.5e5 > 1.2e5: small
    ("0.0", True, False),
    ("1e", False, True),       # not a number: said, the default (1e6)
    ("-5", False, True),
    ("100000x", False, True),
])
def test_min_flops_takes_a_number_with_an_exponent(tmp_path, value, decided, said):
    """GPU_OFFLOAD_MIN_FLOPS is a number of flops: 1e5 lowers the
    threshold below the 50x40x30 gemm (1.2e5) as 100000 does; a value
    that is not a non-negative number is said once and the default kept."""
    p, _ = opcheck(tmp_path, "mf", F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=value),
                   "dgemm_NN")
    assert p.returncode == 0, p.stderr
    assert ([r[0] for r in F.runs(tmp_path)] == [1]) == decided, F.runs(tmp_path)
    assert ("GPU_OFFLOAD_MIN_FLOPS=%s is not a number" % value in p.stderr) == said, p.stderr


def test_nested_calls_are_not_decided_again(tmp_path, ref):
    """The first kernel fails, so dgesv_ runs on the CPU: reference LAPACK's
    dgesv_ then calls dgetrf_, dtrsm_, dgemm_ ... through the wrappers, and
    none of those nested calls is sent to the GPU (every call would be: the
    threshold is 0 and the GPU is forced)."""
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_TEST_FAIL="kernel:1")
    p, out = opcheck(tmp_path, "nested", e, "dgesv")
    assert p.returncode == 0
    # dgesv and dgesv_singular (the first failed, the second ran: info 4,
    # then the CPU), and the gesvd cases the prefix takes too; no getrf
    # (40), trsm (9), gemm (1) ... from inside the CPU's dgesv_.
    ops = [r[0] for r in F.runs(tmp_path)]
    assert ops.count(42) == 2 and set(ops) == {42, 50}, ops
    for f in out.glob("dgesv[._]*"):
        assert f.read_bytes() == (ref[1] / f.name).read_bytes(), f.name


STEPS = ["start", "alloc", "to_device", "kernel", "to_host",
         "alloc:2", "alloc:3", "to_device:2", "to_host:2"]


@pytest.mark.parametrize("fail", STEPS)
def test_backend_failure_falls_back_with_one_message(tmp_path, ref, fail):
    """Every step of the GPU path failing, always or once in the middle:
    the program gets exactly the CPU library's results (the caller's
    buffers were never written) and stderr has one line."""
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_TEST_FAIL=fail)
    p, out = opcheck(tmp_path, "fail", e, "d")
    assert p.returncode == 0, p.stdout
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-offload: "), p.stderr
    step = fail.split(":")[0]
    assert {"start": "did not start", "alloc": "allocating",
            "to_device": "copying to", "kernel": "computing",
            "to_host": "copying from"}[step] in lines[0]
    fails = [r for r in F.journal(tmp_path) if r[0] == "fail"]
    assert fails, "the failure was not injected"
    if ":" not in fail:
        # Failing every time: every output is the CPU library's, bit for bit.
        assert same_as_ref(ref[1], out) == []
    else:
        # Once: that call is the CPU's, the others the GPU's; all right.
        assert F.compare(ref[1], out) == []


@pytest.mark.parametrize("backend,says", [
    ("/nonexistent/libgpuoffload-cuda.so", "no GPU backend"),
    # the default: libgpuoffload-cuda.so next to it, which without a GPU
    # does not start (tests/offload/test_offload_cuda.py says why)
    (None, "did not start"),
    (F.T / "libbadabi.so", "does not implement ABI version 2 (it has 99)"),
    ("libm.so.6", "is not a GPU backend"),
])
def test_missing_or_mismatched_backend_declines(tmp_path, ref, backend, says):
    e = F.env(tmp_path, "gpu", backend=backend, GPU_OFFLOAD_MIN_FLOPS=0)
    p, out = opcheck(tmp_path, "decline", e, "z")
    assert p.returncode == 0
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and says in lines[0], p.stderr
    assert same_as_ref(ref[1], out) == []


def test_verify_mode_keeps_cpu_results_and_reports_nothing_when_equal(tmp_path, ref):
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_VERIFY=1)
    p, out = opcheck(tmp_path, "verify", e)
    assert p.returncode == 0, p.stdout
    assert p.stderr == ""
    assert same_files(ref[1], out) == []
    assert len(F.runs(tmp_path)) > 250


def test_verify_mode_reports_mismatches_with_the_call(tmp_path, ref):
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_VERIFY=1,
              GPU_OFFLOAD_TEST_CORRUPT=1)
    p, out = opcheck(tmp_path, "verify", e, "dgemm_NN")
    assert p.returncode == 0
    assert same_as_ref(ref[1], out) == []
    lines = p.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gpu-offload: verify: dgemm_ (m=50 n=40 k=30")
    assert "c differs by" in lines[0] and "tolerance 1e-08" in lines[0]
    # Many mismatches: 20 lines, then one saying more are not shown.
    p, out = opcheck(tmp_path, "verify-all", e)
    lines = p.stderr.splitlines()
    assert len(lines) == 21 and "further mismatches are not shown" in lines[-1]
    assert same_files(ref[1], out) == []


def test_backend_calling_host_blas_does_not_deadlock(tmp_path, ref):
    """The policy starts the backend and asks it for free memory under its
    own lock; a backend whose code calls the process's BLAS then (the test
    backend's GPU_OFFLOAD_TEST_BLAS=1: a 2x2 dgemm_ through the wrapper)
    must pass straight through, not re-enter the policy."""
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_TEST_BLAS=1)
    # a hang guard, not a timing: the call takes milliseconds, a deadlock
    # for ever (as it did before the backend's calls were made quiet)
    p, out = opcheck(tmp_path, "blas", e, "dgemm_NN", timeout=120)
    assert p.returncode == 0 and p.stderr == ""
    assert F.compare(ref[1], out) == []
    j = F.journal(tmp_path)
    assert ["blas", "7"] in j and [r[0] for r in j].count("run") == 1
