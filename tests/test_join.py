"""Joining a job's lease: a process whose own settings do not fit its job's
live lease (it wants more GPUs, or others), through the core
(tests/lease/lease-holder) and through libgpumutex.so on the fake driver.

docs/design.md, "Jobs and joining": a joiner may use the lease's GPUs that
are among its own candidates and needs GPUMUTEX_NUM_DEVICES of them; a
job's lease cannot grow or move. When it does not fit, the joiner fails
closed (lease-holder: exit 7; cuInit: CUDA_ERROR_INVALID_VALUE) and uses no
GPU, and the job's lease is left as it was.

Every check is on an exit status, stderr, the journal or the lock
directory; GPUMUTEX_TIMEOUT is only a hang guard."""

import os
import subprocess
import sys

import pytest

import journal as J
import jobs
from conftest import BUILD, REPO, fake_driver_env

sys.path.insert(0, os.path.join(REPO, "python"))
import gpumutex  # noqa: E402

HOLDER = os.path.join(BUILD, "tests", "lease-holder")
HOLDER_SAN = os.path.join(BUILD, "tests", "lease-holder-san")
LIB = os.path.join(BUILD, "libgpumutex.so")
CUPROBE = os.path.join(BUILD, "tests", "preload", "cuprobe")
TIMEOUT = 60

# (lease's devices, joiner's overrides, devices it may use or None when
# refused, words of the refusal). The holder manages 0,1,2 and takes the
# first free ones: 1 GPU -> 0; 2 GPUs -> 0,1.
CASES = {
    "agree": (1, {}, "0", None),
    "wants-fewer": (2, {"GPUMUTEX_NUM_DEVICES": "1"}, "0,1", None),
    "subset-of-the-lease": (2, {"GPUMUTEX_VISIBLE_DEVICES": "1",
                                "GPUMUTEX_NUM_DEVICES": "1"}, "1", None),
    "overlap-enough": (2, {"GPUMUTEX_VISIBLE_DEVICES": "1,2",
                           "GPUMUTEX_NUM_DEVICES": "1"}, "1", None),
    "wants-more": (1, {"GPUMUTEX_NUM_DEVICES": "3"}, None,
                   ["holds 1 GPU (0)", "fewer than the 3", "cannot grow"]),
    "outside-its-gpus": (1, {"GPUMUTEX_VISIBLE_DEVICES": "2"}, None,
                         ["holds GPU 0", "not among", "GPUs (2)"]),
    "overlap-too-small": (2, {"GPUMUTEX_VISIBLE_DEVICES": "1,2",
                              "GPUMUTEX_NUM_DEVICES": "2"}, None,
                          ["only 1 of the GPUs", "(0,1)", "(1,2)",
                           "fewer than the 2"]),
}


def holder_env(lockdir, journal, want):
    return jobs.job_env(lockdir, journal, devices="0,1,2", want=want,
                        job="J", timeout=30)


