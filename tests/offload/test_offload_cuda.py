"""The CUDA backend (build/libgpuoffload-cuda.so) where there is no GPU:
it builds from the tree's own declarations and passes the load gate; the
declarations match the toolkit's headers where those are installed; and
started without a driver, with the fake driver (which lacks what the
backend needs), or with a driver but no cuBLAS, it declines: the program's
results are right (the CPU's), exit status 0, one line on stderr naming
what was missing. The GPU itself is exercised on the H200 machine
(docs/offload.md, "The CUDA backend")."""
import ctypes.util
import os
import pathlib
import shutil
import subprocess

import pytest

import ofront as F

CUDA_BE = F.BUILD / "libgpuoffload-cuda.so"
FAKECUDA = F.BUILD / "tests" / "fakecuda"
OPCHECK = str(F.T / "opcheck")
CUDA_INCLUDE = pathlib.Path(os.environ.get("CUDA_INCLUDE", "/usr/local/cuda/include"))


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()
    subprocess.run(["make", "-C", str(F.REPO), "-s", "offload-cuda", "fakecuda",
                    "offload-cuda-fakelibs", "offload-cuda-poolunit",
                    "offload-cuda-xsmallunit"],
                   check=True, stdout=subprocess.DEVNULL)


def _host_has(lib):
    return ctypes.util.find_library(lib) is not None or \
        any((pathlib.Path(d) / f"lib{lib}.so").exists()
            for d in ("/usr/local/cuda/lib64",))


def _env(tmp_path, fake_driver):
    e = F.env(tmp_path, "gpu", backend=CUDA_BE, GPU_OFFLOAD_MIN_FLOPS=0)
    e.pop("LD_LIBRARY_PATH", None)
    e.pop("GPU_OFFLOAD_CUDA_PATH", None)
    if fake_driver:
        e["LD_LIBRARY_PATH"] = str(FAKECUDA)
        e["FAKECUDA_NUM_DEVICES"] = "1"
    return e


# Where the host has CUDA libraries, they are hidden in a mount namespace
# of the one test process: an empty ld.so.cache (the system directories
# stay searchable, so libblas/liblapack are still found) and an empty
# /usr/local/cuda.
_HIDE = ("mount --bind /dev/null /etc/ld.so.cache && "
         "mount --bind \"$GPC_EMPTY\" /usr/local/cuda && exec \"$@\"")


def _can_hide():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                       capture_output=True)
    return p.returncode == 0


def _run(tmp_path, env, prefix, hide=False, cmd=None):
    out = tmp_path / "out"
    out.mkdir()
    cmd = cmd or [OPCHECK, str(out), prefix]
    if hide:
        empty = tmp_path / "empty"
        empty.mkdir()
        env = dict(env, GPC_EMPTY=str(empty))
        if not pathlib.Path("/usr/local/cuda").is_dir():
            cmd = ["sh", "-c", "mount --bind /dev/null /etc/ld.so.cache && "
                   "exec \"$@\"", "hide"] + cmd
        else:
            cmd = ["sh", "-c", _HIDE, "hide"] + cmd
        cmd = ["unshare", "-m", "--propagation", "private"] + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return p, out


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return F.opcheck_ref(tmp_path_factory.mktemp("ref"), "d")


def _declined(p, out, ref, says):
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("gpu-offload: the GPU backend CUDA (")
    assert "did not start; every call runs on the CPU" in lines[0]
    assert says in lines[0], lines[0]
    # Every result is the CPU library's, bit for bit.
    names = [f.name for f in out.iterdir()]
    assert names
    assert [n for n in names if (out / n).read_bytes() != (ref / n).read_bytes()] == []


