"""libgpuoffload.so under other kinds of callers: a gfortran program
(hidden string lengths forwarded), BLAS/LAPACK under the scipy_* and
scipy_*_64_ names of PyPI's wheels loaded with RTLD_LOCAL (found, and
per calling module; 64-bit pivots), and fork after the GPU started."""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

import jobs
import ofront as F

pytestmark = F.needs_lapack


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()


def run(cmd, env, **kw):
    return subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=300, **kw)


@F.needs_fc
def test_fortran_program_cpu_identical_and_gpu_right(tmp_path):
    prog = [str(F.T / "fcheck")]
    ref = run(prog, F.env(tmp_path))
    assert ref.returncode == 0 and ref.stderr == ""
    assert ref.stdout.count("ok=T") == 3, ref.stdout
    cpu = run(prog, F.env(tmp_path, "cpu"))
    assert cpu.stdout == ref.stdout and cpu.stderr == ""
    gpu = run(prog, F.env(tmp_path, "gpu"))
    assert gpu.returncode == 0 and gpu.stderr == ""
    assert gpu.stdout.count("ok=T") == 3, gpu.stdout
    # dgesv, dsyevd (the real call; its workspace query stayed on the
    # CPU), zgemm
    assert [(op, p) for op, p, _ in F.runs(tmp_path)] == [
        (F.OP["gesv"], "d"), (F.OP["syevd"], "d"), (F.OP["gemm"], "z")]


@F.needs_fc
def test_fortran_hidden_string_lengths_are_forwarded(tmp_path):
    """libflen.so's dsyevd_/zgemm_ read len() of their options: the
    program passes 'Vectors', 'Upper', 'No transpose', 'Conjugate'."""
    prog = [str(F.T / "flenmain")]
    assert run(prog, F.env(tmp_path)).stdout == "lengths 7 5 12 9\n"
    p = run(prog, F.env(tmp_path, "cpu"))
    assert p.stdout == "lengths 7 5 12 9\n" and p.stderr == ""


CLIENTS = [str(F.T / "libsclient.so"), str(F.T / "libsclientb.so")]


def test_scipy_names_behind_rtld_local_are_found_per_module(tmp_path):
    """Two modules loaded RTLD_LOCAL, each linked with its own copy of a
    BLAS exporting the wheels' names: each module's calls reach its own
    copy (5 calls each), through the wrappers."""
    ref = run([str(F.T / "sdriver")] + CLIENTS, F.env(tmp_path))
    assert ref.returncode == 0 and "WRONG" not in ref.stdout
    assert ref.stdout.count("sblas_calls 5") == 2
    p = run([str(F.T / "sdriver")] + CLIENTS, F.env(tmp_path, "cpu"))
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout == ref.stdout


def test_scipy_names_offloaded_with_64_bit_integers(tmp_path):
    ref = run([str(F.T / "sdriver"), CLIENTS[0]], F.env(tmp_path))
    p = run([str(F.T / "sdriver"), CLIENTS[0]],
            F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0))
    assert p.returncode == 0 and p.stderr == "" and "WRONG" not in p.stdout
    # all five ran on the (test) GPU: none reached libsblas.so
    assert "sblas_calls 0" in p.stdout
    gemm, gesv = F.OP["gemm"], F.OP["gesv"]
    assert F.runs(tmp_path) == [(gemm, "d", 0), (gemm, "d", 1), (gemm, "d", 0),
                                (gemm, "d", 1), (gesv, "d", 1)]
    # 64-bit pivots, the same as the CPU library's (and not all trivial)
    piv = [ln for ln in p.stdout.splitlines() if ln.startswith("ipiv")]
    ref_piv = [ln for ln in ref.stdout.splitlines() if ln.startswith("ipiv")]
    assert piv == ref_piv and piv[0] != "ipiv " + " ".join(map(str, range(1, 101)))


def test_threads_share_the_gpu_one_call_at_a_time(tmp_path):
    """Four threads' dgemm_ calls (64x64, 5e5 flops: the threshold is
    lowered) all go to the test backend, serialised, each right."""
    p = run([str(F.T / "threadcheck")],
            F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0))
    assert p.returncode == 0 and p.stdout == "ok\n", p.stdout + p.stderr
    assert p.stderr == ""
    assert len(F.runs(tmp_path)) == 80


