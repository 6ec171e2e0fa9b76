"""The calls that stay on the CPU take no lock that threads share
(docs/offload.md, "Threads"): below the threshold, kept by the model or
by the ski-rental rule, paused, nested. lockcheck's threads make their
calls under liblockcount.so, which counts every mutex, read-write lock,
spin lock and semaphore call made through a PLT by the calling thread;
after a warm-up, none per call. Counted, not timed."""
import subprocess

import pytest

import ofront as F

LOCKCHECK = str(F.T / "lockcheck")
LOCKCOUNT = str(F.T / "liblockcount.so")

# The model keeps lockcheck's 8192-flop dgemm on the CPU (the GPU's curve
# is a thousand times slower) ...
MODEL_CPU = """gpu-offload-profile 1
source synthetic
startup 0.5
h2d 1e-5 1e10
d2h 1e-5 1e10
cpu dgemm 1e3:1e10 1e12:1e10
gpu dgemm 1e3:1e7 1e12:1e7
"""
# ... or the GPU would pay, but never enough to start it (ski rental).
RENTAL = """gpu-offload-profile 1
source synthetic
startup 1e9
h2d 1e-9 1e12
d2h 1e-9 1e12
cpu dgemm 1e3:1e6 1e12:1e6
gpu dgemm 1e3:1e13 1e12:1e13
"""


@pytest.fixture(scope="module", autouse=True)
def _build():
    if not F.HAVE_LAPACK:
        pytest.skip("needs libblas3/liblapack3 (the test programs link them)")
    F.build()


def lockcheck(tmp, phase, profile=MODEL_CPU, threads=4, n=300):
    prof = tmp / "profile"
    prof.write_text(profile)
    e = F.env(tmp, "", GPU_OFFLOAD_MIN_FLOPS="1000",
              GPU_OFFLOAD_PROFILE=str(prof), GPU_OFFLOAD_NVML="0",
              GPU_OFFLOAD_SUMMARY="1")
    e["LD_PRELOAD"] = LOCKCOUNT + ":" + str(F.LIB)
    p = subprocess.run([LOCKCHECK, phase, str(threads), str(n)], env=e,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.endswith("ok\n"), (p.stdout, p.stderr)
    return int(p.stdout.split()[1]), p.stderr


def test_the_counter_sees_the_policys_lock(tmp_path):
    """The counter counts what it must: calls the policy sends to the GPU
    (forced) take its lock, every one."""
    locks, err = lockcheck(tmp_path, "decided", n=50)
    assert locks == 0
    prof = tmp_path / "p2"
    prof.write_text(MODEL_CPU)
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS="1000",
              GPU_OFFLOAD_PROFILE=str(prof), GPU_OFFLOAD_NVML="0")
    e["LD_PRELOAD"] = LOCKCOUNT + ":" + str(F.LIB)
    p = subprocess.run([LOCKCHECK, "decided", "2", "50"], env=e,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.endswith("ok\n"), p.stderr
    assert int(p.stdout.split()[1]) >= 50, p.stdout


@pytest.mark.parametrize("phase,profile,reason", [
    ("small", MODEL_CPU, "small"),
    ("decided", MODEL_CPU, "model-cpu"),
    ("decided", RENTAL, "ski-rental"),
    ("paused", MODEL_CPU, "paused"),
    ("nested", MODEL_CPU, "nested"),
])
def test_calls_kept_on_the_cpu_take_no_shared_lock(tmp_path, phase, profile,
                                                   reason):
    locks, err = lockcheck(tmp_path, phase, profile)
    # every call had the reason the phase is about
    assert f" {reason}=" in err, err
    assert "decided, 0 offloaded" in err, err
    assert locks == 0, f"{locks} lock calls in 300 calls of one thread"
