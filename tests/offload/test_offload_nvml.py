"""Sharing the GPU through NVML (docs/offload.md, "Sharing the GPU"): the
real policy behind the policy driver, with the fake NVML
(tests/fakenvml) on the library path. NVML is loaded only when a GPU
decision needs it; other programs' load beyond the level's limit keeps
calls on the CPU (gpu-busy); NVML's free memory below the call's needs
plus the level's reserve keeps the GPU unstarted (no-memory); absent or
failing NVML says so once and changes nothing else; the GPU read is the
one the lease gave, found by PCI bus id, or none when that cannot be
told."""

import ctypes
import ctypes.util
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import BUILD  # noqa: E402
from policylib import Driver, env  # noqa: E402

FAKENVML = os.path.join(BUILD, "tests", "fakenvml")
GIB = 1 << 30


@pytest.fixture(scope="module", autouse=True)
def build():
    import subprocess
    from conftest import REPO
    subprocess.run(["make", "-C", REPO, "-s", "all", "fakecuda", "fakenvml"],
                   check=True)


def nvml_env(tmp_path, nvml="count 1\n", devices=None, present=True, **extra):
    """The policy driver's environment (gpumutex managing `devices`, None:
    not configured) with the fake NVML answering `nvml` (its file's
    directives), its calls journalled in tmp_path/nvml.log."""
    e = env(tmp_path, devices=devices, **extra)
    if "GPU_OFFLOAD_NVML" not in extra:
        e.pop("GPU_OFFLOAD_NVML")
    if present:
        e["LD_LIBRARY_PATH"] += ":" + FAKENVML
    f = tmp_path / "nvml"
    f.write_text(nvml)
    e["FAKENVML_FILE"] = str(f)
    e["FAKENVML_LOG"] = str(tmp_path / "nvml.log")
    return e


def nvml_calls(tmp_path):
    p = tmp_path / "nvml.log"
    return p.read_text().split() if p.exists() else []


def set_nvml(tmp_path, text):
    tmp = tmp_path / "nvml.new"
    tmp.write_text(text)
    os.rename(tmp, tmp_path / "nvml")


def lines(err):
    return [l for l in err.splitlines() if l.startswith("gpu-offload:")]


def test_idle_gpu_offloads(tmp_path):
    d = Driver(nvml_env(tmp_path, "count 1\nutil 0 5 0\n"))
    r = d.call(20)
    rc, err = d.finish()
    assert r["gpu"] > 0 and r["starts"] == 1, r
    assert "gpu-busy" not in r["reasons"], r
    assert lines(err) == [], err
    calls = nvml_calls(tmp_path)
    assert calls[0] == "nvmlInit_v2" and "nvmlDeviceGetUtilizationRates" in calls


@pytest.mark.parametrize("level,util,busy", [(5, 60, True), (5, 59, False),
                                             (1, 31, True), (10, 94, False)])
def test_other_programs_load_beyond_the_level_keeps_the_cpu(tmp_path, level,
                                                            util, busy):
    e = nvml_env(tmp_path, f"count 1\nutil 0 {util} 0\n",
                 GPU_OFFLOAD_LEVEL=str(level), GPU_OFFLOAD_SUMMARY="1")
    d = Driver(e)
    r = d.call(40)
    rc, err = d.finish()
    if busy:
        assert r["gpu"] == 0 and r["starts"] == 0, r
        assert r["reasons"].get("gpu-busy", 0) >= 1, r
        summary = [l for l in err.splitlines() if "summary:" in l]
        assert len(summary) == 1 and "gpu-busy=" in summary[0], err
    else:
        assert r["gpu"] > 0 and "gpu-busy" not in r["reasons"], r


