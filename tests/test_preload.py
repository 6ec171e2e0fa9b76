"""Integration tests of libgpumutex.so (src/preload) and gpumutex-run.

Every test starts real processes with the library preloaded, against the
fake driver (tests/fakecuda), and checks what can be observed from outside:
the fake driver's journal (did the real cuInit run, with which
CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, for which job), exit codes,
stdout/stderr and the files in the lock directory. No sleeps as
synchronisation, no timing thresholds: where one process must wait for
another, it reads a line the other prints, or waits for its exit.

Run with /usr/bin/python3 -m pytest tests/test_preload.py
"""
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fake_driver_env, readme_build_line, wrapped_names

REPO = Path(__file__).resolve().parent.parent
B = REPO / "build"
LIB = B / "libgpumutex.so"
RUN = B / "gpumutex-run"
T = B / "tests" / "preload"
NVCC = Path("/usr/local/cuda/bin/nvcc")
PY = "/usr/bin/python3"
TIMEOUT = 60  # seconds; only so that a hang fails instead of blocking CI
EXPORTS = {"cuInit", "cuGetProcAddress", "cuGetProcAddress_v2", "dlsym",
           "dlvsym", "dlmopen"}


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


# ---- Every path to cuInit -----------------------------------------------

def test_plt_call_of_linked_program(env):
    assert_caught(env, run([T / "culinked"], env))


def test_plt_call_of_cugetprocaddress_v2(env):
    assert_caught(env, run([T / "culinked", "gpa2"], env))


@pytest.mark.parametrize("args", [
    ["dlopen"],                 # dlopen + dlsym(handle)
    ["default"],                # dlsym(RTLD_DEFAULT)
    ["gpa2", "2000", "0"],      # what cudart does first
    ["gpa2", "12000", "0"],
    ["gpa2", "12000", "2"],     # per-thread default stream flag
    ["gpa2", "13000", "1"],
    ["gpa1", "11030", "0"],     # the 4-argument cuGetProcAddress
], ids=lambda a: "-".join(a))
def test_path(env, args):
    assert_caught(env, run([T / "cuprobe"] + args, env))


@pytest.mark.parametrize("version", ["11030", "12000"])
def test_self_lookup_of_cugetprocaddress(env, version):
    """cuGetProcAddress_v2("cuGetProcAddress", 11030) must hand back our
    4-argument wrapper, 12000 our 5-argument one; cuInit found through the
    returned pointer must still be ours."""
    res = run([T / "cuprobe", "self", version], env)
    assert_caught(env, res)
    out = kv(res.stdout)
    assert out["self-from"] == str(LIB)
    v2 = version == "12000"
    assert (out["self-is-v1"], out["self-is-v2"]) == (("0", "1") if v2
                                                      else ("1", "0"))
    assert out["init-from"] == str(LIB)
    assert out["gpa-rc"] == "0"


def test_dlsym_fallback_when_getprocaddress_fails(env):
    env["FAKECUDA_NO_GETPROCADDRESS"] = "1"
    res = run([T / "cuprobe", "fallback"], env)
    assert kv(res.stdout)["gpa-rc"] != "0"
    assert_caught(env, res)


def test_dlvsym(env):
    # A build of the fake driver whose names carry a symbol version.
    env["LD_LIBRARY_PATH"] = str(T / "vcuda")
    assert_caught(env, run([T / "cuprobe", "dlvsym", "CUDA_TEST_1"], env))


def test_rtld_next_is_relative_to_the_caller(env):
    """libnextshim.so interposes getpid() and forwards with
    dlsym(RTLD_NEXT): resolved relative to libgpumutex.so instead of the
    shim, it would find the shim's own getpid and never return."""
    with_lib = run([T / "nextprobe", "plain"], env)
    without = run([T / "nextprobe", "plain"], env, preload=False)
    assert with_lib.returncode == 0, with_lib.stderr
    assert with_lib.stdout == without.stdout
    out = kv(with_lib.stdout)
    assert out == {"getpid-ok": "1", "shim-calls": "1",
                   "shim-next-shared": "2", "shim-next-is-two": "1",
                   "main-next-shared": "1", "default-shared": "1",
                   "shim-next-missing": "null", "dlerror-set": "1"}


def test_rtld_next_cuinit_from_a_library(env):
    res = run([T / "nextprobe", "cuinit"], env)
    assert_caught(env, res)
    assert kv(res.stdout)["shim-next-is-two"] == "1"


