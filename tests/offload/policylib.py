"""Helpers of the policy's tests (test_policy*.py, test_olease*.py,
test_trace*.py): the policy driver (tests/offload/policy-driver.c) as a
child process spoken to line by line, synthetic machine profiles, and the
environment of a run on the fake driver."""

import os
import subprocess

import pytest

from conftest import BUILD, fake_driver_env

DRIVER = os.path.join(BUILD, "tests", "offload", "policy-driver")
MODEL_UNIT = os.path.join(BUILD, "tests", "offload", "model-unit")
GPU_OFFLOAD = os.path.join(BUILD, "gpu-offload")
HOLDER = os.path.join(BUILD, "tests", "lease-holder")
GUARD = 120  # seconds; only to turn a hang into a failure

# CPU 1e11 flop/s, GPU 1e13, copies 1e10 B/s + 10 us, start-up 0.5 s.
PROFILE = """gpu-offload-profile 1
source synthetic
startup 0.5
h2d 1e-5 1e10
d2h 1e-5 1e10
cpu dgemm 1e6:1e11 1e12:1e11
gpu dgemm 1e6:1e13 1e12:1e13
"""

# A dgemm of n = 2000: 1.6e10 flops, 3 x 32 MB in (the driver's two
# buffers get half each), 32 MB out; T_cpu 0.16 s, T_gpu about 0.013 s.
BIG = "gemm d 1.6e10 9.6e7 3.2e7 0.16 0.013"


def write_profile(tmp_path, text=PROFILE):
    p = tmp_path / "profile"
    p.write_text(text)
    return str(p)


def env(tmp_path, devices="0", **extra):
    """The fake driver, a private lock directory and journal (shared by
    the fake driver and lease-holder), gpumutex managing `devices` of 4
    GPUs (None: gpumutex not configured), the synthetic profile, NVML
    off."""
    e = fake_driver_env(tmp_path)
    e.pop("GPUMUTEX_TIMEOUT")
    e["GM_JOURNAL"] = e["FAKECUDA_JOURNAL"]
    e["GPUMUTEX_RECHECK_MS"] = "0"
    if devices is None:
        e.pop("GPUMUTEX_VISIBLE_DEVICES")
    else:
        e["GPUMUTEX_VISIBLE_DEVICES"] = devices
    e["GPU_OFFLOAD_PROFILE"] = write_profile(tmp_path)
    # NVML (absent here: one line on stderr) only where a test asks for
    # it (test_offload_nvml.py)
    e["GPU_OFFLOAD_NVML"] = "0"
    e.update(extra)
    return e


def parse(line):
    """'gpu=3 cpu=2 starts=1 stops=0 reasons=a:1,b:2' -> dict."""
    out = {}
    for field in line.split():
        k, v = field.split("=", 1)
        if k == "reasons":
            out[k] = {r.split(":")[0]: int(r.split(":")[1])
                      for r in v.split(",") if r}
        elif k == "child":
            out[k] = int(v)
        else:
            out[k] = int(v)
    return out


class Driver:
    def __init__(self, env, preload=None):
        e = dict(env)
        if preload:
            e["LD_PRELOAD"] = preload
        self.proc = subprocess.Popen([DRIVER], env=e, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     bufsize=1)
        self.pid = self.proc.pid

    def send(self, cmd, guard=60):
        """One command, its answer. `guard` only turns a hang (a policy
        that waits in the queue, say) into a failure."""
        import select
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], guard)
        if not ready:
            self.proc.kill()
            raise AssertionError(f"no answer to {cmd!r} in {guard} s")
        line = self.proc.stdout.readline()
        assert line, f"the driver died on {cmd!r}: {self.finish()[1]}"
        return parse(line.strip()) if "=" in line else line.strip()

    def call(self, n, what=BIG):
        return self.send(f"call {n} {what}")

    def finish(self):
        """Exit; returns (rc, stderr)."""
        try:
            self.proc.stdin.write("exit\n")
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        err = self.proc.stderr.read()
        return self.proc.wait(timeout=GUARD), err


def journal_of(env):
    import journal
    path = env["FAKECUDA_JOURNAL"]
    return journal.parse(path) if os.path.exists(path) else []


def status_json(env):
    import json
    r = subprocess.run([os.path.join(BUILD, "gpumutex"), "status", "--json"],
                       env=env, capture_output=True, text=True, timeout=GUARD)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def have_lapack():
    import ctypes
    try:
        ctypes.CDLL("libblas.so.3")
        ctypes.CDLL("liblapack.so.3")
        return True
    except OSError:
        return False


# libblas3 and liblapack3 come with the host-only test packages
# (python3-numpy, .ci/packages below the marker), not in the distro-check
# roots: there the tests that run the calibration workload say they skipped.
needs_lapack = pytest.mark.skipif(not have_lapack(),
                                  reason="no libblas.so.3 / liblapack.so.3")
