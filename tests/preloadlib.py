"""What the integration tests of libgpumutex.so (src/preload) and
gpumutex-run share: test_preload.py (every path to cuInit, the built
library), test_preload_config.py (configuration and failure),
test_preload_jobs.py (exclusion, jobs, Python), test_gpumutex_run.py, and
test_lazy_lease.py. The build fixtures, the environment on the fake
driver, running a probe with the library preloaded, reading the fake
driver's journal, the check that a cuInit went through the gate, a
process that holds a lease (Holder) and running gpumutex-run. The test
modules import the fixtures (built, nvcc_built, env) by name."""

import re
import subprocess
from pathlib import Path

import pytest

from conftest import fake_driver_env


REPO = Path(__file__).resolve().parent.parent
B = REPO / "build"
LIB = B / "libgpumutex.so"
RUN = B / "gpumutex-run"
T = B / "tests" / "preload"
NVCC = Path("/usr/local/cuda/bin/nvcc")
PY = "/usr/bin/python3"
TIMEOUT = 60  # seconds; only so that a hang fails instead of blocking CI


def make(*targets):
    cmd = ["make", "-C", str(REPO)]
    # Until the top-level Makefile includes our fragment, name it here.
    if "src/preload/module.mk" not in (REPO / "Makefile").read_text():
        cmd += ["-f", "Makefile", "-f", "src/preload/module.mk"]
    r = subprocess.run(cmd + list(targets), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="session")
def built():
    make("preload", "fakecuda", "preload-tests")


@pytest.fixture(scope="session")
def nvcc_built(built):
    if not NVCC.exists():
        pytest.skip("nvcc is not installed")
    make("preload-nvcc")


@pytest.fixture
def env(tmp_path, built):
    """A clean environment: fake driver, private journal and lock dir,
    GPUs 0,1 of 4 managed, and a timeout so that a bug fails, not hangs."""
    return fake_driver_env(tmp_path)


def run(args, env, preload=True, **kw):
    e = dict(env)
    if preload:
        e["LD_PRELOAD"] = str(LIB)
    kw.setdefault("timeout", TIMEOUT)
    return subprocess.run([str(a) for a in args], env=e, capture_output=True,
                          text=True, **kw)


def kv(text):
    """'k=v' lines of a probe's stdout, as a dict (the last one wins)."""
    out = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def journal(env):
    path = Path(env["FAKECUDA_JOURNAL"])
    if not path.exists():
        return []
    return [dict(f.split("=", 1) for f in line.split())
            for line in path.read_text().splitlines() if line.strip()]


def used_by(env):
    """The PIDs that created a context or used one (fake journal)."""
    return {e["pid"] for e in journal(env)
            if e["ev"] in ("begin", "tick", "end")}


def inits(env):
    return [e for e in journal(env) if e["ev"] == "init"]


def assert_caught(env, res, devices=("0", "1"), n=1, job=r"[0-9a-f]{32}"):
    """The probe's cuInit went through the gate: the real cuInit ran once,
    with CUDA_VISIBLE_DEVICES = the leased devices, in PCI bus order."""
    assert res.returncode == 0, res.stderr
    out = kv(res.stdout)
    assert out.get("rc") == "0", res.stdout + res.stderr
    ev = inits(env)
    assert len(ev) == 1, ev
    cvd = ev[0]["cvd"].split(",")
    assert len(cvd) == n and set(cvd) <= set(devices), ev
    assert ev[0]["order"] == "PCI_BUS_ID", ev
    assert re.fullmatch(job, ev[0]["job"]), ev
    assert out.get("cvd") == ev[0]["cvd"]
    return ev[0]


class Holder:
    """A process that holds a lease until its stdin closes."""

    def __init__(self, env, extra=()):
        e = dict(env, LD_PRELOAD=str(LIB))
        self.p = subprocess.Popen([str(T / "cuprobe"), "hold", *extra],
                                  env=e, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        self.lines = []
        while True:
            line = self.p.stdout.readline()
            assert line, "holder exited early: %s" % self.lines
            self.lines.append(line)
            if line.startswith("ready "):
                break
        self.out = kv("".join(self.lines))
        self.pid = self.p.pid

    def release(self):
        self.p.stdin.close()
        self.p.stdout.read()
        return self.p.wait(TIMEOUT)


def grun(args, env, **kw):
    return run([RUN] + [str(a) for a in args], env, preload=False, **kw)


def cli(e, *args):
    """`gpumutex ARGS --lock-dir` the environment's lock directory: its
    stdout (it must succeed)."""
    r = subprocess.run([str(B / "gpumutex"), *args, "--lock-dir",
                        e["GPUMUTEX_LOCK_DIR"]], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r.stdout