@pytest.mark.parametrize("how", ["unset", "empty"])
def test_not_configured_is_pass_through(env, tmp_path, how):
    """Unset or empty GPUMUTEX_VISIBLE_DEVICES: the library does nothing,
    even with other variables malformed."""
    if how == "unset":
        del env["GPUMUTEX_VISIBLE_DEVICES"]
    else:
        env.update(GPUMUTEX_VISIBLE_DEVICES="", GPUMUTEX_NUM_DEVICES="x")
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "0"
    ev = inits(env)
    assert len(ev) == 1 and ev[0]["cvd"] == "-unset-" and ev[0]["job"] == "-"
    assert res.stderr == ""
    assert not (tmp_path / "lock").exists()


# ---- NVIDIA's own runtime -----------------------------------------------

@pytest.mark.parametrize("prog", ["cudart-static", "cudart-shared"])
def test_cudart_through_getprocaddress(env, nvcc_built, prog):
    res = run([T / prog], env)
    ev = inits(env)
    assert len(ev) == 1 and ev[0]["order"] == "PCI_BUS_ID", (ev, res.stdout)
    assert ev[0]["cvd"] in ("0", "1")


@pytest.mark.parametrize("prog", ["cudart-static", "cudart-shared"])
def test_cudart_dlsym_fallback(env, nvcc_built, prog):
    """A driver without cuGetProcAddress*: cudart dlsyms every name."""
    env["LD_LIBRARY_PATH"] = str(T / "nogpa")
    res = run([T / prog], env)
    ev = inits(env)
    assert len(ev) == 1 and ev[0]["order"] == "PCI_BUS_ID", (ev, res.stdout)
    assert ev[0]["cvd"] in ("0", "1")


@pytest.mark.parametrize("prog", ["cudart-static", "cudart-shared"])
def test_cudart_with_failing_getprocaddress(env, nvcc_built, prog):
    """FAKECUDA_NO_GETPROCADDRESS=1: CUDA 13's cudart gives up before
    cuInit (it does without gpumutex too); the library changes nothing."""
    env["FAKECUDA_NO_GETPROCADDRESS"] = "1"
    with_lib = run([T / prog], env)
    without = run([T / prog], env, preload=False)
    assert with_lib.stdout == without.stdout
    assert with_lib.returncode == without.returncode
    for e in inits(env):
        assert e["job"] == "-" or e["order"] == "PCI_BUS_ID"


# ---- Programs that do not use CUDA --------------------------------------

def test_shell_is_unchanged(env, tmp_path):
    args = ["sh", "-c", "echo hi; echo err >&2; exit 3"]
    a, b = run(args, env), run(args, env, preload=False)
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout,
                                                  b.stderr) == (3, "hi\n",
                                                                "err\n")
    assert not (tmp_path / "lock").exists()


def test_python_pass_is_unchanged(env, tmp_path):
    a, b = run([PY, "-c", "pass"], env), run([PY, "-c", "pass"], env,
                                              preload=False)
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout,
                                                  b.stderr) == (0, "", "")
    assert not (tmp_path / "lock").exists()


@pytest.mark.parametrize("mode", ["plain", "withcuda"])
def test_unrelated_cu_names_pass_through(env, tmp_path, mode):
    """cudnnCreate, curl_easy_init and an unrelated library's own cuInit
    resolve to the same functions with and without the library."""
    a = run([T / "cunames", mode], env)
    b = run([T / "cunames", mode], env, preload=False)
    assert a.returncode == b.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    out = kv(a.stdout)
    for k in ("default-cudnn-same", "handle-curl-same", "next-cudnn-same"):
        assert out[k] == "1", k
    assert out["missing"] == "null"
    assert out["handle-cuInit"] == out["default-cuInit"] == "42"
    assert out["plt-cuInit"] == "42"
    assert out["where-handle-cuInit"].startswith("libcunames.so+")
    assert a.stderr == ""
    assert inits(env) == []
    assert not (tmp_path / "lock").exists()


# ---- The built library ---------------------------------------------------

