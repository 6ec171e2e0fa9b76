"""What the tests of the Python package (python/gpumutex) share:
test_python.py (the API: children's environment, refused arguments,
system, run and Popen), test_python_jobs.py (`python -m gpumutex` and real
jobs on the fake driver) and test_python_install.py (pip install). The
package imported from the source tree, the fixtures (the native build, a
clean environment, the caller's os.environ left unchanged: autouse in
every module that imports it), and the child programs they run.
Imported by those modules, which import the fixtures by name."""

import json
import os
import subprocess
import sys

import pytest

from conftest import BUILD, REPO

sys.path.insert(0, os.path.join(REPO, "python"))
import gpumutex  # noqa: E402

PYTHON = sys.executable
FAKECUDA = os.path.join(BUILD, "tests", "fakecuda")
LIBRARY = os.path.join(BUILD, "libgpumutex.so")
PY_ENV = {"PYTHONPATH": os.path.join(REPO, "python")}

# A child that prints its whole environment as JSON.
PRINT_ENV = [PYTHON, "-c",
             "import json, os, sys; json.dump(dict(os.environ), sys.stdout)"]

# A CUDA job on the fake driver: cuInit (where gpumutex makes it wait), a
# context on its first visible device, uses over HOLD_S seconds, the end.
# It prints its job id and CUDA_VISIBLE_DEVICES once it holds the device.
HOLD_S = 0.3
CUDA_JOB = r"""
import ctypes, os, sys, time
cu = ctypes.CDLL("libcuda.so.1")
rc = cu.cuInit(0)
if rc:
    sys.exit("cuInit: %d" % rc)
dev = ctypes.c_int()
ctx = ctypes.c_void_p()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
print(os.environ.get("GPUMUTEX_JOB"), os.environ.get("CUDA_VISIBLE_DEVICES"),
      flush=True)
if len(sys.argv) > 1:           # hold until stdin closes
    sys.stdin.read()
end = time.monotonic() + float(os.environ.get("HOLD_S", "0"))
while time.monotonic() < end:
    assert cu.cuCtxSynchronize() == 0      # a journal "tick"
    time.sleep(0.02)
assert cu.cuCtxDestroy_v2(ctx) == 0
"""


def make_native():
    """make the native targets; the preload module's makefile is added when
    the top-level Makefile does not include it yet."""
    cmd = ["make", "-C", REPO, "-s"]
    probe = subprocess.run(cmd + ["-n", "build/libgpumutex.so"],
                           capture_output=True)
    if probe.returncode != 0:
        cmd += ["-f", "Makefile", "-f", "src/preload/module.mk"]
    subprocess.run(cmd + ["build/gpumutex", "build/libgpumutex.so",
                          "build/gpumutex-run", "fakecuda"], check=True)


@pytest.fixture(scope="session")
def native():
    make_native()
    return BUILD


@pytest.fixture
def clean_env():
    """os.environ without gpumutex's variables (the test may run under it)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("GPUMUTEX_") and k != "LD_PRELOAD"}


@pytest.fixture(autouse=True)
def caller_environ_unchanged():
    """No test may change the caller's os.environ."""
    def snapshot():
        return {k: v for k, v in os.environ.items()
                if k != "PYTEST_CURRENT_TEST"}
    before = snapshot()
    yield
    assert snapshot() == before


def child_env(**kwargs):
    """Run PRINT_ENV through gpumutex.run and return what the child saw."""
    r = gpumutex.run(PRINT_ENV, capture_output=True, text=True, check=True,
                     **kwargs)
    return json.loads(r.stdout)


def py_m(*args, env=None, **kwargs):
    """`python -m gpumutex ARGS` with the package from the source tree."""
    return subprocess.run([PYTHON, "-m", "gpumutex", *args],
                          env=dict(env or os.environ, **PY_ENV),
                          capture_output=True, text=True, timeout=60, **kwargs)
