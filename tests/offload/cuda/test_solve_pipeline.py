"""The CUDA backend's solve pipeline (src/offload/cuda/xsolve.c, run_host
of src/offload/backend.h) for gesv and posv: the frontend
(build/libgpuoffload.so) and the backend (build/libgpuoffload-cuda.so) on
the fake driver (fakedev.c, which journals every stream operation in
order: FAKEDEV_JOURNAL) with the stand-in cuSOLVER (fakesolver.c, whose
getrf/getrs/potrf/potrs of every precision are queued on their stream and
run only at a wait, as kernels on the device: a factor copied out before
the factorisation's event was waited for comes back unfactored).
solvepipe.c calls ?gesv_/?posv_ (and their scipy_*_64_ names, for 64-bit
pivots) on operands whose factorisations are exact, so that the results
under the offloader must equal a plain run's (the system's LAPACK) byte
for byte, padding included. The pipeline's size floor is lowered
(GPU_OFFLOAD_CUDA_SOLVE_MIN=0). Journals and counts, no timings."""
import os
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
B = REPO / "build"
FD = B / "tests" / "offload" / "cuda" / "fakedev"
PROG = B / "tests" / "offload" / "solvepipe"

pytestmark = pytest.mark.skipif(
    not (pathlib.Path("/usr/lib/x86_64-linux-gnu/liblapack.so.3").exists()
         or subprocess.run(["sh", "-c", "ldconfig -p | grep -q liblapack.so.3"]).returncode == 0),
    reason="needs the system's liblapack.so.3")

ES = {"s": 4, "d": 8, "c": 8, "z": 16}
SHAPES = [(24, 24, 0, 0), (24, 5, 3, 2), (24, 1, 0, 5), (13, 40, 2, 1)]


@pytest.fixture(scope="module", autouse=True)
def _build():
    subprocess.run(["make", "-C", str(REPO), "-s", "offload", "offload-cuda",
                    "xfer-tests", "small-tests", "solve-tests"], check=True,
                   stdout=subprocess.DEVNULL)


def _clean():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("GPU_OFFLOAD", "FAKEDEV", "FAKESOLVER", "LD_"))}


def _env(tmp_path, **extra):
    e = _clean()
    e.update(LD_LIBRARY_PATH=str(FD), LD_PRELOAD=str(B / "libgpuoffload.so"),
             GPU_OFFLOAD_FORCE="gpu", GPU_OFFLOAD_MIN_FLOPS="0",
             GPU_OFFLOAD_BACKEND=str(B / "libgpuoffload-cuda.so"),
             GPU_OFFLOAD_NVML="0", GPU_OFFLOAD_SUMMARY="1",
             GPU_OFFLOAD_CUDA_SOLVE_MIN="0",
             FAKEDEV_COUNTS=str(tmp_path / "counts"),
             FAKEDEV_JOURNAL=str(tmp_path / "journal"))
    e.update({k: str(v) for k, v in extra.items() if v is not None})
    for k in [k for k, v in extra.items() if v is None]:
        e.pop(k, None)          # None: unset (the backend's default)
    return e


class Run:
    def __init__(self, proc, out, journal, counts):
        self.proc, self.out, self.journal, self.counts = proc, out, journal, counts
        self.text = proc.stdout + proc.stderr


def _args(op, p, iw, shape, kind, out, count):
    n, nrhs, pa, pb = shape
    return [str(PROG), op, p, str(iw), str(n), str(nrhs), str(pa), str(pb),
            kind, str(out), str(count)]


_cpu_cache = {}


