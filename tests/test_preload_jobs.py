"""libgpumutex.so's exclusion and jobs: no two jobs on a GPU under
contention (and a checker that can fail), children that join their
parent's lease, forks that share it, a given job id, and Python programs
(os.environ updated, the GIL, subprocesses joining). Shared with
test_preload.py: tests/preloadlib.py (same method: real processes on the
fake driver, observable outcomes only)."""

import re
import subprocess

import pytest

from preloadlib import (LIB, PY, T, TIMEOUT, Holder, assert_caught, inits,
                        journal, kv, run)
from preloadlib import built, env  # noqa: F401 (fixtures)


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