@pytest.mark.parametrize("holder", [HOLDER, HOLDER_SAN],
                         ids=["plain", "asan"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_core_joiner_settings(built, lockdir, journal, holder, case):
    want, extra, usable, words = CASES[case]
    env = holder_env(lockdir, journal, want)
    h = jobs.start(HOLDER, env, ready=True, hold=True)
    assert h.ready()
    p = subprocess.run([holder], env=dict(env, **extra), capture_output=True,
                       text=True, timeout=TIMEOUT)
    ev = J.parse(journal)
    mine = [e for e in ev if int(e["pid"]) != h.pid]
    if usable is not None:
        assert p.returncode == 0, p.stderr
        assert [(e["ev"], e.get("devs")) for e in mine][:1] == \
            [("join", usable)]
        used = {e["dev"] for e in mine if e["ev"] in ("begin", "tick", "end")}
        assert used == set(usable.split(","))
    else:
        assert p.returncode == 7, p.stderr
        assert [e["ev"] for e in mine] == ["fail"]  # no join, no device
        assert p.stderr.startswith("gpumutex: ") and "job J" in p.stderr
        for w in words:
            assert w in p.stderr, p.stderr
        # Nothing left behind: no ticket; the record still lists the
        # holder alone, and its lease is whole: a fitting process of the
        # job still joins it at once.
        assert sorted(os.listdir(os.path.join(lockdir, "queue"))) == ["seq"]
        rec = jobs.job_file(lockdir, "J", ".lease")
        with open(rec) as f:
            members = [line for line in f if line.startswith("member=")]
        assert members == ["member=%d\n" % h.pid]
        again = subprocess.run([HOLDER], env=dict(env, GPUMUTEX_TIMEOUT="0"),
                               capture_output=True, text=True,
                               timeout=TIMEOUT)
        assert again.returncode == 0, again.stderr
        assert J.by_kind(J.parse(journal), "join")
    h.release()
    assert h.wait() == 0
    J.check_exclusive(J.parse(journal))


def test_core_refused_joiner_of_an_ended_lease_claims(built, lockdir,
                                                      journal):
    """The check is against the lease that is alive: once the job's lease
    has ended, a process of the job with other settings claims its own."""
    env = holder_env(lockdir, journal, 1)
    assert jobs.start(HOLDER, env).wait() == 0
    p = subprocess.run([HOLDER], env=dict(env, GPUMUTEX_NUM_DEVICES="3"),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    g = J.grants(J.parse(journal))
    assert [e["devs"] for e in g] == ["0", "0,1,2"]


# ---- Through libgpumutex.so -------------------------------------------


@pytest.fixture
def fenv(tmp_path, built):
    subprocess.run(["make", "-C", os.path.dirname(BUILD), "-s", "preload",
                    "fakecuda", "preload-tests"], check=True)
    return fake_driver_env(tmp_path, GPUMUTEX_VISIBLE_DEVICES="0,1,2",
                           GPUMUTEX_JOB="J")


def fake_journal(env):
    try:
        return J.parse(env["FAKECUDA_JOURNAL"])
    except FileNotFoundError:
        return []


class Holder:
    """`cuprobe hold`: holds its lease and device 0 until stdin closes."""

    def __init__(self, env):
        self.p = subprocess.Popen([CUPROBE, "hold"],
                                  env=dict(env, LD_PRELOAD=LIB),
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        out = ""
        while not out.endswith("ready %d\n" % self.p.pid):
            line = self.p.stdout.readline()
            assert line, out
            out += line
        assert "rc=0\n" in out, out

    def release(self):
        self.p.stdin.close()
        self.p.stdout.read()
        return self.p.wait(TIMEOUT)


def probe(env, **extra):
    r = subprocess.run([CUPROBE, "dlopen"],
                       env=dict(env, LD_PRELOAD=LIB, **extra),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    out = dict(line.split("=", 1) for line in r.stdout.split())
    return out, r.stderr


@pytest.mark.parametrize("case", sorted(CASES) + ["inherited-cvd",
                                                  "inherited-cvd-subset"])
def test_preload_joiner_settings(fenv, case):
    """The adversarial cases: a joiner that asks for more GPUs, whose
    GPUMUTEX_VISIBLE_DEVICES excludes the lease's GPU, or which inherited
    a CUDA_VISIBLE_DEVICES outside the lease, used to get the lease's GPU
    with rc 0 and no word."""
    if case == "inherited-cvd":
        want, extra, usable, words = 1, {"CUDA_VISIBLE_DEVICES": "1"}, None, \
            ["holds GPU 0", "not among", 'CUDA_VISIBLE_DEVICES="1"']
    elif case == "inherited-cvd-subset":
        want, extra, usable, words = 2, {"CUDA_VISIBLE_DEVICES": "1"}, "1", \
            None
        extra["GPUMUTEX_NUM_DEVICES"] = "1"
    else:
        want, extra, usable, words = CASES[case]
    fenv["GPUMUTEX_NUM_DEVICES"] = str(want)
    h = Holder(fenv)
    out, err = probe(fenv, **extra)
    inits = [e for e in fake_journal(fenv) if e["ev"] == "init"]
    if usable is not None:
        assert out["rc"] == "0" and out["cvd"] == usable, err
        assert err == ""
        assert len(inits) == 2 and inits[1]["cvd"] == usable
        assert inits[1]["job"] == "J"
    else:
        assert out["rc"] == "1", err  # CUDA_ERROR_INVALID_VALUE
        assert len(inits) == 1, inits  # the real cuInit never ran
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "gpumutex: this process cannot join its job's lease: ")
        for w in words + ["CUDA_ERROR_INVALID_VALUE", "job J"]:
            assert w in lines[0], lines[0]
        # The holder's lease is untouched: a fitting process joins it.
        out, err = probe(fenv, GPUMUTEX_TIMEOUT="0")
        assert out["rc"] == "0" and out["cvd"] == ("0" if want == 1
                                                   else "0,1"), err
    assert h.release() == 0
    J.check_exclusive(fake_journal(fenv))


# ---- Nested runs: gpumutex-run and the Python package inside a job ----

RUN = os.path.join(BUILD, "gpumutex-run")
PY = "/usr/bin/python3"

# A job that holds its GPU (a context on it, used before and after) while
# it runs a command and waits for it: `exec CMD...` with subprocess, or
# `py KWARGS CMD...` with gpumutex.run(CMD, **KWARGS).
OUTER = r"""
import ctypes, json, subprocess, sys
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
assert cu.cuCtxSynchronize() == 0
if sys.argv[1] == "exec":
    rc = subprocess.run(sys.argv[2:]).returncode
else:
    import gpumutex
    try:
        rc = gpumutex.run(sys.argv[3:], **json.loads(sys.argv[2])).returncode
    except ValueError as e:
        print("refused: %s" % e, flush=True)
        rc = 2
assert cu.cuCtxSynchronize() == 0
assert cu.cuCtxDestroy_v2(ctx) == 0
print("inner-status=%d" % rc, flush=True)
"""


@pytest.fixture
def nenv(fenv):
    # The only managed GPU is 0. GPUMUTEX_TIMEOUT is the hang guard: a
    # nested run that queued behind its caller would time out (rc=100).
    fenv.update(GPUMUTEX_VISIBLE_DEVICES="0", GPUMUTEX_TIMEOUT="10",
                PYTHONPATH=os.path.join(REPO, "python"))
    del fenv["GPUMUTEX_JOB"]
    return fenv


def outer(env, *args):
    r = subprocess.run([RUN, "--", PY, "-c", OUTER] + list(args), env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r


def check_one_job(env):
    ev = fake_journal(env)
    inits = [e for e in ev if e["ev"] == "init"]
    assert len(inits) == 2 and inits[0]["job"] == inits[1]["job"], inits
    assert {e["cvd"] for e in inits} == {"0"}
    used = {e["pid"] for e in ev if e["ev"] == "tick"}
    assert len(used) == 2  # both used GPU 0, as one job
    J.check_exclusive(ev)


@pytest.mark.parametrize("how", ["gpumutex-run", "python"])
def test_nested_run_joins_the_enclosing_job(nenv, how):
    """A job holding its only GPU runs a command as a new job and waits for
    it: the command used to wait for its own caller for ever. It joins the
    caller's job now, and says so on stderr."""
    inner = [CUPROBE, "work", "3"]
    if how == "gpumutex-run":
        r = outer(nenv, "exec", RUN, "--", *inner)
        note = "gpumutex-run: %s runs inside job " % CUPROBE
    else:
        r = outer(nenv, "py", "{}", *inner)
        note = "gpumutex: the child runs inside job "
    assert "rc=0\ncvd=0\n" in r.stdout and "inner-status=0" in r.stdout, \
        r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(note), lines
    assert "holds GPU 0: it joins that job" in lines[0]
    check_one_job(nenv)
    # Quiet: the same, without the line.
    os.unlink(nenv["FAKECUDA_JOURNAL"])
    r = outer(dict(nenv, GPUMUTEX_QUIET="1"), "exec", RUN, "--", *inner)
    assert "inner-status=0" in r.stdout and r.stderr == ""
    check_one_job(nenv)


@pytest.mark.parametrize("how", ["gpumutex-run", "python"])
@pytest.mark.parametrize("ask", [("0,1", 2), ("1", 1)],
                         ids=["more-gpus", "other-gpus"])
def test_nested_run_that_does_not_fit_is_refused_at_once(nenv, how, ask):
    """Explicit settings the enclosing job's lease cannot serve (more GPUs
    than it holds, or others): refused before the command runs (exit 2, or
    ValueError), with the reason; the command never reaches cuInit."""
    devs, n = ask
    nenv["GPUMUTEX_VISIBLE_DEVICES"] = "0,1"
    inner = [CUPROBE, "dlopen"]
    if how == "gpumutex-run":
        r = outer(nenv, "exec", RUN, "--visible-devices", devs,
                  "--num-devices", str(n), "--", *inner)
        why = r.stderr
        assert why.startswith("gpumutex-run: %s runs inside job " % CUPROBE)
    else:
        kw = '{"visible_devices": "%s", "num_devices": %d}' % (devs, n)
        r = outer(nenv, "py", kw, *inner)
        why = r.stdout
        assert "refused: the child would run inside job " in why
    assert "inner-status=2" in r.stdout, r.stdout + r.stderr
    assert "rc=" not in r.stdout  # the command never ran
    assert "holds GPUs now, so it can only share them" in why
    assert ("fewer than the 2" if n == 2 else "not among") in why
    inits = [e for e in fake_journal(nenv) if e["ev"] == "init"]
    assert len(inits) == 1  # the caller's only


@pytest.mark.parametrize("how", ["gpumutex-run", "python"])
def test_unrelated_holder_still_queues(nenv, how):
    """The GPU is held by another job, not by the caller (whose job holds
    nothing): the nested run is a new job and waits its turn as before."""
    other = Holder(dict(nenv, GPUMUTEX_JOB="other"))
    inner = [CUPROBE, "work", "3"]
    if how == "gpumutex-run":
        cmd = [RUN, "--", "sh", "-c",
               'echo "caller-job=$GPUMUTEX_JOB"; exec "$@"', "sh",
               RUN, "--", *inner]
    else:
        cmd = [RUN, "--", PY, "-c",
               "import os, sys, gpumutex; "
               "print('caller-job=' + os.environ['GPUMUTEX_JOB'], "
               "flush=True); "
               "sys.exit(gpumutex.run(sys.argv[1:]).returncode)", *inner]
    p = subprocess.Popen(cmd, env=nenv, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    waiting = p.stderr.readline()
    assert "waits for 1 GPU of 0" in waiting and "job other" in waiting, \
        waiting
    assert other.release() == 0
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 0 and "rc=0\ncvd=0\n" in out, out + err
    assert "runs inside job" not in waiting + err
    caller = out.split("caller-job=")[1].split()[0]
    inits = [e for e in fake_journal(nenv) if e["ev"] == "init"]
    assert len(inits) == 2
    assert inits[1]["job"] not in (caller, "other")
    J.check_exclusive(fake_journal(nenv))


def test_inherited_job_without_a_lease_is_a_new_job(nenv, tmp_path):
    """An inherited GPUMUTEX_JOB that holds nothing (a caller that never
    initialised CUDA, or whose job has ended) does not tie runs together:
    each is a job of its own, as before."""
    env = dict(nenv, GPUMUTEX_JOB="idle")
    a = subprocess.run([RUN, "--", "sh", "-c", 'echo "$GPUMUTEX_JOB"'],
                       env=env, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert a.returncode == 0 and a.stderr == ""
    assert a.stdout.strip() not in ("idle", "")
    assert gpumutex.environ(env=env)["GPUMUTEX_JOB"] != "idle"


def test_inherited_job_taking_its_lease_is_joined(built, nenv, journal):
    """A job one of whose processes is waiting for its GPUs (it holds the
    job lock): a run started inside it keeps its job id, so that it joins
    the lease once granted instead of queueing behind it."""
    env = jobs.job_env(nenv["GPUMUTEX_LOCK_DIR"], journal, devices="0")
    h = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="other"), ready=True,
                   hold=True)
    assert h.ready()
    w = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="T"), waiting=True)
    assert w.waited()
    r = subprocess.run([RUN, "--", "sh", "-c", 'echo "$GPUMUTEX_JOB"'],
                       env=dict(nenv, GPUMUTEX_JOB="T"), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert (r.returncode, r.stdout) == (0, "T\n"), r.stderr
    assert "runs inside job T" in r.stderr and "taking its GPUs" in r.stderr
    e = gpumutex.environ(env=dict(nenv, GPUMUTEX_JOB="T"))
    assert e["GPUMUTEX_JOB"] == "T"
    h.release()
    assert [h.wait(), w.wait()] == [0, 0]