def test_cuda_backend_builds_from_the_tree_and_passes_the_gate():
    p = subprocess.run(["make", "-C", str(F.REPO), "-s", "offload-cuda-gate"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "exports: gpo_backend_entry" in p.stdout + p.stderr
    dyn = subprocess.run(["readelf", "-dW", str(CUDA_BE)], capture_output=True,
                         text=True, check=True).stdout
    needed = sorted(ln.split("[")[1].rstrip("]") for ln in dyn.splitlines()
                    if "(NEEDED)" in ln)
    assert needed == ["libc.so.6", "libdl.so.2"]


def test_the_device_memory_pool():
    """Reuse, the bound on cached memory, the retry after a failed
    allocation, everything freed at stop (poolunit.c: pool.c against a
    stand-in driver table)."""
    p = subprocess.run([str(F.T.parent / "offload" / "cuda-poolunit")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1] == "poolunit: ok"


def test_the_small_operand_arena():
    """Operands released in any order: the others stay owned, and the
    arena is empty again once all are (xsmallunit.c: xsmall.c against a
    stand-in driver table; releasing the last operand first freed the one
    before it, whose end is its start)."""
    p = subprocess.run([str(F.T.parent / "offload" / "cuda-xsmallunit")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1] == "xsmallunit: ok"


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").exists(),
                    reason="needs the CUDA toolkit's headers (cuda.h)")
def test_declarations_match_the_toolkit_headers():
    """cuapi.h and blasapi.h against cuda.h, cublas_api.h, cusolverDn.h:
    the build of abicheck fails on any difference."""
    p = subprocess.run(["make", "-C", str(F.REPO), "-s", "offload-cuda-abi",
                        f"CUDA_INCLUDE={CUDA_INCLUDE}"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([str(F.T.parent / "offload" / "cuda-abicheck")],
                       capture_output=True, text=True, check=True)
    assert "all checks passed" in p.stdout


def _has_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@F.needs_lapack      # opcheck and NumPy: the host-only test packages
@pytest.mark.skipif(_has_driver(), reason="this host has a CUDA driver")
def test_without_a_driver_it_declines(tmp_path, ref):
    """Through `gpu-offload run`, which finds libgpuoffload.so and so the
    CUDA backend next to itself."""
    e = _env(tmp_path, fake_driver=False)
    for k in ("LD_PRELOAD", "GPU_OFFLOAD_BACKEND"):
        e.pop(k)
    out = tmp_path / "out"
    p, out = _run(tmp_path, e, None, cmd=[str(F.BUILD / "gpu-offload"), "run", "--",
                                          OPCHECK, str(out), "dgemm"])
    _declined(p, out, ref, "no CUDA driver (libcuda.so.1 not found)")


@F.needs_lapack      # opcheck and NumPy: the host-only test packages
def test_with_a_driver_but_no_cublas_it_declines_naming_cublas(tmp_path, ref):
    """The fake driver stands in for a driver; cuBLAS is missing (hidden
    where the host has it)."""
    hide = _host_has("cublas")
    if hide and not _can_hide():
        pytest.skip("cuBLAS is installed and cannot be hidden (needs root and unshare)")
    p, out = _run(tmp_path, _env(tmp_path, fake_driver=True), "dgemm", hide=hide)
    _declined(p, out, ref, "no cuBLAS (libcublas.so.13 or .12 not found")


@F.needs_lapack      # opcheck and NumPy: the host-only test packages
@pytest.mark.skipif(not (_host_has("cublas") and _host_has("cusolver")),
                    reason="needs cuBLAS and cuSOLVER installed")
def test_the_fake_driver_declines_naming_what_it_lacks(tmp_path, ref):
    """With the real libraries but the fake driver, whose stream functions
    are stubs: start() stops at the first failing function and names it;
    nothing crashes."""
    p, out = _run(tmp_path, _env(tmp_path, fake_driver=True), "dgemm")
    _declined(p, out, ref, "cuStreamCreate failed")


FAKELIBS = F.T.parent / "offload" / "cuda-fake"


def _need_hidden_or_absent():
    """The host's own cuBLAS would be found first (the loader's search):
    hide it, or skip where that is impossible."""
    hide = _host_has("cublas") or _host_has("cusolver")
    if hide and not _can_hide():
        pytest.skip("cuBLAS is installed and cannot be hidden (needs root and unshare)")
    return hide


@F.needs_lapack      # opcheck and NumPy: the host-only test packages
def test_libraries_are_found_in_gpu_offload_cuda_path(tmp_path, ref):
    """Stand-ins for cuBLAS and cuSOLVER in the second directory of
    GPU_OFFLOAD_CUDA_PATH are found: start() gets past the libraries and
    stops at the fake driver's stub cuStreamCreate."""
    hide = _need_hidden_or_absent()
    e = _env(tmp_path, fake_driver=True)
    e["GPU_OFFLOAD_CUDA_PATH"] = f"{tmp_path}/nothing-here:{FAKELIBS}"
    p, out = _run(tmp_path, e, "dgemm", hide=hide)
    _declined(p, out, ref, "cuStreamCreate failed")


@F.needs_lapack      # opcheck and NumPy: the host-only test packages
def test_libraries_are_found_in_pips_layout(tmp_path):
    """cuBLAS in site-packages/nvidia/cu13/lib and cuSOLVER in
    site-packages/nvidia/cusolver/lib, next to a module the program loaded
    from that site-packages directory, are found."""
    hide = _need_hidden_or_absent()
    sp = tmp_path / "venv" / "lib" / "python3" / "site-packages"
    for sub, lib in (("nvidia/cu13/lib", "libcublas.so.13"),
                     ("nvidia/cusolver/lib", "libcusolver.so.12")):
        (sp / sub).mkdir(parents=True)
        shutil.copy(FAKELIBS / lib, sp / sub / lib)
    shutil.copy(FAKELIBS / "module.so", sp / "module.so")
    script = ("import ctypes, numpy as np\n"
              f"ctypes.CDLL('{sp}/module.so')\n"
              "a = np.arange(1.0, 10001.0).reshape(100, 100) / 1e4\n"
              "print(float((a @ a).sum()))\n")
    e = _env(tmp_path, fake_driver=True)
    p, _ = _run(tmp_path, e, None, hide=hide, cmd=[F.PY, "-c", script])
    plain = subprocess.run([F.PY, "-c", script], env=F.env(tmp_path), capture_output=True,
                           text=True, check=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == plain.stdout            # the CPU's result
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "CUDA (cuStreamCreate failed" in lines[0], p.stderr