def test_forked_child_stays_on_the_cpu(tmp_path):
    p = run([str(F.T / "forkcheck")], F.env(tmp_path, "gpu"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout == "parent ok\nchild ok\n"
    # The policy keeps the child on the CPU itself (and the frontend would
    # refuse the backend there with one line): no kernel from the child.
    assert len(p.stderr.splitlines()) <= 1, p.stderr
    assert len(F.runs(tmp_path)) == 1


def test_forks_beside_gpu_calls_do_not_deadlock(tmp_path):
    """2000 forks while another thread's calls go to the GPU, each
    decided under the policy's lock, which then takes the GPU boundary's
    (GPU_OFFLOAD_MEM_MS=0: the free memory read on every call). The fork
    handlers took the two locks in the other order: deadlocked within a
    few forks (the time limit then fails the test)."""
    try:
        p = subprocess.run([str(F.T / "forkrace")],
                           env=F.env(tmp_path, "gpu", GPU_OFFLOAD_MEM_MS=0),
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("forkrace did not finish: a fork deadlocked")
    assert p.returncode == 0 and p.stdout == "forkrace ok 2000\n", p.stdout + p.stderr
    assert F.runs(tmp_path), "no call reached the (test) GPU"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a set-user-ID program)")
def test_secure_execution_ignores_the_environment(request):
    """A set-user-ID root program run by uid 4001 (AT_SECURE), with the
    library and the caller's GPU_OFFLOAD_* asking for the test backend: the
    call runs on the CPU and the backend is never loaded (it would journal
    as root into the caller's file)."""
    # pytest's own tmp_path is closed to other users: a directory of our own
    d = pathlib.Path(tempfile.mkdtemp(prefix="gpo-suid-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(d, ignore_errors=True))
    os.chmod(d, 0o777)
    for f in (F.T / "securecheck", F.LIB, F.TESTBE):
        shutil.copy(f, d / f.name)
    os.chmod(d / "securecheck", 0o4755)
    e = F.env(d, "gpu", backend=d / F.TESTBE.name, GPU_OFFLOAD_MIN_FLOPS=0)
    p = subprocess.run([str(d / "securecheck"), str(d / F.LIB.name)], env=e,
                       capture_output=True, text=True, timeout=60,
                       preexec_fn=jobs.as_user(4001))
    assert p.returncode == 0 and p.stdout == "ok\n", p.stdout + p.stderr
    assert F.journal(d) == []
    # The same program not set-user-ID does use the backend (the test
    # would show nothing otherwise).
    os.chmod(d / "securecheck", 0o755)
    p = subprocess.run([str(d / "securecheck"), str(d / F.LIB.name)], env=e,
                       capture_output=True, text=True, timeout=60,
                       preexec_fn=jobs.as_user(4001))
    assert p.stdout == "ok\n" and len(F.runs(d)) == 1


def test_a_name_only_we_define_is_never_resolved_to_ourselves(tmp_path):
    """scipy_ddot_ exists in this process only as our wrapper (ctypes finds
    it in the global scope): the wrapper must not call itself; it says so
    once and returns 0, and the program goes on."""
    code = ("import ctypes\n"
            "f = ctypes.CDLL(None).scipy_ddot_\n"
            "f.restype = ctypes.c_double\n"
            "n, inc = ctypes.c_int(3), ctypes.c_int(1)\n"
            "x = (ctypes.c_double * 3)(1, 2, 3)\n"
            "for _ in range(3):\n"
            "    r = f(ctypes.byref(n), x, ctypes.byref(inc), x, ctypes.byref(inc))\n"
            "print('returned', r)\n")
    p = run([F.PY, "-c", code], F.env(tmp_path, "cpu"))
    assert p.returncode == 0 and p.stdout == "returned 0.0\n", p.stdout + p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "defines scipy_ddot_" in lines[0], p.stderr


def test_many_call_sites_resolve_per_module_not_per_call(tmp_path):
    """ddot_ from 24 call sites of one program (the site cache holds 8):
    the right function every time, and the frontend looks the caller's
    module up once, not on each call past the eighth site (a LAPACK calls
    its BLAS from dozens of sites; numpy's linalg module calls dcopy from
    one per routine and type: each lookup cost microseconds)."""
    prog = [str(F.T / "sitecheck")]
    e = F.env(tmp_path, "")
    e["LD_PRELOAD"] = "%s:%s" % (F.T / "libdlcount.so", F.LIB)
    p = run(prog, e)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout == "sum %.1f\n" % (200.0 * 24 * 30)
    counts = [int(line.split()[1]) for line in p.stderr.splitlines()
              if line.startswith("dlopen-calls ")]
    assert len(counts) == 1, p.stderr
    # One lookup per module that calls (the program), whatever the number
    # of sites and calls; a per-call lookup would make it 16 x 200.
    assert counts[0] <= 4, p.stderr


QUERY_PROG = r"""
import ctypes, sys
ctypes.CDLL("liblapack.so.3", mode=ctypes.RTLD_GLOBAL)
lapack = ctypes.CDLL(None)          # the preloaded wrappers come first
f = lapack.dgeqrf_
i = ctypes.c_int
# A workspace query (lwork = -1) for a matrix far larger than the memory
# passed: LAPACK references neither A nor TAU then (numpy's and SciPy's
# own tests do this with 1-element dummies), so nobody else may either.
m = n = lda = i(1 << 30)
a = (ctypes.c_double * 1)()
tau = (ctypes.c_double * 1)()
work = (ctypes.c_double * 1)()
lwork, info = i(-1), i(0)
f(ctypes.byref(m), ctypes.byref(n), a, ctypes.byref(lda), tau, work,
  ctypes.byref(lwork), ctypes.byref(info))
print("info", info.value, "lwork", work[0])
"""


@pytest.mark.parametrize("mode", ["", "gpu"])
def test_traced_workspace_query_reads_no_operand(tmp_path, mode):
    """A traced LAPACK workspace query with dimensions far beyond the
    arrays passed (as numpy's test_blas64_geqrf_lwork_smoketest and SciPy's
    test_geqrf_lwork do): the trace must not read the operands (their
    fingerprints), which killed those test processes on the H200."""
    ref = run([sys.executable, "-c", QUERY_PROG], F.env(tmp_path))
    assert ref.returncode == 0 and ref.stdout.startswith("info 0 "), ref
    e = F.env(tmp_path, mode)
    e["GPU_OFFLOAD_TRACE"] = str(tmp_path / "trace")
    p = run([sys.executable, "-c", QUERY_PROG], e)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout == ref.stdout, p.stdout + p.stderr
