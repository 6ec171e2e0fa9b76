"""A pool's placeholder (docs/preload.md, "Device queries"): in a pool
(more candidate GPUs than GPUMUTEX_NUM_DEVICES) gpumutex-run and
gpumutex.run set CUDA_VISIBLE_DEVICES to GPUMUTEX_NUM_DEVICES of the
candidates, so that torch.cuda.device_count() before CUDA is initialised
counts what the job will be given, and mark it with
GPUMUTEX_CUDA_PLACEHOLDER; the library reads that value as no narrowing
(the job may be given any GPU of the pool) and replaces it at the grant.

Everything runs on the fake driver; which physical GPU a process used is
read from its journal (tests/lib/journal.py)."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import journal as J  # noqa: E402

from test_join import CUPROBE, LIB, RUN, TIMEOUT, Holder, fenv  # noqa: F401,E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
PH = "GPUMUTEX_CUDA_PLACEHOLDER"

# A CUDA job in Python: prints what it sees before cuInit, then cuInit, a
# context and a synchronise (journaled), then what it sees after (the C
# environment and os.environ); with "spawn", it then runs itself again as
# a child (started after the grant, with os.environ) and waits for it.
JOB = r"""
import ctypes, json, os, subprocess, sys
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
def c(k):
    v = libc.getenv(k.encode())
    return None if v is None else v.decode()
