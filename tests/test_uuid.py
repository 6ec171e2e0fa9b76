"""GPUs named by UUID (`GPU-...`, as `nvidia-smi -L` and Kubernetes
device plugins give them) in CUDA_VISIBLE_DEVICES, GPUMUTEX_VISIBLE_DEVICES
and `gpumutex init --visible-devices`: mapped to indices through NVML (the
fake libnvidia-ml.so.1, whose GPU i has the UUID
GPU-fa4e0000-0000-0000-0000-00000000000i); refused with a clear message
when NVML is missing, for an unknown or ambiguous UUID, and for a MIG
instance. Outcomes: the fake driver's journal (which GPUs the real cuInit
was given) and the lock directory's pool."""

import json
import os
import subprocess

import pytest

from conftest import BUILD
from preloadlib import T, assert_caught, inits, kv, run
from preloadlib import built, env  # noqa: F401 (fixtures)

GPUMUTEX = os.path.join(BUILD, "gpumutex")
FAKENVML = os.path.join(BUILD, "tests", "fakenvml")


def uuid(i):
    return "GPU-fa4e0000-0000-0000-0000-%012d" % i


def with_nvml(env, count=4):
    env["LD_LIBRARY_PATH"] += os.pathsep + FAKENVML
    fake = os.path.join(os.path.dirname(env["GPUMUTEX_LOCK_DIR"]), "nvml")
    with open(fake, "w") as f:
        f.write(f"count {count}\n")
    env["FAKENVML_FILE"] = fake
    return env


@pytest.mark.parametrize("cvd,expect", [
    (uuid(1), "1"), (uuid(3) + "," + uuid(1), "1"), ("GPU-fa4e0000-0000-0000-0000-000000000001", "1"),
    ("1," + uuid(0), "0"),
])
def test_cuda_visible_devices_by_uuid_narrows(env, cvd, expect):
    with_nvml(env)
    env["CUDA_VISIBLE_DEVICES"] = cvd
    ev = assert_caught(env, run([T / "cuprobe", "dlopen"], env))
    assert ev["cvd"] == expect


def test_gpumutex_visible_devices_by_uuid(env):
    with_nvml(env)
    env["GPUMUTEX_VISIBLE_DEVICES"] = uuid(2) + "," + uuid(3)
    env["GPUMUTEX_NUM_DEVICES"] = "2"
    ev = assert_caught(env, run([T / "cuprobe", "dlopen"], env),
                       devices=("2", "3"), n=2)
    assert ev["cvd"] == "2,3"


def test_uuid_prefix_naming_one_gpu(env):
    """A prefix naming one GPU is taken, as CUDA takes it; one naming
    several is refused."""
    with_nvml(env, count=2)
    env["CUDA_VISIBLE_DEVICES"] = uuid(1)[:-3]  # both GPUs' UUIDs start so
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "1"
    assert "more than one GPU's UUID starts so" in res.stderr
    assert inits(env) == []


@pytest.mark.parametrize("nvml,cvd,words", [
    (False, uuid(1), "libnvidia-ml.so.1"),
    (True, "GPU-00000000-dead", "no GPU NVML sees has that UUID"),
    (True, "MIG-4f3a0000-0000-0000-0000-000000000001", "names a MIG instance"),
    (True, "MIG-GPU-fa4e0000-0000-0000-0000-000000000001/1/0", "names a MIG instance"),
])
def test_uuid_refused_fails_closed_with_a_reason(env, nvml, cvd, words):
    if nvml:
        with_nvml(env)
    env["CUDA_VISIBLE_DEVICES"] = cvd
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "1"  # CUDA_ERROR_INVALID_VALUE
    lines = [l for l in res.stderr.splitlines() if l.startswith("gpumutex: ")]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("gpumutex: CUDA_VISIBLE_DEVICES=")
    assert words in lines[0], lines[0]
    assert inits(env) == []


def test_init_takes_uuids(built, tmp_path):
    lockdir = str(tmp_path / "locks")
    env = dict(os.environ, LD_LIBRARY_PATH=FAKENVML)
    env.pop("FAKENVML_FILE", None)
    p = subprocess.run([GPUMUTEX, "init", "--lock-dir", lockdir,
                        "--visible-devices", uuid(1) + ",0"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    doc = json.loads(subprocess.run(
        [GPUMUTEX, "status", "--json", "--lock-dir", lockdir],
        capture_output=True, text=True, timeout=60).stdout)
    assert doc["pool"] == [1, 0]  # as given
    # The same GPU twice, once by index and once by UUID.
    p = subprocess.run([GPUMUTEX, "init", "--lock-dir", lockdir,
                        "--visible-devices", uuid(0) + ",0"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "names GPU 0 twice" in p.stderr and uuid(0) in p.stderr
    # Without NVML: why, in one line.
    env.pop("LD_LIBRARY_PATH")
    p = subprocess.run([GPUMUTEX, "init", "--lock-dir", lockdir,
                        "--visible-devices", uuid(1)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "libnvidia-ml.so.1" in p.stderr


def test_gpumutex_run_and_python_map_uuids(built, tmp_path):
    """gpumutex-run and the Python package give the child the GPU's index
    (CUDA_VISIBLE_DEVICES before the grant: docs/preload.md)."""
    env = dict(os.environ, LD_LIBRARY_PATH=FAKENVML)
    env.pop("FAKENVML_FILE", None)
    lockdir = str(tmp_path / "locks")
    r = subprocess.run([os.path.join(BUILD, "gpumutex-run"), "--visible-devices",
                        uuid(1), "--lock-dir", lockdir, "--", "env"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "CUDA_VISIBLE_DEVICES=1" in r.stdout.splitlines()
    py = subprocess.run(
        ["/usr/bin/python3", "-c",
         "import gpumutex; e = gpumutex.environ(visible_devices=%r, env={}); "
         "print(e['CUDA_VISIBLE_DEVICES'])" % (uuid(1) + "," + uuid(0))],
        env=dict(env, PYTHONPATH=os.path.join(os.path.dirname(BUILD), "python")),
        capture_output=True, text=True, timeout=60)
    assert py.returncode == 0, py.stderr
    assert py.stdout.strip() == "0"  # the first of them, in PCI order
    mig = subprocess.run(
        ["/usr/bin/python3", "-c",
         "import gpumutex; gpumutex.environ(visible_devices='MIG-1', env={})"],
        env=dict(env, PYTHONPATH=os.path.join(os.path.dirname(BUILD), "python")),
        capture_output=True, text=True, timeout=60)
    assert mig.returncode == 1 and "names a MIG instance" in mig.stderr
