"""Tests for the fake NVIDIA driver (tests/fakecuda -> build/tests/fakecuda/libcuda.so.1).

Run with:  /usr/bin/python3 -m pytest tests/test_fakecuda.py
The session fixture runs `make fakecuda` once; the nvcc tests are skipped only
when /usr/local/cuda/bin/nvcc is absent.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "tests" / "fakecuda"
BUILD = REPO / "build" / "tests" / "fakecuda"
LIB = BUILD / "libcuda.so.1"
SELFTEST = BUILD / "selftest"
NVCC = Path("/usr/local/cuda/bin/nvcc")
CUDA_LIB64 = Path("/usr/local/cuda/lib64")

INIT_RE = re.compile(
    r"^ev=init pid=(?P<pid>\d+) job=(?P<job>\S+) cvd=(?P<cvd>\S*) "
    r"order=(?P<order>\S+) ndev=(?P<ndev>\d+) t=(?P<t>\d+)$")
DEV_RE = re.compile(
    r"^ev=(?P<ev>begin|tick|end) pid=(?P<pid>\d+) job=(?P<job>\S+) "
    r"dev=(?P<dev>\d+) t=(?P<t>\d+)$")

# Variables that would change the fake's behaviour; scrubbed from every run.
SCRUB_PREFIXES = ("FAKECUDA_", "CUDA_", "GPUMUTEX_")
SCRUB = {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_BIND_NOW", "LD_DEBUG"}


def make_cmd(*targets, extra=()):
    top = REPO / "Makefile"
    if top.exists() and "fakecuda" in top.read_text(errors="replace"):
        return ["make", "-C", str(REPO), *extra, *targets]
    # No top-level Makefile (yet): use the fragment on its own.
    return ["make", "-C", str(REPO), "-f", "tests/fakecuda/module.mk", *extra, *targets]


@pytest.fixture(scope="session", autouse=True)
def fakecuda_built():
    r = subprocess.run(make_cmd("fakecuda"), capture_output=True, text=True)
    assert r.returncode == 0, f"make fakecuda failed:\n{r.stdout}\n{r.stderr}"
    assert LIB.is_file() and SELFTEST.is_file()
    assert os.readlink(BUILD / "libcuda.so") == "libcuda.so.1"


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(SCRUB_PREFIXES) and k not in SCRUB}
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def parse_journal(path):
    """Return a list of dicts; every line must match the documented format."""
    events = []
    if not Path(path).exists():
        return events
    for line in Path(path).read_text().splitlines():
        m = INIT_RE.match(line) or DEV_RE.match(line)
        assert m, f"malformed journal line: {line!r}"
        d = m.groupdict()
        d.setdefault("ev", "init")
        events.append(d)
    return events


def run_selftest(args=(), journal=None, cwd=None, **env):
    if journal is not None:
        env["FAKECUDA_JOURNAL"] = journal
    return subprocess.run([str(SELFTEST), *args], env=clean_env(**env), cwd=cwd,
                          capture_output=True, text=True, timeout=60)


# --------------------------------------------------------------- selftest

def test_selftest_and_journal(tmp_path):
    j = tmp_path / "journal"
    r = run_selftest(journal=j, GPUMUTEX_JOB="job-42")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    ev = parse_journal(j)
    assert [e["ev"] for e in ev] == ["init", "begin", "tick", "tick", "end"]
    init = ev[0]
    assert (init["cvd"], init["order"], init["ndev"], init["job"]) == ("2,5", "-unset-", "2", "job-42")
    for e in ev[1:]:
        assert e["dev"] == "5"          # physical index, not the ordinal (1)
        assert e["job"] == "job-42"
    assert len({e["pid"] for e in ev}) == 1
    ts = [int(e["t"]) for e in ev]
    assert ts == sorted(ts)


def test_no_journal_without_env(tmp_path):
    r = run_selftest(cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_job_unset_is_dash(tmp_path):
    j = tmp_path / "journal"
    assert run_selftest(["leak"], journal=j).returncode == 0
    ev = parse_journal(j)
    assert {e["job"] for e in ev} == {"-"}


def test_sigkill_leaves_no_end(tmp_path):
    j = tmp_path / "journal"
    p = subprocess.Popen([str(SELFTEST), "hold"], env=clean_env(FAKECUDA_JOURNAL=j),
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    ev = parse_journal(j)
    assert [e["ev"] for e in ev] == ["init", "begin", "tick"]
    assert ev[1]["dev"] == "0" and ev[1]["pid"] == str(p.pid)


def test_destructor_writes_end(tmp_path):
    j = tmp_path / "journal"
    r = run_selftest(["leak"], journal=j, CUDA_VISIBLE_DEVICES="3")
    assert r.returncode == 0, r.stderr
    ev = parse_journal(j)
    assert [(e["ev"], e.get("dev")) for e in ev] == [
        ("init", None), ("begin", "3"), ("tick", "3"), ("end", "3")]


def test_concurrent_writers_do_not_interleave(tmp_path):
    j = tmp_path / "journal"
    procs = [subprocess.Popen([str(SELFTEST)], env=clean_env(FAKECUDA_JOURNAL=j),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(16)]
    for p in procs:
        assert p.wait(timeout=60) == 0
    ev = parse_journal(j)           # asserts every line is well formed
    assert len(ev) == 16 * 5
    by_pid = {}
    for e in ev:
        by_pid.setdefault(e["pid"], []).append(e["ev"])
    assert sorted(by_pid.values()) == [["init", "begin", "tick", "tick", "end"]] * 16


# ------------------------------------------------------------ enumeration

def info(journal=None, **env):
    r = run_selftest(["info"], journal=journal, **env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    m = re.match(r"^init=(\d+) count=(\d+)$", lines[0])
    assert m, r.stdout
    devs = [re.match(r"^dev=(\d+) name=Fake GPU (\d+) bus=(\S+) uuid=(\S+)$", ln).groups()
            for ln in lines[1:]]
    phys = [int(d[1]) for d in devs]
    for ordinal, (o, p, bus, uuid) in enumerate(devs):
        assert int(o) == ordinal
        assert bus == "0000:%02x:00.0" % (0x10 + int(p))
        assert uuid == "GPU-face0000-0000-0000-0000-%012d" % int(p)
    return int(m.group(1)), phys


@pytest.mark.parametrize("env, rc, phys", [
    ({}, 0, list(range(8))),
    ({"CUDA_VISIBLE_DEVICES": "0,9,1"}, 0, [0]),
    ({"CUDA_VISIBLE_DEVICES": ""}, 100, []),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, 100, []),
    ({"CUDA_VISIBLE_DEVICES": "2,5"}, 0, [2, 5]),
    ({"CUDA_VISIBLE_DEVICES": "7,x,1"}, 0, [7]),
    ({"CUDA_VISIBLE_DEVICES": "3,3,4"}, 0, [3]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-fake0000-0000-0000-0000-000000000006,3"}, 0, [6, 3]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-fake0000-0000-0000-0000-000000000004"}, 0, [4]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-fake0000-0000-0000-0000-00000000000,1"}, 100, []),
    ({"CUDA_VISIBLE_DEVICES": "MIG-abc,1"}, 100, []),
    ({"FAKECUDA_NUM_DEVICES": "2"}, 0, [0, 1]),
    ({"FAKECUDA_NUM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "0,2,1"}, 0, [0]),
    ({"FAKECUDA_NUM_DEVICES": "0"}, 100, []),
    ({"FAKECUDA_NUM_DEVICES": "16"}, 0, list(range(16))),
    # FASTEST_FIRST (the default order) differs from PCI order only on request.
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, 0, [0, 1]),
    ({"FAKECUDA_FASTEST_FIRST_REVERSED": "1", "CUDA_VISIBLE_DEVICES": "0,1"}, 0, [7, 6]),
    ({"FAKECUDA_FASTEST_FIRST_REVERSED": "1", "CUDA_DEVICE_ORDER": "FASTEST_FIRST",
      "CUDA_VISIBLE_DEVICES": "0,1"}, 0, [7, 6]),
    ({"FAKECUDA_FASTEST_FIRST_REVERSED": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
      "CUDA_VISIBLE_DEVICES": "0,1"}, 0, [0, 1]),
    ({"FAKECUDA_FASTEST_FIRST_REVERSED": "1"}, 0, list(range(7, -1, -1))),
    # UUIDs name physical devices whatever the order.
    ({"FAKECUDA_FASTEST_FIRST_REVERSED": "1",
      "CUDA_VISIBLE_DEVICES": "GPU-fake0000-0000-0000-0000-000000000001"}, 0, [1]),
])
def test_visible_devices(tmp_path, env, rc, phys):
    j = tmp_path / "journal"
    got_rc, got_phys = info(journal=j, **env)
    assert (got_rc, got_phys) == (rc, phys)
    ev = parse_journal(j)
    assert len(ev) == 1 and ev[0]["ev"] == "init"
    assert ev[0]["ndev"] == str(len(phys))
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    assert ev[0]["cvd"] == ("-unset-" if cvd is None else cvd)
    assert ev[0]["order"] == env.get("CUDA_DEVICE_ORDER", "-unset-")


def test_cuinit_looks_itself_up():
    """cuInit does dlopen("libcuda.so.1", RTLD_NOLOAD) + dlsym(cuGetProcAddress_v2)
    like the real driver, unless FAKECUDA_NO_SELF_DLOPEN=1."""
    def lookups(**env):
        r = run_selftest(["info"], LD_DEBUG="symbols", **env)
        assert r.returncode == 0
        return r.stderr.count("symbol=cuGetProcAddress_v2;")
    assert lookups() >= 1
    assert lookups(FAKECUDA_NO_SELF_DLOPEN=1) == 0


# ------------------------------------------------------- cuGetProcAddress

def test_getprocaddress_normal():
    r = run_selftest(["gpa"])
    assert r.stdout.strip() == "v1=0 v2=0 status=0 pfn=set"


def test_no_getprocaddress():
    r = run_selftest(["gpa"], FAKECUDA_NO_GETPROCADDRESS=1)
    assert r.stdout.strip() == "v1=500 v2=500 status=1 pfn=null"


def test_hide_getprocaddress():
    r = run_selftest(["dlsym"])
    assert r.stdout.split() == ["cuGetProcAddress=set", "cuGetProcAddress_v2=set", "cuInit=set"]
    r = run_selftest(["dlsym"], FAKECUDA_HIDE_GETPROCADDRESS=1)
    assert r.stdout.split() == ["cuGetProcAddress=null", "cuGetProcAddress_v2=null", "cuInit=set"]


CHECK_ALL_NAMES = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
gpa = lib.cuGetProcAddress_v2
gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_int)]
bad = []
for name in open(sys.argv[2]).read().split():
    p, st = ctypes.c_void_p(), ctypes.c_int(-1)
    rc = gpa(name.encode(), ctypes.byref(p), 13000, 0, ctypes.byref(st))
    if rc != 0 or not p.value or st.value != 0:
        bad.append(name)
# stubs answer CUDA_ERROR_NOT_SUPPORTED, also before cuInit
assert lib.cuStreamCreate() == 801 and lib.cuMemcpyHtoD_v2() == 801
assert lib.cuGetExportTable(None, None) == 801
assert lib.cuDeviceGetCount(ctypes.byref(ctypes.c_int())) == 3   # not initialised
print(" ".join(bad))
"""