def test_exports_and_dependencies(built):
    nm = subprocess.run(["nm", "-D", "--defined-only", str(LIB)],
                        capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1].split("@")[0] for line in nm.splitlines()
             if line.split() and line.split()[1] in "TtWi"}
    assert names == EXPORTS | wrapped_names()
    dyn = subprocess.run(["readelf", "-d", str(LIB)], capture_output=True,
                         text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\).*\[(.*)\]", dyn))
    assert needed <= {"libc.so.6", "libdl.so.2", "libpthread.so.0"}, needed
    assert "Library soname: [libgpumutex.so]" in dyn
    # dl* calls bound to their oldest versions (src/preload/compat.h), so a
    # library built on glibc >= 2.34 still loads on an older one.
    syms = subprocess.run(["objdump", "-T", str(LIB)], capture_output=True,
                          text=True, check=True).stdout
    for line in syms.splitlines():
        if re.search(r"\bdl(open|close|error|addr1|info|iterate_phdr)$",
                     line):
            assert "GLIBC_2.34" not in line, line


def test_standalone_one_line_build(env, tmp_path):
    """The build line the README (and docs/preload.md) give, without make:
    the library it makes does the job (test_gate.py checks it passes the
    load gate)."""
    shutil.copytree(REPO / "src", tmp_path / "src")
    out = tmp_path / "libgpumutex.so"
    r = subprocess.run(readme_build_line(), shell=True, cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    e = dict(env, LD_PRELOAD=str(out))
    assert_caught(env, run([T / "cuprobe", "dlopen"], e, preload=False))
    # Built without optimisation, RTLD_NEXT must still be the caller's.
    res = run([T / "nextprobe", "plain"], e, preload=False)
    assert kv(res.stdout)["shim-next-shared"] == "2"


# ---- Configuration and failure --------------------------------------------

BAD = [
    ("GPUMUTEX_VISIBLE_DEVICES", "0,,1"),
    ("GPUMUTEX_VISIBLE_DEVICES", "a"),
    ("GPUMUTEX_VISIBLE_DEVICES", "-1"),
    ("GPUMUTEX_VISIBLE_DEVICES", "1,1"),
    ("GPUMUTEX_NUM_DEVICES", "0"),
    ("GPUMUTEX_NUM_DEVICES", "-1"),
    ("GPUMUTEX_NUM_DEVICES", "x"),
    ("GPUMUTEX_NUM_DEVICES", "3"),
    ("GPUMUTEX_LOCK_DIR", "relative/dir"),
    ("GPUMUTEX_TIMEOUT", "soon"),
    ("GPUMUTEX_JOB", "no spaces"),
    ("GPUMUTEX_QUIET", "false"),
    ("GPUMUTEX_QUIET", "no"),
    ("GPUMUTEX_QUIET", ""),
]


@pytest.mark.parametrize("var,value", BAD, ids=lambda x: str(x) or "empty")
def test_bad_configuration_fails_closed(env, var, value):
    env[var] = value
    res = run([T / "cuprobe", "threads", "4"], env)
    rcs = [v for k, v in (l.split("=") for l in res.stdout.splitlines())
           if k == "thread-rc"]
    assert rcs == ["1"] * 4, res.stdout  # CUDA_ERROR_INVALID_VALUE, sticky
    msgs = [l for l in res.stderr.splitlines() if l.startswith("gpumutex: ")]
    assert len(msgs) == 1 and var in msgs[0], res.stderr
    assert "gpumutex" not in res.stdout
    assert inits(env) == []


@pytest.mark.parametrize("kind", ["file", "open-dir"])
def test_unusable_lock_dir_fails_closed(env, tmp_path, kind):
    bad = tmp_path / "bad"
    if kind == "file":
        bad.write_text("")
    else:
        bad.mkdir()
        bad.chmod(0o777)  # writable by all, not sticky: refused
    env["GPUMUTEX_LOCK_DIR"] = str(bad)
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100"
    assert "gpumutex: " in res.stderr and "GPUMUTEX_LOCK_DIR" in res.stderr
    assert inits(env) == []


@pytest.mark.parametrize("cvd,expect", [
    ("1", "1"), ("3,1", "1"), ("1,0", "0"), ("0,-1,1", "0"),
])
def test_inherited_visible_devices_restrict_candidates(env, cvd, expect):
    env["CUDA_VISIBLE_DEVICES"] = cvd
    ev = assert_caught(env, run([T / "cuprobe", "dlopen"], env))
    assert ev["cvd"] == expect


@pytest.mark.parametrize("cvd", ["", "-1"])
def test_no_gpu_wanted_takes_no_lease(env, tmp_path, cvd):
    env["CUDA_VISIBLE_DEVICES"] = cvd
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100"  # the fake driver: no device
    ev = inits(env)
    assert len(ev) == 1 and ev[0]["ndev"] == "0" and ev[0]["job"] == "-"
    assert not (tmp_path / "lock").exists()


@pytest.mark.parametrize("cvd", ["5", "GPU-fake0000-0000-0000-0000-000000000000",
                                 "MIG-1234", "zero"])
def test_unsupported_visible_devices_fail_closed(env, cvd):
    env["CUDA_VISIBLE_DEVICES"] = cvd
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "1"
    assert "gpumutex: CUDA_VISIBLE_DEVICES" in res.stderr
    assert inits(env) == []


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


def used_by(env):
    """The PIDs that created a context or used one (fake journal)."""
    return {e["pid"] for e in journal(env)
            if e["ev"] in ("begin", "tick", "end")}


def test_timeout_and_waiting_message(env):
    env["GPUMUTEX_NUM_DEVICES"] = "2"
    env["CUPROBE_TOUCH"] = "1"
    h = Holder(env)
    holder_job = inits(env)[0]["job"]
    env["GPUMUTEX_TIMEOUT"] = "0.5"
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100"  # CUDA_ERROR_NO_DEVICE
    lines = res.stderr.splitlines()
    assert all(l.startswith("gpumutex: ") for l in lines), lines
    wait = [l for l in lines if "waits for" in l]
    assert len(wait) == 1, lines
    assert "pid %d" % h.pid in wait[0] and holder_job in wait[0]
    assert "cuprobe hold" in wait[0]
    assert any("GPUMUTEX_TIMEOUT" in l for l in lines)
    assert "gpumutex" not in res.stdout
    # The real cuInit ran (the lease waits for the first device call), but
    # only the holder used a device.
    assert used_by(env) == {str(h.pid)}
    # GPUMUTEX_QUIET=1: no waiting line; the failure is still explained.
    env["GPUMUTEX_QUIET"] = "1"
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100"
    assert "waits for" not in res.stderr
    assert "GPUMUTEX_TIMEOUT" in res.stderr
    assert h.release() == 0


@pytest.mark.parametrize("how", ["variable", "gpumutex-run"])
def test_timeout_zero_does_not_say_it_waits(env, how):
    """GPUMUTEX_TIMEOUT=0 (or --timeout 0) on busy GPUs: cuInit fails at
    once with CUDA_ERROR_NO_DEVICE and one line saying why; no "waits for"
    line, since the process never waits."""
    env["GPUMUTEX_NUM_DEVICES"] = "2"
    env["CUPROBE_TOUCH"] = "1"
    h = Holder(env)
    if how == "variable":
        res = run([T / "cuprobe", "dlopen"], dict(env, GPUMUTEX_TIMEOUT="0"))
    else:
        res = grun(["--timeout", "0", "--", T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100", res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "waits for" not in lines[0]
    assert lines[0].startswith("gpumutex: could not get 2 of GPUs 0,1 at "
                               "once, and GPUMUTEX_TIMEOUT=0 says not to "
                               "wait"), lines
    assert "CUDA_ERROR_NO_DEVICE" in lines[0]
    # The real cuInit ran (the lease waits for the first device call), but
    # only the holder used a device.
    assert used_by(env) == {str(h.pid)}
    assert h.release() == 0


def test_threads_make_one_lease(env, tmp_path):
    res = run([T / "cuprobe", "threads", "16"], env)
    assert kv(res.stdout)["rc"] == "0"
    assert res.stdout.count("thread-rc=0") == 16
    job = inits(env)[0]["job"]
    records = list((tmp_path / "lock" / "job").glob("*/%s.lease" % job))
    assert len(records) == 1
    members = re.findall(r"^member=(\d+)$", records[0].read_text(), re.M)
    assert len(members) == 1, records[0].read_text()


def test_errno_is_preserved(env):
    # The fake driver itself zeroes errno while it parses
    # FAKECUDA_NUM_DEVICES; leave it at its default (8) here.
    del env["FAKECUDA_NUM_DEVICES"]
    res = run([T / "cuprobe", "errno"], env)
    assert_caught(env, res)
    assert kv(res.stdout)["errno-after"] == "4242"


@pytest.mark.parametrize("n", ["1", "2"])
def test_only_the_lease_descriptors_stay_open(env, tmp_path, n):
    """After cuInit the process holds one descriptor per leased GPU (the
    lease itself) and one of its user's event log (the lease's too, for
    its exit record), all close-on-exec, and nothing else of ours."""
    env["GPUMUTEX_NUM_DEVICES"] = n
    env["CUPROBE_TOUCH"] = "1"
    res = run([T / "cuprobe", "fds"], env)
    assert_caught(env, res, n=int(n))
    fds = [l.split()[0][3:] for l in res.stdout.splitlines()
           if l.startswith("fd=")]
    cloexec = [l.split()[1] for l in res.stdout.splitlines()
               if l.startswith("fd=")]
    dev = str(tmp_path / "lock" / "dev") + "/"
    leased = inits(env)[0]["cvd"].split(",")
    log = str(tmp_path / "lock" / "job" / str(os.geteuid()) / "events.log")
    assert sorted(fds) == sorted([log] + [dev + d for d in leased]), res.stdout
    assert set(cloexec) == {"cloexec=1"}


# ---- Mutual exclusion ---------------------------------------------------

def intervals(events):
    """(job, dev, start, end) per process and device: begin .. end, or
    begin .. last tick for a process that was killed."""
    spans = {}
    for e in events:
        if e["ev"] not in ("begin", "tick", "end"):
            continue
        key = (e["pid"], e["dev"])
        t = int(e["t"])
        if e["ev"] == "begin":
            spans[key] = [e["job"], e["dev"], t, t]
        elif key in spans:
            spans[key][3] = max(spans[key][3], t)
    return [tuple(s) for s in spans.values()]


def overlaps(spans):
    bad = []
    for i, a in enumerate(spans):
        for b in spans[i + 1:]:
            if a[1] == b[1] and a[0] != b[0] and \
                    not (a[3] < b[2] or b[3] < a[2]):
                bad.append((a, b))
    return bad


def test_overlap_checker_can_fail():
    ev = [dict(ev="begin", pid="1", job="a", dev="0", t="10"),
          dict(ev="begin", pid="2", job="b", dev="0", t="15"),
          dict(ev="end", pid="1", job="a", dev="0", t="20"),
          dict(ev="end", pid="2", job="b", dev="0", t="30")]
    assert overlaps(intervals(ev))
    ev[1]["t"], ev[3]["t"] = "21", "30"
    assert not overlaps(intervals(ev))


def test_contention_no_two_jobs_share_a_gpu(env):
    """Many jobs through the real library and the fake driver, GPUs 0,1 of
    4: from the journal, no two jobs' use of a device overlaps, including
    a job that is killed while it holds its GPU."""
    killed = Holder(env)
    workers = [subprocess.Popen([str(T / "cuprobe"), "work", "20"],
                                env=dict(env, LD_PRELOAD=str(LIB)),
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for _ in range(8)]
    killed.p.kill()
    killed.p.wait(TIMEOUT)
    for w in workers:
        out, err = w.communicate(timeout=TIMEOUT)
        assert kv(out)["rc"] == "0", err
    ev = journal(env)
    spans = intervals(ev)
    assert len(spans) == 9
    assert {s[1] for s in spans} <= {"0", "1"}
    assert len({s[0] for s in spans}) == 9  # nine different jobs
    assert overlaps(spans) == []
    for e in inits(env):
        assert e["cvd"] in ("0", "1") and e["order"] == "PCI_BUS_ID"


# ---- Jobs: children join, forks share ---------------------------------------

def lease_members(tmp_path, job):
    rec = next((tmp_path / "lock" / "job").glob("*/%s.lease" % job))
    return re.findall(r"^member=(\d+)$", rec.read_text(), re.M)


def test_fork_without_exec_shares_the_lease(env, tmp_path):
    """A forked child inherits the lease (its cuInit returns at once, it
    does not join again) and keeps it alive after its parent exits."""
    env["GPUMUTEX_NUM_DEVICES"] = "2"
    env["CUPROBE_TOUCH"] = "1"
    p = subprocess.Popen([str(T / "cuprobe"), "fork"],
                         env=dict(env, LD_PRELOAD=str(LIB)),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    lines = []
    while not any(l.startswith("child-pid=") for l in lines):
        line = p.stdout.readline()
        assert line, lines
        lines.append(line)
    assert p.wait(TIMEOUT) == 0  # the parent is gone; the child lives on
    out = kv("".join(lines))
    assert out["rc"] == "0" and out["child-rc"] == "0"
    job = inits(env)[0]["job"]
    assert lease_members(tmp_path, job) == [str(p.pid)]
    other = dict(env, GPUMUTEX_TIMEOUT="0.3")
    assert kv(run([T / "cuprobe", "dlopen"], other).stdout)["rc"] == "100"
    p.stdin.close()
    p.stdout.read()  # EOF: the child has exited
    assert kv(run([T / "cuprobe", "dlopen"], other).stdout)["rc"] == "0"


@pytest.mark.parametrize("child", [["dlopen"], ["closefds", "dlopen"]],
                         ids=["plain", "closefds"])
def test_exec_child_joins_the_lease(env, child):
    """With every managed GPU leased to the parent, a child that did not
    join would wait for its own parent; GPUMUTEX_TIMEOUT turns that into a
    failure instead of a hang."""
    env.update(GPUMUTEX_NUM_DEVICES="2", GPUMUTEX_TIMEOUT="5")
    res = run([T / "cuprobe", "spawn", T / "cuprobe"] + child, env)
    assert res.returncode == 0, res.stderr
    out = res.stdout.split("spawn-status=")
    assert kv(out[0])["rc"] == "0"
    assert out[1].strip() == "0"
    assert "rc=0" in res.stdout.split("cvd=")[1]  # the child's rc
    ev = inits(env)
    assert len(ev) == 2 and ev[0]["job"] == ev[1]["job"]
    assert ev[0]["cvd"] == ev[1]["cvd"] == "0,1"


def test_given_job_id_is_used(env):
    env["GPUMUTEX_JOB"] = "my-job_1"
    assert_caught(env, run([T / "cuprobe", "dlopen"], env), job="my-job_1")


# ---- Python ---------------------------------------------------------------

PYPROBE = r"""
import ctypes, os, sys, threading, subprocess, signal
mode = sys.argv[1]
if mode == "cdll":
    rc = ctypes.CDLL("libcuda.so.1").cuInit(0)
elif mode == "pydll":
    rc = ctypes.PyDLL("libcuda.so.1").cuInit(0)
elif mode == "thread":
    r = []
    t = threading.Thread(
        target=lambda: r.append(ctypes.CDLL("libcuda.so.1").cuInit(0)))
    t.start(); t.join(); rc = r[0]
elif mode == "gil":
    rc = ctypes.PyDLL(sys.argv[2]).gil_hold_init()
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    print("c-cvd=" + libc.getenv(b"CUDA_VISIBLE_DEVICES").decode())
    print("c-job=" + libc.getenv(b"GPUMUTEX_JOB").decode())
    # The update was queued for the main thread; any eval-breaker event
    # (here a signal) runs it.
    signal.signal(signal.SIGUSR1, lambda *a: None)
    signal.raise_signal(signal.SIGUSR1)
print("rc=%d" % rc)
for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPUMUTEX_JOB"):
    print("py-%s=%s" % (k, os.environ.get(k)))
if "sub" in sys.argv:
    code = ("import ctypes, os; print('rc=%d' % "
            "ctypes.CDLL('libcuda.so.1').cuInit(0))")
    for env in (None, dict(os.environ)):
        r = subprocess.run([sys.executable, "-c", code], env=env,
                           capture_output=True, text=True)
        print("child-" + r.stdout.strip())
        sys.stderr.write(r.stderr)
"""


def pyprobe(env, *args):
    return run([PY, "-c", PYPROBE] + list(args), env, timeout=30)


@pytest.mark.parametrize("mode", ["cdll", "pydll", "thread"])
def test_python_os_environ_updated(env, mode):
    res = pyprobe(env, mode)
    assert res.returncode == 0, res.stderr
    out = kv(res.stdout)
    ev = inits(env)
    assert len(ev) == 1 and out["rc"] == "0"
    assert out["py-CUDA_VISIBLE_DEVICES"] == ev[0]["cvd"]
    assert out["py-CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert out["py-GPUMUTEX_JOB"] == ev[0]["job"]


def test_python_gil_held_while_waiting_for_cuinit_thread(env):
    res = pyprobe(env, "gil", str(T / "libgilhold.so"))
    assert res.returncode == 0, res.stderr
    out = kv(res.stdout)
    ev = inits(env)
    assert out["rc"] == "0" and len(ev) == 1
    assert out["c-cvd"] == ev[0]["cvd"] and out["c-job"] == ev[0]["job"]
    assert out["py-CUDA_VISIBLE_DEVICES"] == ev[0]["cvd"]
    assert out["py-GPUMUTEX_JOB"] == ev[0]["job"]


def test_python_subprocess_joins_the_lease(env):
    env.update(GPUMUTEX_NUM_DEVICES="2", GPUMUTEX_TIMEOUT="5")
    res = pyprobe(env, "cdll", "sub")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("child-rc=0") == 2, res.stdout + res.stderr
    ev = inits(env)
    assert len(ev) == 3 and len({e["job"] for e in ev}) == 1
    assert {e["cvd"] for e in ev} == {"0,1"}


# ---- gpumutex-run ------------------------------------------------------------

def grun(args, env, **kw):
    return run([RUN] + [str(a) for a in args], env, preload=False, **kw)


def test_run_version_and_help(env):
    r = grun(["--version"], env)
    assert (r.returncode, r.stdout) == (0, "gpumutex-run 0.1.0\n")
    r = grun(["--help"], env)
    assert r.returncode == 0
    for word in ("--visible-devices", "--num-devices", "--lock-dir",
                 "--timeout", "--quiet", "--help", "--version",
                 "GPUMUTEX_VISIBLE_DEVICES", "GPUMUTEX_NUM_DEVICES",
                 "GPUMUTEX_LOCK_DIR", "GPUMUTEX_TIMEOUT", "GPUMUTEX_QUIET",
                 "GPUMUTEX_JOB", "GPUMUTEX_LIBRARY", "LD_PRELOAD",
                 "default 1", "/tmp/libgpumutex", "wait forever"):
        assert word in r.stdout, word


@pytest.mark.parametrize("args", [
    [],
    ["--bogus", "--", "true"],
    ["--visible-devices"],
    ["--visible-devices", "a", "--", "true"],
    ["--visible-devices=0,0", "--", "true"],
    ["--visible-devices", "0,1", "--num-devices", "3", "--", "true"],
    ["--lock-dir", "relative", "--", "true"],
    ["--timeout", "x", "--", "true"],
    ["--visible-devices", "0"],
], ids=lambda a: " ".join(a) or "nothing")
def test_run_usage_errors(env, args):
    r = grun(args, env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("gpumutex-run: ")
    assert r.stdout == ""


def test_run_checks_variables_too(env):
    env["GPUMUTEX_QUIET"] = "off"
    r = grun(["--", "true"], env)
    assert r.returncode == 2, r.stderr
    assert 'GPUMUTEX_QUIET="off"' in r.stderr and "expected 1" in r.stderr
    del env["GPUMUTEX_QUIET"]
    env["GPUMUTEX_NUM_DEVICES"] = "9"
    r = grun(["--", "true"], env)
    assert r.returncode == 2 and "GPUMUTEX_NUM_DEVICES" in r.stderr
    del env["GPUMUTEX_VISIBLE_DEVICES"]
    del env["GPUMUTEX_NUM_DEVICES"]
    r = grun(["--", "true"], env)
    assert r.returncode == 2 and "--visible-devices" in r.stderr


@pytest.mark.parametrize("var,value", [
    ("GPUMUTEX_RECHECK_MS", "soon"), ("GPUMUTEX_RECHECK_MS", "-1"),
    ("GPUMUTEX_RECHECK_MS", "86400001"), ("GPUMUTEX_QUIET", "yes"),
    ("GPUMUTEX_LOCK_DIR", "x" * 10),
])
def test_run_checks_variables_without_a_flag(env, tmp_path, var, value):
    """Variables gpumutex-run has no flag for are checked as the library
    reads them: exit 2 naming the variable, and the command never runs
    (rather than running with a cuInit that fails)."""
    marker = tmp_path / "ran"
    env[var] = value
    r = grun(["--", "touch", marker], env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("gpumutex-run: ")
    assert '%s="%s"' % (var, value) in r.stderr
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["file", "symlink", "open-dir",
                                  "parent-is-a-file"])
def test_run_checks_the_lock_directory(env, tmp_path, kind):
    """An unusable lock directory is gpumutex-run's setup error (exit 2,
    the path and the reason in the message), not CUDA_ERROR_NO_DEVICE in
    the command's cuInit."""
    bad = tmp_path / "bad"
    why = {"file": "exists but is not a directory",
           "symlink": "symbolic link", "open-dir": "unsafe permissions",
           "parent-is-a-file": "a component of the path above it is not a "
                               "directory"}
    if kind == "file":
        bad.write_text("")
    elif kind == "symlink":
        (tmp_path / "real").mkdir()
        bad.symlink_to(tmp_path / "real")
    elif kind == "open-dir":
        bad.mkdir()
        bad.chmod(0o777)  # writable by all, not sticky
    else:
        (tmp_path / "parent").write_text("")
        bad = tmp_path / "parent" / "locks"
    marker = tmp_path / "ran"
    for args in (["--lock-dir", bad], []):
        e = dict(env) if args else dict(env, GPUMUTEX_LOCK_DIR=str(bad))
        r = grun(args + ["--", "touch", marker], e)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("gpumutex-run: cannot use the lock "
                                   "directory %s (%s)" % (
                                       bad, "--lock-dir" if args else
                                       "GPUMUTEX_LOCK_DIR")), r.stderr
        assert why[kind] in r.stderr, r.stderr
        assert not marker.exists()


def test_run_makes_a_missing_lock_directory(env, tmp_path):
    """As the command's first cuInit would: mode 1777, with the device
    files of the managed GPUs; then the command runs."""
    d = tmp_path / "new" / "locks"
    (tmp_path / "new").mkdir()
    r = grun(["--lock-dir", d, "--visible-devices", "0,3", "--", "true"], env)
    assert r.returncode == 0, r.stderr
    assert (d.stat().st_mode & 0o7777) == 0o1777
    assert sorted(os.listdir(d / "dev")) == ["0", "3"]


def test_run_refuses_an_empty_visible_devices(env, tmp_path):
    """Empty GPUMUTEX_VISIBLE_DEVICES is "not configured" for the library;
    gpumutex-run, whose job is to queue the command, refuses it (exit 2,
    the command does not run) unless --visible-devices is given."""
    marker = tmp_path / "ran"
    env["GPUMUTEX_VISIBLE_DEVICES"] = ""
    r = grun(["--", "touch", marker], env)
    assert r.returncode == 2, r.stderr
    assert "GPUMUTEX_VISIBLE_DEVICES is empty" in r.stderr
    assert "--visible-devices" in r.stderr
    assert not marker.exists()
    r = grun(["--visible-devices=", "--", "touch", marker], env)
    assert r.returncode == 2 and "--visible-devices is empty" in r.stderr
    assert not marker.exists()
    out = kv(grun(["--visible-devices", "1", "--", "env"], env).stdout)
    assert out["GPUMUTEX_VISIBLE_DEVICES"] == "1"


def test_run_sets_the_environment(env, tmp_path):
    other = T / "libnexttwo.so"
    env.update(GPUMUTEX_VISIBLE_DEVICES="0", GPUMUTEX_NUM_DEVICES="1",
               GPUMUTEX_JOB="inherited", LD_PRELOAD=str(other))
    r = grun(["--visible-devices=2,3", "--num-devices", "2", "--lock-dir",
              tmp_path / "l2", "--timeout=7", "--quiet", "--", "env"], env)
    assert r.returncode == 0, r.stderr
    out = kv(r.stdout)
    assert out["GPUMUTEX_VISIBLE_DEVICES"] == "2,3"
    assert out["GPUMUTEX_NUM_DEVICES"] == "2"
    assert out["GPUMUTEX_LOCK_DIR"] == str(tmp_path / "l2")
    assert out["GPUMUTEX_TIMEOUT"] == "7"
    assert out["GPUMUTEX_QUIET"] == "1"
    assert re.fullmatch(r"[0-9a-f]{32}", out["GPUMUTEX_JOB"])
    assert out["LD_PRELOAD"] == "%s:%s" % (LIB, other)
    again = kv(grun(["--", "env"], env).stdout)
    assert again["GPUMUTEX_JOB"] != out["GPUMUTEX_JOB"]  # always fresh
    assert again["GPUMUTEX_VISIBLE_DEVICES"] == "0"  # the variable


def test_run_library_override(env, tmp_path):
    copy = tmp_path / "copy.so"
    shutil.copy(LIB, copy)
    env["GPUMUTEX_LIBRARY"] = str(copy)
    out = kv(grun(["--", "env"], env).stdout)
    assert out["LD_PRELOAD"] == str(copy)


def test_run_exit_status(env, tmp_path):
    assert grun(["--", "sh", "-c", "exit 7"], env).returncode == 7
    r = grun(["--", "no-such-command-gpumutex"], env)
    assert r.returncode == 127 and "no-such-command-gpumutex" in r.stderr
    plain = tmp_path / "notexec"
    plain.write_text("#!/bin/sh\n")
    assert grun(["--", plain], env).returncode == 126
    r = grun(["true"], env)  # no "--"
    assert r.returncode == 0


def test_run_execs_in_place(env):
    p = subprocess.Popen([str(RUN), "--", "sh", "-c", "echo $$"], env=env,
                         stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=TIMEOUT)
    assert int(out) == p.pid


def test_run_end_to_end(env):
    res = grun(["--num-devices", "2", "--", T / "cuprobe", "dlopen"], env)
    ev = assert_caught(env, res, n=2)
    assert ev["cvd"] == "0,1"