def test_nvml_is_loaded_only_for_a_gpu_decision(tmp_path):
    """Calls the model keeps on the CPU, and those before the ski-rental
    start, never load NVML."""
    e = nvml_env(tmp_path, "count 1\nutil 0 90 0\n")
    d = Driver(e)
    # savings of 3 calls (0.44 s) are below 2 x the 0.5 s start-up
    r = d.call(3)
    small = d.call(50, "gemm d 1e7 1e5 1e5 1e-4 1e-3")
    assert nvml_calls(tmp_path) == []
    rc, err = d.finish()
    assert r["reasons"] == {"ski-rental": 3} and small["gpu"] == 0, (r, small)
    assert lines(err) == []


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None,
                    reason="a real libnvidia-ml.so.1 is installed")
def test_absent_nvml_says_so_once_and_offloads(tmp_path):
    d = Driver(nvml_env(tmp_path, present=False))
    r = d.call(20)
    r2 = d.call(20)
    rc, err = d.finish()
    assert r["gpu"] > 0 and r2["gpu"] > 0, (r, r2)
    assert len(lines(err)) == 1 and "NVML is not available" in err, err
    assert "other programs' use of the GPU is not checked" in err


@pytest.mark.parametrize("fail,msg", [
    ("fail nvmlInit_v2 9", "NVML failed to start (nvmlInit: Driver Not Loaded, code 9)"),
    ("fail nvmlDeviceGetUtilizationRates 15",
     "NVML cannot read the GPU's utilisation (GPU is lost)"),
    ("fail nvmlDeviceGetCount_v2 3", "cannot tell which GPU NVML calls CUDA device 0"),
])
def test_failing_nvml_says_so_once_and_offloads(tmp_path, fail, msg):
    e = nvml_env(tmp_path, f"count 1\nutil 0 90 0\n{fail}\n",
                 GPU_OFFLOAD_IDLE_MS="0")
    d = Driver(e)
    r = d.call(20)
    r2 = d.call(20)
    rc, err = d.finish()
    assert r["gpu"] > 0 and r2["gpu"] > 0, (r, r2)
    assert len(lines(err)) == 1 and msg in err, err


@pytest.mark.parametrize("level,offloads", [(5, False), (9, True)])
def test_free_memory_below_the_reserve_keeps_the_gpu_unstarted(tmp_path, level,
                                                                offloads):
    """20 GiB free of 80: below level 5's 30% reserve (24 GiB) plus the
    call's 96 MB, above level 9's 10%."""
    e = nvml_env(tmp_path, f"count 1\nmem 0 {60 * GIB} {80 * GIB}\n",
                 GPU_OFFLOAD_LEVEL=str(level))
    d = Driver(e)
    r = d.call(20)
    rc, err = d.finish()
    if offloads:
        assert r["gpu"] > 0 and r["starts"] == 1, r
    else:
        assert r["gpu"] == 0 and r["starts"] == 0, r
        assert r["reasons"].get("no-memory", 0) >= 1, r
    assert lines(err) == [], err


def test_a_started_gpu_is_checked_only_after_an_idle_while(tmp_path):
    """While this process keeps the GPU busy (its last call less than
    GPU_OFFLOAD_IDLE_MS ago: here no time passes at all), the utilisation
    is its own and is not consulted; with GPU_OFFLOAD_IDLE_MS=0 every
    decision consults it."""
    e = nvml_env(tmp_path, "count 1\nutil 0 0 0\n")
    d = Driver(e)
    r = d.call(20)
    assert r["gpu"] > 0, r
    set_nvml(tmp_path, "count 1\nutil 0 100 0\n")
    r = d.call(20)
    d.finish()
    assert r["gpu"] > 0 and "gpu-busy" not in r["reasons"], r

    e = nvml_env(tmp_path, "count 1\nutil 0 0 0\n", GPU_OFFLOAD_IDLE_MS="0")
    d = Driver(e)
    r = d.call(20)
    assert r["gpu"] > 0, r
    set_nvml(tmp_path, "count 1\nutil 0 100 0\n")
    r = d.call(20)
    assert r["gpu"] == 0 and r["reasons"].get("gpu-busy", 0) >= 15, r
    set_nvml(tmp_path, "count 1\nutil 0 0 0\n")
    r = d.call(20)
    d.finish()
    assert r["gpu"] > 0, r


