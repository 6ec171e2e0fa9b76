"""The CUDA backend's gemm pipeline (src/offload/cuda/xgemm.c, run_host
of src/offload/backend.h): the frontend (build/libgpuoffload.so) and the
backend (build/libgpuoffload-cuda.so) on the fake driver (fakedev.c) with
the stand-in cuBLAS (fakesolver.c, whose gemm is queued on its stream and
runs only at the wait, as a kernel on the device: a panel copied out
before its kernel's event was waited for comes back unchanged).
gemmpipe.c calls ?gemm_ with integer-valued operands and checks every
element exactly and the padding beyond the rows of C. The pipeline's
thresholds are lowered (GPU_OFFLOAD_CUDA_PANEL_MIN=0, panels of a
multiple of 8 columns), so that n = 37 makes 5 panels, the last of 5
columns. Counts (FAKEDEV_COUNTS), no timings."""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
B = REPO / "build"
FD = B / "tests" / "offload" / "cuda" / "fakedev"
PROG = B / "tests" / "offload" / "gemmpipe"

pytestmark = pytest.mark.skipif(
    not (pathlib.Path("/usr/lib/x86_64-linux-gnu/libblas.so.3").exists()
         or subprocess.run(["sh", "-c", "ldconfig -p | grep -q libblas.so.3"]).returncode == 0),
    reason="needs the system's libblas.so.3")

M, N, K = 20, 37, 13
PANELS = 5              # of 8 columns: 8 8 8 8 5


@pytest.fixture(scope="module", autouse=True)
def _build():
    subprocess.run(["make", "-C", str(REPO), "-s", "offload", "offload-cuda",
                    "xfer-tests", "small-tests", "gemm-tests"], check=True,
                   stdout=subprocess.DEVNULL)


def _env(tmp_path, **extra):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("GPU_OFFLOAD", "FAKEDEV", "FAKESOLVER", "LD_"))}
    e.update(LD_LIBRARY_PATH=str(FD), LD_PRELOAD=str(B / "libgpuoffload.so"),
             GPU_OFFLOAD_FORCE="gpu", GPU_OFFLOAD_MIN_FLOPS="0",
             GPU_OFFLOAD_BACKEND=str(B / "libgpuoffload-cuda.so"),
             GPU_OFFLOAD_NVML="0", GPU_OFFLOAD_SUMMARY="1",
             GPU_OFFLOAD_CUDA_PANEL_MIN="0", GPU_OFFLOAD_CUDA_PANEL_WIDTH="8",
             GPU_OFFLOAD_CUDA_PANEL_INTENSITY="0",
             FAKEDEV_COUNTS=str(tmp_path / "counts"))
    e.update({k: str(v) for k, v in extra.items()})
    return e


def gemm(tmp_path, p, ta, tb, beta, pad=3, count=1, m=M, n=N, k=K, **extra):
    """Run gemmpipe; its stdout, stderr and the fake's counts."""
    c = tmp_path / "counts"
    if c.exists():
        c.unlink()
    r = subprocess.run([str(PROG), p, ta, tb, str(m), str(n), str(k), str(pad),
                        str(beta), str(count)], env=_env(tmp_path, **extra),
                       capture_output=True, text=True, timeout=120)
    counts = {}
    if c.exists():
        for line in c.read_text().splitlines():
            name, v = line.split()
            counts[name] = counts.get(name, 0) + int(v)
    return r, counts


def kernels(counts, p):
    return counts.get(f"cublas{p.upper()}gemm_v2_64", 0)


@pytest.mark.parametrize("p", ["s", "d", "c", "z"])
@pytest.mark.parametrize("ta,tb", [("N", "N"), ("T", "N"), ("N", "T"),
                                   ("C", "C"), ("N", "C"), ("T", "T")])