def test_every_driver_name_is_exported_and_in_the_table():
    names = (SRC / "stubs.txt").read_text().split()
    assert len(names) > 600 and names == sorted(set(names))
    r = subprocess.run([sys.executable, "-c", CHECK_ALL_NAMES, str(LIB), str(SRC / "stubs.txt")],
                       env=clean_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", "not resolvable: " + r.stdout
    if shutil.which("nm"):
        out = subprocess.run(["nm", "-D", "--defined-only", str(LIB)],
                             capture_output=True, text=True, check=True).stdout
        exported = {ln.split()[-1] for ln in out.splitlines() if ln.strip()}
        assert exported == set(names), "exports must be exactly the stubs.txt names"


def test_builds_with_clang(tmp_path):
    if not shutil.which("clang"):
        pytest.skip("clang not installed")
    out = tmp_path / "clang"
    r = subprocess.run(make_cmd("fakecuda", extra=["CC=clang", f"FAKECUDA_BUILD={out}"]),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" not in (r.stdout + r.stderr).lower()
    r = subprocess.run([str(out / "selftest")], env=clean_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ------------------------------------------- NVIDIA's own runtime (cudart)

@pytest.fixture(scope="session")
def devcount(tmp_path_factory):
    if not NVCC.exists():
        pytest.skip(f"{NVCC} not present")
    d = tmp_path_factory.mktemp("devcount")
    bins = {}
    for variant, flags in (("static", []), ("shared", ["--cudart", "shared"])):
        exe = d / f"devcount_{variant}"
        r = subprocess.run([str(NVCC), *flags, "-o", str(exe), str(SRC / "devcount.cu")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        bins[variant] = exe
    return bins


@pytest.mark.parametrize("variant", ["static", "shared"])
@pytest.mark.parametrize("mode", ["getprocaddress", "hidden-getprocaddress"])
def test_cudart_reaches_fake_cuinit(tmp_path, devcount, variant, mode):
    j = tmp_path / "journal"
    ld = str(BUILD) + (f":{CUDA_LIB64}" if variant == "shared" else "")
    env = {"FAKECUDA_JOURNAL": j, "LD_LIBRARY_PATH": ld, "CUDA_VISIBLE_DEVICES": "1,3",
           "GPUMUTEX_JOB": "cudart"}
    if mode == "hidden-getprocaddress":
        env["FAKECUDA_HIDE_GETPROCADDRESS"] = "1"   # cudart falls back to dlsym()
    r = subprocess.run([str(devcount[variant])], env=clean_env(**env),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("err="), r.stdout
    ev = parse_journal(j)
    inits = [e for e in ev if e["ev"] == "init"]
    assert len(inits) == 1, (r.stdout, ev)
    assert (inits[0]["cvd"], inits[0]["ndev"], inits[0]["job"]) == ("1,3", "2", "cudart")


@pytest.mark.parametrize("variant", ["static", "shared"])
def test_cudart_with_no_getprocaddress(tmp_path, devcount, variant):
    """FAKECUDA_NO_GETPROCADDRESS=1: cuGetProcAddress(_v2) exist but fail for
    every name.  CUDA 13's cudart falls back to dlsym() only when the
    cuGetProcAddress_v2 symbol is missing, not when it fails, so it gives up
    (cudaErrorInsufficientDriver = 35) before calling cuInit.  Use
    FAKECUDA_HIDE_GETPROCADDRESS=1 to exercise the dlsym() fallback."""
    j = tmp_path / "journal"
    ld = str(BUILD) + (f":{CUDA_LIB64}" if variant == "shared" else "")
    r = subprocess.run([str(devcount[variant])],
                       env=clean_env(FAKECUDA_JOURNAL=j, LD_LIBRARY_PATH=ld,
                                     FAKECUDA_NO_GETPROCADDRESS=1),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("err=35 "), r.stdout
    assert parse_journal(j) == []