# Four GPUs whose PCI order is the reverse of NVML's index order: CUDA
# device k in PCI_BUS_ID order is NVML device 3 - k.
REVERSED = "count 4\n" + "".join(f"pci {i} 0 {3 - i} 0\n" for i in range(4))


@pytest.mark.parametrize("busy_nvml,offloads", [(2, False), (1, True)])
def test_the_leased_gpu_is_the_one_read(tmp_path, busy_nvml, offloads):
    """gpumutex leases GPU 1 (CUDA_VISIBLE_DEVICES=1, PCI_BUS_ID order):
    NVML device 2 is that GPU; another GPU's load does not matter."""
    e = nvml_env(tmp_path, REVERSED + f"util {busy_nvml} 90 0\n", devices="1")
    d = Driver(e)
    r = d.call(30)
    rc, err = d.finish()
    if offloads:
        assert r["gpu"] > 0 and "gpu-busy" not in r["reasons"], r
    else:
        assert r["gpu"] == 0 and r["reasons"].get("gpu-busy", 0) >= 1, r
    assert lines(err) == [], err


def test_a_gpu_that_cannot_be_mapped_is_not_read(tmp_path):
    """Two GPUs in CUDA's default order (fastest first, unknown to NVML):
    device 0 may be either, so neither is read, and one line says so."""
    e = nvml_env(tmp_path, "count 2\nutil 0 90 0\nutil 1 90 0\n")
    e.pop("CUDA_DEVICE_ORDER", None)
    d = Driver(e)
    r = d.call(20)
    rc, err = d.finish()
    assert r["gpu"] > 0, r
    assert len(lines(err)) == 1 and "cannot tell which GPU NVML calls CUDA device 0" in err, err
    assert "CUDA_DEVICE_ORDER is not PCI_BUS_ID" in err
    assert "nvmlDeviceGetUtilizationRates" not in nvml_calls(tmp_path)


@pytest.mark.parametrize("cvd,order,busy", [
    ("1", "PCI_BUS_ID", True), ("0", "PCI_BUS_ID", False),
    ("GPU-fa4e0000-0000-0000-0000-000000000002", None, True),
    ("GPU-fa4e0000-0000-0000-0000-000000000003", None, False)])
def test_an_inherited_cuda_visible_devices_names_the_gpu(tmp_path, cvd, order,
                                                          busy):
    """Without gpumutex: CUDA_VISIBLE_DEVICES' first GPU, by index in PCI
    order (NVML device 2 is CUDA device 1 here) or by UUID."""
    e = nvml_env(tmp_path, REVERSED + "util 2 90 0\n", CUDA_VISIBLE_DEVICES=cvd)
    if order:
        e["CUDA_DEVICE_ORDER"] = order
    d = Driver(e)
    r = d.call(20)
    rc, err = d.finish()
    if busy:
        assert r["gpu"] == 0 and r["reasons"].get("gpu-busy", 0) >= 1, r
    else:
        # (the fake driver takes no UUIDs: its start fails afterwards)
        assert "gpu-busy" not in r["reasons"], (r, err)
        assert r["gpu"] > 0 or cvd.startswith("GPU-"), (r, err)
    assert not [l for l in lines(err) if "NVML" in l], err
    if cvd.startswith("GPU-"):
        assert "nvmlDeviceGetHandleByUUID" in nvml_calls(tmp_path)


def test_nvml_off_by_setting(tmp_path):
    e = nvml_env(tmp_path, "count 1\nutil 0 90 0\n", GPU_OFFLOAD_NVML="0")
    d = Driver(e)
    r = d.call(20)
    rc, err = d.finish()
    assert r["gpu"] > 0 and nvml_calls(tmp_path) == [], r
    assert lines(err) == []