@pytest.mark.parametrize("beta", [0, 3])
def test_panels_compute_exactly_what_gemm_defines(tmp_path, p, ta, tb, beta):
    """Every precision, transposes of A and B (op(B)^T: a panel is a block
    of B's rows, copied with B's pitch), beta = 0 (C a pure output, copied
    straight into the caller's memory) and beta != 0 (C read, staged panel
    by panel, committed at the end), ld 3 beyond the rows: exact, the
    padding untouched, and each call made of 5 kernels (1 before)."""
    r, c = gemm(tmp_path, p, ta, tb, beta, count=2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout
    assert "2 offloaded" in r.stderr, r.stderr
    assert kernels(c, p) == 2 * PANELS, c
    # An event recorded behind each panel's kernel.
    assert c.get("cuEventRecord", 0) >= 2 * PANELS, c


@pytest.mark.parametrize("width,panels", [("8", 5), ("36", 2), ("5", 8)])
def test_panel_counts_that_do_not_divide_n(tmp_path, width, panels):
    """n = 37 in panels of 8 (last 5), of 36 (last 1), and GPU_OFFLOAD_CUDA
    _PANELS=8 of width 5 (last 2)."""
    r, c = gemm(tmp_path, "d", "N", "T", 2, GPU_OFFLOAD_CUDA_PANEL_WIDTH=width)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout
    assert kernels(c, "d") == panels, c


@pytest.mark.parametrize("why", ["off", "small", "intensity", "one-panel", "verify"])
def test_the_frontends_flow_runs_where_the_pipeline_does_not_take_the_call(tmp_path, why):
    """GPU_OFFLOAD_CUDA_PANELS=0 (the benchmark's side by side), a call
    below the size floor (the default 64 MiB), one of too few flops per
    byte (the default floor of 1024: 2mnk over the operands' bytes is
    about 1.6 here), n of one panel, and verify mode (which stages every
    output itself): one kernel, the frontend's alloc/to_device/run/
    to_host, still exact."""
    extra = {"off": {"GPU_OFFLOAD_CUDA_PANELS": "0"},
             "small": {"GPU_OFFLOAD_CUDA_PANEL_MIN": str(64 << 20)},
             "intensity": {"GPU_OFFLOAD_CUDA_PANEL_INTENSITY": "1024"},
             "one-panel": {"GPU_OFFLOAD_CUDA_PANEL_WIDTH": "64"},
             "verify": {"GPU_OFFLOAD_VERIFY": "1"}}[why]
    r, c = gemm(tmp_path, "d", "N", "N", 2, count=2, **extra)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout
    assert kernels(c, "d") == 2, c
    if why == "verify":
        assert "mismatch" not in r.stderr.lower(), r.stderr
    else:
        assert "2 offloaded" in r.stderr, r.stderr


def _copies_of_one_call(tmp_path, beta):
    r, c = gemm(tmp_path, "d", "N", "T", beta)
    assert r.returncode == 0 and kernels(c, "d") == PANELS, (r.stderr, c)
    return c["cuMemcpy2DAsync_v2"]


@pytest.mark.parametrize("beta", [0, 3])
@pytest.mark.parametrize("knob", ["FAKEDEV_FAIL_COPY", "FAKEDEV_FAIL_EXEC"])
def test_a_failed_copy_at_any_step_reruns_the_call_on_the_cpu(tmp_path, beta, knob):
    """Every copy of a pipelined call fails in turn: queueing it
    (FAKEDEV_FAIL_COPY, the N-th copy call) or performing it (FAKEDEV_FAIL
    _EXEC, reported by the wait): op(A) in, any panel of B or C in, any
    panel out. The call falls back (the summary shows 0 offloaded and the
    failed step), the CPU reruns it, and the result is exact: with
    beta != 0 that proves C was still the caller's C (a panel already
    written would be scaled by beta twice)."""
    total = _copies_of_one_call(tmp_path, beta)
    assert total == 1 + PANELS * (3 if beta else 2)
    for nth in range(1, total + 1):
        r, c = gemm(tmp_path, "d", "N", "T", beta, **{knob: nth})
        assert r.returncode == 0, (nth, r.stdout + r.stderr)
        assert "ok" in r.stdout, (nth, r.stdout)
        assert "0 offloaded" in r.stderr, (nth, r.stderr)
        assert "the GPU backend failed copying" in r.stderr, (nth, r.stderr)


@pytest.mark.parametrize("beta", [0, 3])
def test_a_failed_kernel_at_any_panel_reruns_the_call_on_the_cpu(tmp_path, beta):
    for nth in range(1, PANELS + 1):
        r, c = gemm(tmp_path, "d", "N", "T", beta, FAKESOLVER_FAIL_GEMM=nth)
        assert r.returncode == 0, (nth, r.stdout + r.stderr)
        assert "ok" in r.stdout, (nth, r.stdout)
        assert "0 offloaded" in r.stderr, (nth, r.stderr)
        assert "the GPU backend failed computing" in r.stderr, (nth, r.stderr)
        assert kernels(c, "d") == nth, (nth, c)


def test_a_failed_call_leaves_later_calls_pipelined(tmp_path):
    """The 3rd kernel of the first call fails; the second call runs whole
    on the pipeline (nothing of the failed one staged or pending)."""
    r, c = gemm(tmp_path, "z", "C", "N", 2, count=2, FAKESOLVER_FAIL_GEMM=3)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout
    assert "1 offloaded" in r.stderr, r.stderr
    assert kernels(c, "z") == 3 + PANELS, c