PH = "GPUMUTEX_CUDA_PLACEHOLDER"
print(json.dumps({"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "ph": os.environ.get(PH)}), flush=True)
cu = ctypes.CDLL("libcuda.so.1")
rc = cu.cuInit(0)
n, dev, ctx = ctypes.c_int(-1), ctypes.c_int(), ctypes.c_void_p()
if rc == 0:
    assert cu.cuDeviceGetCount(ctypes.byref(n)) == 0
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cu.cuCtxSynchronize() == 0
for _ in range(3):  # a few bytecodes: a pending os.environ update runs
    pass
print(json.dumps({"rc": rc, "count": n.value,
                  "c_cvd": c("CUDA_VISIBLE_DEVICES"), "c_ph": c(PH),
                  "py_cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "py_ph": os.environ.get(PH)}), flush=True)
if sys.argv[1:] == ["spawn"]:
    assert subprocess.run([sys.executable,
                           os.environ["JOBFILE"]]).returncode == 0
if rc == 0:
    assert cu.cuCtxSynchronize() == 0
    assert cu.cuCtxDestroy_v2(ctx) == 0
"""

# gpumutex.run(JOB, ...) with the environment's configuration.
VIA_PY = r"""
import os, sys, gpumutex
sys.exit(gpumutex.run([sys.executable, os.environ["JOBFILE"]] + sys.argv[1:])
         .returncode)
"""


@pytest.fixture
def penv(fenv, tmp_path):
    """A pool: GPUs 0,1 managed, one wanted; the Python package on the
    path; a timeout so that a wrong wait fails instead of hanging."""
    fenv.update(GPUMUTEX_VISIBLE_DEVICES="0,1", GPUMUTEX_NUM_DEVICES="1",
                GPUMUTEX_TIMEOUT="10",
                PYTHONPATH=os.path.join(REPO, "python"),
                JOBFILE=str(tmp_path / "job.py"))
    del fenv["GPUMUTEX_JOB"]
    (tmp_path / "job.py").write_text(JOB)
    return fenv


def launch(env, how, *args):
    if how == "gpumutex-run":
        cmd = [RUN, "--", PY, env["JOBFILE"], *args]
    else:
        cmd = [PY, "-c", VIA_PY, *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return [json.loads(l) for l in r.stdout.splitlines()], r.stderr


def used(env):
    """{pid: physical GPUs it made contexts on}, from the fake's journal."""
    out = {}
    for e in J.parse(env["FAKECUDA_JOURNAL"]):
        if e["ev"] == "begin":
            out.setdefault(e["pid"], set()).add(e["dev"])
    return out


def check_exclusive(env):
    J.check_exclusive(J.parse(env["FAKECUDA_JOURNAL"]))


HOW = ["gpumutex-run", "python"]


@pytest.mark.parametrize("how", HOW)
def test_pooled_job_counts_its_share_and_sees_its_grant(penv, how):
    """Before cuInit: one entry (GPUMUTEX_NUM_DEVICES), the placeholder;
    after the grant: the granted GPU, in C and in os.environ, and no
    placeholder."""
    before, after = launch(penv, how)[0]
    assert before == {"cvd": "0", "ph": "0"}
    assert after["rc"] == 0 and after["count"] == 1
    assert after["c_cvd"] == after["py_cvd"] == "0"
    assert after["c_ph"] is None and after["py_ph"] is None
    assert list(used(penv).values()) == [{"0"}]
    check_exclusive(penv)


@pytest.mark.parametrize("how", HOW)
def test_placeholder_gpu_held_the_pool_gives_another(penv, how):
    """Another job holds GPU 0, the placeholder's: the pooled job is not
    narrowed to it (it would wait, and time out) but given GPU 1."""
    h = Holder(dict(penv, GPUMUTEX_VISIBLE_DEVICES="0", GPUMUTEX_JOB="H"))
    try:
        (before, after), _ = launch(penv, how)
    finally:
        assert h.release() == 0
    assert before == {"cvd": "0", "ph": "0"}
    assert after["rc"] == 0 and after["count"] == 1
    assert after["c_cvd"] == after["py_cvd"] == "1"
    assert after["py_ph"] is None
    u = used(penv)
    assert u.pop(str(h.p.pid)) == {"0"}
    assert list(u.values()) == [{"1"}]
    check_exclusive(penv)


@pytest.mark.parametrize("how", HOW)
def test_child_after_the_grant_joins(penv, how):
    """A child started after the grant inherits the granted list, with no
    placeholder (the grant is the placeholder's text here): it narrows to
    its parent's GPU and joins the job's lease, waiting for nothing."""
    lines, _ = launch(penv, how, "spawn")
    parent_before, parent_after, child_before, child_after = lines
    assert parent_before == {"cvd": "0", "ph": "0"}
    assert child_before == {"cvd": "0", "ph": None}
    assert child_after["rc"] == 0 and child_after["c_cvd"] == "0"
    inits = [e for e in J.parse(penv["FAKECUDA_JOURNAL"])
             if e["ev"] == "init"]
    assert len(inits) == 2 and inits[0]["job"] == inits[1]["job"]
    assert sorted(used(penv).values()) == [{"0"}, {"0"}]
    check_exclusive(penv)


@pytest.mark.parametrize("how", HOW)
def test_child_after_a_grant_elsewhere_joins(penv, how):
    """As above, granted GPU 1 (GPU 0 held): the child uses GPU 1 too."""
    h = Holder(dict(penv, GPUMUTEX_VISIBLE_DEVICES="0", GPUMUTEX_JOB="H"))
    try:
        lines, _ = launch(penv, how, "spawn")
    finally:
        assert h.release() == 0
    assert lines[2] == {"cvd": "1", "ph": None}
    assert lines[3]["rc"] == 0 and lines[3]["c_cvd"] == "1"
    u = used(penv)
    u.pop(str(h.p.pid))
    assert sorted(u.values()) == [{"1"}, {"1"}]
    check_exclusive(penv)


@pytest.mark.parametrize("how", HOW)
def test_user_narrowing_still_narrows(penv, how):
    """The user's own CUDA_VISIBLE_DEVICES is kept, with no placeholder,
    and narrows: with GPU 1 asked for, GPU 1 is used although 0 is free."""
    before, after = launch(dict(penv, CUDA_VISIBLE_DEVICES="1"), how)[0]
    assert before == {"cvd": "1", "ph": None}
    assert after["rc"] == 0 and after["c_cvd"] == "1"
    assert list(used(penv).values()) == [{"1"}]


@pytest.mark.parametrize("how", HOW)
def test_inherited_placeholder_is_chosen_again(penv, how):
    """A launcher started inside a pooled process not yet granted (its
    CUDA_VISIBLE_DEVICES is still the placeholder) treats it as unset and
    chooses for its own job; a placeholder that does not match is stale
    and dropped."""
    e = dict(penv, CUDA_VISIBLE_DEVICES="1", GPUMUTEX_NUM_DEVICES="2")
    e[PH] = "1"
    before, after = launch(e, how)[0]
    assert before == {"cvd": "0,1", "ph": None}  # two of two: no pool
    e = dict(penv, CUDA_VISIBLE_DEVICES="1")
    e[PH] = "0"
    before, after = launch(e, how)[0]
    assert before == {"cvd": "1", "ph": None}
    assert after["c_cvd"] == "1"


# ---- The library alone, without a launcher ---------------------------------

def probe(env, **extra):
    """`cuprobe hold` with the library: its cuInit result and
    CUDA_VISIBLE_DEVICES after cuInit, then it lets go."""
    p = subprocess.Popen([CUPROBE, "hold"],
                         env=dict(env, LD_PRELOAD=LIB, **extra),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 0, err
    return dict(l.split("=", 1) for l in out.split() if "=" in l), err


def test_library_placeholder_rules(penv):
    """CUDA_VISIBLE_DEVICES equal to the placeholder: the pool (GPU 0
    held, GPU 1 given). Changed: a narrowing (to GPU 0, which is held: its
    first device call times out, fail closed, and it uses nothing). Unset: the pool. An empty placeholder matches
    nothing: CUDA_VISIBLE_DEVICES="" still means no GPU."""
    h = Holder(dict(penv, GPUMUTEX_VISIBLE_DEVICES="0", GPUMUTEX_JOB="H"))
    try:
        out, _ = probe(penv, CUDA_VISIBLE_DEVICES="0",
                       GPUMUTEX_CUDA_PLACEHOLDER="0")
        assert out["rc"] == "0" and out["cvd"] == "1"
        out, err = probe(penv, CUDA_VISIBLE_DEVICES="0",
                         GPUMUTEX_CUDA_PLACEHOLDER="1",
                         GPUMUTEX_TIMEOUT="0.2")
        assert out["cvd"] == "0" and "gave up" in err, err
        out, _ = probe(penv, GPUMUTEX_CUDA_PLACEHOLDER="0")
        assert out["rc"] == "0" and out["cvd"] == "1"
        out, _ = probe(penv, CUDA_VISIBLE_DEVICES="",
                       GPUMUTEX_CUDA_PLACEHOLDER="")
        assert out["cvd"] == ""
    finally:
        assert h.release() == 0
    u = used(penv)
    u.pop(str(h.p.pid))
    assert sorted(u.values()) == [{"1"}, {"1"}]
    check_exclusive(penv)
