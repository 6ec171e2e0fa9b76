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

import pytest

import journal as J
import jobs
from conftest import BUILD, fake_driver_env

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
        rec = os.path.join(lockdir, "job", "%d-J.lease" % os.geteuid())
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


# ---- Through libgpumutex.so ----------------------------------------------------


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