def cpu(tmp_path, op, p, iw, shape, kind="ok", count=1):
    """A plain run's output (the system's LAPACK, no offloader)."""
    key = (op, p, iw, shape, kind, count)
    if key not in _cpu_cache:
        out = tmp_path / "cpu.out"
        r = subprocess.run(_args(op, p, iw, shape, kind, out, count), env=_clean(),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
        _cpu_cache[key] = out.read_bytes()
    return _cpu_cache[key]


def gpu(tmp_path, op, p, iw, shape, kind="ok", count=1, **extra):
    """Under the offloader, forced to the fake GPU."""
    for f in ("counts", "journal", "gpu.out"):
        if (tmp_path / f).exists():
            (tmp_path / f).unlink()
    out = tmp_path / "gpu.out"
    r = subprocess.run(_args(op, p, iw, shape, kind, out, count),
                       env=_env(tmp_path, **extra), capture_output=True,
                       text=True, timeout=120)
    counts = {}
    if (tmp_path / "counts").exists():
        for line in (tmp_path / "counts").read_text().splitlines():
            name, v = line.split()
            counts[name] = counts.get(name, 0) + int(v)
    j = (tmp_path / "journal").read_text().splitlines() \
        if (tmp_path / "journal").exists() else []
    return Run(r, out.read_bytes() if out.exists() else b"", j, counts)


def _copies(part, direction):
    """(index, bytes, pending) of each copy of a direction, not refused."""
    res = []
    for i, l in enumerate(part):
        m = re.match(r"copy (\w+) s(\d+) (\d+) pending (\d+)$", l)
        if m and m.group(1) == direction:
            res.append((i, int(m.group(3)), int(m.group(4))))
    return res


def _kernel(part, names):
    return [i for i, l in enumerate(part) if re.match(rf"kernel cusolverDn\w*({names}) ", l)]


def pipelined(part):
    """Whether this call's copies were made in the pipeline's order: a
    copy in between the factorisation's kernel and the solve's."""
    f, s = _kernel(part, "getrf|potrf"), _kernel(part, "getrs|potrs")
    return bool(f and s and any(f[0] < i < s[0] for i, _, _ in _copies(part, "h2d")))


def check_overlapped_order(part, op, p, iw, shape):
    """A in, then the factorisation queued, then B in while it is still
    queued (not run: "pending"), then the solve queued; the factor out
    while the solve is still queued; X out last, after both ran."""
    n, nrhs, _, _ = shape
    es = ES[p]
    f, s = _kernel(part, "getrf|potrf"), _kernel(part, "getrs|potrs")
    assert len(f) == 1 and len(s) == 1, part
    h2d, d2h = _copies(part, "h2d"), _copies(part, "d2h")
    assert [b for _, b, _ in h2d] == [n * n * es, n * nrhs * es], part
    (ia, _, _), (ib, _, pb) = h2d
    assert ia < f[0] < ib < s[0], part
    assert pb == 1, part            # the factorisation still on the device
    big = [(i, b, k) for i, b, k in d2h if b >= n * min(n, nrhs) * es]
    assert [b for _, b, _ in big] == [n * n * es, n * nrhs * es], part
    (ilu, _, klu), (ix, _, kx) = big
    assert s[0] < ilu and klu == 1, part    # the solve still on the device
    assert kx == 0 and ilu < ix, part
    if op == "gesv":
        piv = [(i, k) for i, b, k in d2h if b == n * (iw // 8)]
        assert piv and piv[0][0] < ix, part
    # Two events recorded on the compute stream behind the kernels.
    comp = re.search(r" s(\d+)$", part[f[0]]).group(1)
    assert sum(1 for l in part if re.match(rf"record e\d+ s{comp}$", l)) == 2, part


def ok(r):
    assert r.proc.returncode == 0, r.text
    assert "ok" in r.proc.stdout, r.text


@pytest.mark.parametrize("iw", [32, 64])
@pytest.mark.parametrize("p", ["s", "d", "c", "z"])
@pytest.mark.parametrize("op", ["gesv", "posvU", "posvL"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "n%d-nrhs%d-pad%d,%d" % s)
def test_pipelined_results_equal_the_cpu_lapack(tmp_path, op, p, iw, shape):
    """Every precision, both pivot widths (?gesv_ and scipy_?gesv_64_),
    nrhs = n, < n, 1 and > n, ld beyond n: the factor, the pivots, X and
    the padding byte for byte as the system's LAPACK leaves them, and the
    call was the pipeline's (a copy in between the two kernels)."""
    r = gpu(tmp_path, op, p, iw, shape)
    ok(r)
    assert "1 offloaded" in r.proc.stderr, r.text
    assert r.out == cpu(tmp_path, op, p, iw, shape)
    assert pipelined(r.journal), r.journal


@pytest.mark.parametrize("op,p,iw", [("gesv", "d", 64), ("gesv", "c", 32),
                                     ("posvU", "z", 64), ("posvL", "s", 32)])
@pytest.mark.parametrize("ws", [0, 8 << 20])
def test_the_copies_overlap_the_kernels(tmp_path, op, p, iw, ws):
    """B's copy in is issued after the factorisation was queued and while
    it is still on the device, the factor's copy out while the solve is;
    also when the factorisation's workspace is larger than the kept one
    (FAKESOLVER_WS=8 MiB: given back after a wait, which must not come
    before the end of the call)."""
    shape = (24, 5, 3, 2)
    extra = {"FAKESOLVER_WS": ws} if ws else {}
    r = gpu(tmp_path, op, p, iw, shape, **extra)
    ok(r)
    assert "1 offloaded" in r.proc.stderr, r.text
    assert r.out == cpu(tmp_path, op, p, iw, shape)
    check_overlapped_order(r.journal, op, p, iw, shape)


FAIL_CASES = [("gesv", "d", 64), ("gesv", "z", 32), ("posvU", "c", 64),
              ("posvL", "d", 32)]


def _fallback(tmp_path, r, op, p, iw, shape, what=None):
    ok(r)
    assert "0 offloaded" in r.proc.stderr, r.text
    assert "the GPU backend failed" in r.proc.stderr, r.text
    if what:
        assert f"the GPU backend failed {what}" in r.proc.stderr, r.text
    # The CPU reran the call on the caller's operands as they were: a
    # factor or an X committed early would be factored or solved again.
    assert r.out == cpu(tmp_path, op, p, iw, shape)


@pytest.mark.parametrize("op,p,iw", FAIL_CASES)
@pytest.mark.parametrize("knob", ["FAKEDEV_FAIL_COPY", "FAKEDEV_FAIL_EXEC"])
def test_a_failed_copy_at_any_step_reruns_the_call_on_the_cpu(tmp_path, op, p, iw, knob):
    """Every copy of a pipelined call fails in turn, at its call and at
    its execution: A in, B in, the factor out, the pivots out, the info
    slots, X out. The call falls back and the CPU's result is exact."""
    shape = (24, 5, 3, 2)
    r = gpu(tmp_path, op, p, iw, shape)
    ok(r)
    total = sum(v for k, v in r.counts.items() if k.startswith("cuMemcpy"))
    assert total == (6 if op == "gesv" else 5), r.counts
    for nth in range(1, total + 1):
        r = gpu(tmp_path, op, p, iw, shape, **{knob: nth})
        _fallback(tmp_path, r, op, p, iw, shape)


@pytest.mark.parametrize("op,p,iw", FAIL_CASES)
@pytest.mark.parametrize("knob", ["FAKESOLVER_FAIL_SOLVE", "FAKESOLVER_FAIL_RUN"])
@pytest.mark.parametrize("nth", [1, 2])
def test_a_failed_kernel_reruns_the_call_on_the_cpu(tmp_path, op, p, iw, knob, nth):
    """The factorisation (1) or the solve (2) fails when queued or when it
    runs on the device (the event's wait reports it)."""
    shape = (24, 5, 3, 2)
    n, nrhs, _, _ = shape
    r = gpu(tmp_path, op, p, iw, shape, **{knob: nth})
    _fallback(tmp_path, r, op, p, iw, shape, "computing")
    # The pipeline's steps up to the failure: A alone in before the
    # factorisation; B in after it was queued.
    h2d = [b for _, b, _ in _copies(r.journal, "h2d")]
    f = _kernel(r.journal, "getrf|potrf")
    if knob == "FAKESOLVER_FAIL_SOLVE" and nth == 1:
        assert h2d == [n * n * ES[p]] and not f, r.journal
    else:
        assert h2d == [n * n * ES[p], n * nrhs * ES[p]], r.journal
        assert f and any(i > f[0] for i, _, _ in _copies(r.journal, "h2d")), r.journal


@pytest.mark.parametrize("op,p,iw", FAIL_CASES)
def test_a_failed_allocation_reruns_the_call_on_the_cpu(tmp_path, op, p, iw):
    """cuMemAlloc fails from the N-th on (the pool retries once): A's, B's,
    the pivots' buffer, the factorisation's workspace."""
    shape = (24, 5, 3, 2)
    r = gpu(tmp_path, op, p, iw, shape)
    ok(r)
    allocs = r.counts.get("cuMemAlloc_v2", 0)
    assert allocs == (5 if op == "gesv" else 4), r.counts  # the arena + the call's
    for nth in range(2, allocs + 1):
        r = gpu(tmp_path, op, p, iw, shape, FAKEDEV_FAIL_ALLOC=nth)
        _fallback(tmp_path, r, op, p, iw, shape)


@pytest.mark.parametrize("p", ["s", "d", "c", "z"])
@pytest.mark.parametrize("op,iw", [("gesv", 64), ("gesv", 32), ("posvU", 64),
                                   ("posvL", 32)])
def test_a_singular_matrix_reruns_on_the_cpu_with_lapacks_info(tmp_path, op, p, iw):
    """A zero pivot (gesv) or a minor not positive definite (posv): the
    pipeline ran, the frontend discarded what it staged and the CPU reran
    the call: LAPACK's info, factor and B, byte for byte."""
    shape = (24, 5, 3, 2)
    r = gpu(tmp_path, op, p, iw, shape, "singular")
    ok(r)
    assert "0 offloaded" in r.proc.stderr, r.text
    assert "failed" not in r.proc.stderr, r.text
    assert pipelined(r.journal), r.journal
    assert r.out == cpu(tmp_path, op, p, iw, shape, "singular")


@pytest.mark.parametrize("why", ["off", "floor", "verify"])
@pytest.mark.parametrize("op", ["gesv", "posvL"])
def test_the_frontends_flow_runs_where_the_pipeline_does_not_take_the_call(tmp_path, why, op):
    """GPU_OFFLOAD_CUDA_SOLVE_PIPE=0, a call below the default size floor
    (8 MiB of A and B), and verify mode (run_host is never offered then):
    the copies in all before the factorisation, still exact."""
    extra = {"off": {"GPU_OFFLOAD_CUDA_SOLVE_PIPE": "0"},
             "floor": {"GPU_OFFLOAD_CUDA_SOLVE_MIN": None},
             "verify": {"GPU_OFFLOAD_VERIFY": "1"}}[why]
    shape = (24, 5, 3, 2)
    # Taken otherwise (the switch on says so too).
    r = gpu(tmp_path, op, "d", 64, shape, count=2, GPU_OFFLOAD_CUDA_SOLVE_PIPE=1)
    ok(r)
    assert "2 offloaded" in r.proc.stderr and pipelined(r.journal), r.text
    r = gpu(tmp_path, op, "d", 64, shape, count=2, **extra)
    ok(r)
    if why == "verify":
        assert "mismatch" not in r.proc.stderr.lower(), r.text
    else:
        assert "2 offloaded" in r.proc.stderr, r.text
    assert r.out == cpu(tmp_path, op, "d", 64, shape, count=2)
    f = _kernel(r.journal, "getrf|potrf")
    assert len(f) == 2, r.journal
    assert not pipelined(r.journal), r.journal


@pytest.mark.parametrize("op", ["gesv", "posvU"])
def test_the_floor_counts_the_bytes_of_a_and_b(tmp_path, op):
    """n = 24, nrhs = 5 in float64: A and B are 24 x 29 x 8 = 5568 bytes;
    a floor of that many takes the call, one byte more does not."""
    shape = (24, 5, 3, 2)
    for floor, taken in ((5568, True), (5569, False)):
        r = gpu(tmp_path, op, "d", 32, shape, GPU_OFFLOAD_CUDA_SOLVE_MIN=floor)
        ok(r)
        assert "1 offloaded" in r.proc.stderr, r.text
        assert pipelined(r.journal) == taken, (floor, r.journal)


def test_a_failed_call_leaves_later_calls_pipelined(tmp_path):
    """The first call's factorisation fails; the second call runs whole on
    the pipeline (nothing of the failed one staged or pending)."""
    shape = (24, 5, 3, 2)
    r = gpu(tmp_path, "gesv", "z", 64, shape, count=2, FAKESOLVER_FAIL_SOLVE=1)
    ok(r)
    assert "1 offloaded" in r.proc.stderr, r.text
    assert r.out == cpu(tmp_path, "gesv", "z", 64, shape, count=2)
    assert len(_kernel(r.journal, "getrf")) == 1, r.journal    # the failed one queued nothing
    assert pipelined(r.journal), r.journal


def _allocs(r):
    return r.counts.get("cuMemAlloc_v2", 0)


@pytest.mark.parametrize("op,p,iw", FAIL_CASES)
@pytest.mark.parametrize("kind", ["ok", "singular"])
@pytest.mark.parametrize("ws", [0, 8 << 20])
def test_a_failed_call_leaves_nothing_behind_for_the_next(tmp_path, op, p, iw, kind, ws):
    """The first of two calls fails at each step in turn (each copy at its
    call and at its execution, the factorisation and the solve when queued
    and when run), also with the factorisation's workspace larger than the
    kept one: no kernel of the failed call outlives it (a factorisation
    still queued would factor the next call's A, which the pool hands the
    same buffer, a second time) and every buffer went back to the pool
    (the next call allocates nothing a clean pair of calls does not). The
    second call is pipelined and both equal the CPU's, byte for byte."""
    shape = (24, 5, 3, 2)
    extra = {"FAKESOLVER_WS": ws} if ws else {}
    clean = gpu(tmp_path, op, p, iw, shape, kind, count=2, **extra)
    ok(clean)
    want = cpu(tmp_path, op, p, iw, shape, kind, count=2)
    assert clean.out == want
    copies = sum(v for k, v in clean.counts.items() if k.startswith("cuMemcpy"))
    steps = [(k, nth) for k in ("FAKEDEV_FAIL_COPY", "FAKEDEV_FAIL_EXEC")
             for nth in range(1, copies // 2 + 1)]
    steps += [("FAKESOLVER_FAIL_SOLVE", 1), ("FAKESOLVER_FAIL_SOLVE", 2),
              ("FAKESOLVER_FAIL_RUN", 1), ("FAKESOLVER_FAIL_RUN", 2)]
    for knob, nth in steps:
        r = gpu(tmp_path, op, p, iw, shape, kind, count=2, **extra, **{knob: nth})
        ok(r)
        assert "the GPU backend failed" in r.proc.stderr, (knob, nth, r.text)
        assert r.out == want, (knob, nth)
        assert _allocs(r) == _allocs(clean), (knob, nth, r.counts, clean.counts)
        # The second call alone: from its A's copy in (the last of A's size).
        n, es = shape[0], ES[p]
        a_in = [i for i, b, _ in _copies(r.journal, "h2d") if b == n * n * es]
        assert pipelined(r.journal[a_in[-1]:]), (knob, nth, r.journal)


@pytest.mark.parametrize("value,taken", [
    (None, True), ("", True), ("8MiB", True), ("-1", True), (" 8388608", True),
    ("8388608", True), ("8388609", False),
    ("18446744073709551615", False), ("18446744073709551611", False),
    ("99999999999999999999999999", False)])
def test_the_floors_variable_bad_empty_and_huge(tmp_path, value, taken):
    """A and B of exactly the default floor (n = 32, nrhs = 16352 in
    complex128: 8 MiB) are taken; GPU_OFFLOAD_CUDA_SOLVE_MIN unset, empty
    or not a decimal number (the backend says nothing): the default; a
    number, however large (2^64 - 1 or beyond: a floor above any call),
    is the floor."""
    shape = (32, 16352, 0, 0)
    r = gpu(tmp_path, "gesv", "z", 64, shape, GPU_OFFLOAD_CUDA_SOLVE_MIN=value)
    ok(r)
    assert "1 offloaded" in r.proc.stderr, r.text
    assert "SOLVE_MIN" not in r.text, r.text
    assert pipelined(r.journal) == taken, (value, r.journal)
    assert r.out == cpu(tmp_path, "gesv", "z", 64, shape)


def test_an_x_larger_than_a_copy_chunk_waits_for_the_commit(tmp_path):
    """B of more than the copy engine's 16 MiB chunk (n = 32, nrhs = 33000
    in complex128: two chunks each way through pageable memory): each copy
    the call performs failing in turn, the second chunk of B's copy in
    included, leaves the CPU's result; X, staged, is one copy, so that no
    failure can leave part of it in the caller's B (a straight copy out
    would write B's first chunk before its second failed)."""
    shape = (32, 33000, 0, 0)
    want = cpu(tmp_path, "gesv", "z", 32, shape)
    r = gpu(tmp_path, "gesv", "z", 32, shape)
    ok(r)
    assert r.out == want and pipelined(r.journal), r.text
    n, nrhs = shape[:2]
    assert [b for _, b, _ in _copies(r.journal, "h2d")] == \
        [n * n * 16, (16 << 20) // (n * 16) * n * 16,
         n * nrhs * 16 - (16 << 20) // (n * 16) * n * 16], r.journal
    performed = r.counts.get("cuMemcpy2DAsync_v2", 0) + \
        r.counts.get("cuMemcpyDtoHAsync_v2", 0)
    for nth in range(1, performed + 3):
        r = gpu(tmp_path, "gesv", "z", 32, shape, FAKEDEV_FAIL_EXEC=nth)
        ok(r)
        assert r.out == want, nth
