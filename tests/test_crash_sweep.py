"""Crash-point sweeps from inside the library (tests/stress/crashshim.c).

The shim counts a claim's calls to the C library and SIGKILLs it just
before the Nth one. A sweep kills a claim of user A before call 1, 2, ...
until the claim completes, and after each death checks that nothing the
dead claim left behind hurts anyone: another user, root and A itself each
claim every GPU at once (GPUMUTEX_TIMEOUT=0: a leftover that blocks shows
up as a failure, not a hang), and the journal never shows two jobs on one
GPU.

The fast sweeps here count only the calls that change the lock directory
(make, chmod, link, rename, unlink, write); the sweeps over every call,
with a waiter and a joiner too, are in tests/stress (`make stress`).
"""

import os
import shutil
import signal
import subprocess

import pytest

import journal as J
import jobs
from conftest import BUILD

HOLDER = os.path.join(BUILD, "tests", "lease-holder")
SHIM = os.path.join(BUILD, "tests", "crashshim.so")
ROOT = pytest.mark.skipif(os.geteuid() != 0,
                          reason="needs root to play several users")
USER_A, USER_B, USER_C, USER_D = 4201, 4202, 4203, 4204
MUTATING = ("mkdir,mkdirat,mkfifoat,mknodat,fchmod,fchown,linkat,renameat,"
            "unlinkat,symlinkat,ftruncate,write,pwrite")
EVERY = None  # count every call the shim knows




def claim(env, user, kill_at=None, funcs=EVERY, args=(), timeout=None):
    """Run one lease-holder as `user` (None: this user); with kill_at, under
    the shim. Returns the CompletedProcess (stderr as text)."""
    e = dict(env)
    if timeout is not None:
        e["GPUMUTEX_TIMEOUT"] = str(timeout)
    if kill_at is not None:
        e.update(LD_PRELOAD=jobs.for_user(SHIM, user),
                 GM_SHIM_KILL_AT=str(kill_at), GM_SHIM_REPORT="2")
        if funcs:
            e["GM_SHIM_FUNCS"] = funcs
    return subprocess.run([jobs.for_user(HOLDER, user)] + list(args), env=e,
                          preexec_fn=jobs.as_user(user) if user else None,
                          capture_output=True, text=True,
                          timeout=jobs.HANG_GUARD)


def where(r):
    """The call the shim killed the claim before, from its report."""
    lines = [ln for ln in r.stderr.splitlines() if ln[:1].isdigit()]
    return lines[-1] if lines else "?"


def probe_all(lockdir, journal, devices, victim_job, context):
    """Every kind of survivor gets every GPU at once: other users (two of
    them: the first may take the dead claim's ticket number again, if the
    counter had not moved on), root, and the dead claim's job."""
    want = len(devices.split(","))
    for user, job in ((USER_B, "probe-b"), (None, "probe-root"),
                      (USER_D, "probe-d"), (USER_A, victim_job)):
        env = jobs.job_env(lockdir, journal, devices=devices, want=want,
                           job=job)
        r = claim(env, user, timeout=0)
        assert r.returncode == 0, (
            f"{context}: a claim of {'root' if user is None else user} "
            f"(job {job}) failed: {r.stderr.strip()}")


def sweep(shared, prepare, funcs, devices="0,1", limit=2000):
    """Kill a claim of user A before its 1st, 2nd, ... counted call, each
    time in a lock directory made fresh by prepare(lockdir, journal), and
    probe after each death. Returns the number of calls of a whole claim."""
    journal = os.path.join(shared, "journal")
    for n in range(1, limit):
        lockdir = os.path.join(shared, f"locks{n}")
        prepare(lockdir, journal)
        env = jobs.job_env(lockdir, journal, devices=devices, want=1,
                           job="victim")
        r = claim(env, USER_A, kill_at=n, funcs=funcs)
        if r.returncode == 0:
            J.check_exclusive(J.parse(journal))
            shutil.rmtree(lockdir, ignore_errors=True)
            return n - 1
        assert r.returncode == -signal.SIGKILL, (n, r.returncode, r.stderr)
        probe_all(lockdir, journal, devices, "victim",
                  f"killed before call {where(r)} of a claim")
        shutil.rmtree(lockdir, ignore_errors=True)
    raise AssertionError(f"the claim did not complete in {limit} calls")


def fresh(lockdir, journal):
    """Nothing there yet: the claim makes the lock directory."""


def prepared(lockdir, journal):
    """Another user (C) used the directory before."""
    env = jobs.job_env(lockdir, journal, devices="0,1", job="c")
    assert claim(env, USER_C).returncode == 0


@ROOT
@pytest.mark.parametrize("prepare", [fresh, prepared],
                         ids=["fresh", "prepared"])
def test_kill_before_each_change(built, shared, prepare):
    """SIGKILL before each call that changes the lock directory (made by
    this claim, or by another user before): no leftover denies another
    user, root or the same job (a lock directory or subdirectory left
    0700, a ticket left 0600, ...)."""
    n = sweep(shared, prepare, MUTATING)
    assert n >= 5, "the shim saw too few calls: is it loaded?"
