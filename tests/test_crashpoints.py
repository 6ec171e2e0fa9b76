"""SIGKILL at each step of the protocol (docs/design.md, "Crash points").

The sanitizer build of lease-holder has crash points: with GM_CRASH_AT set
it kills itself with SIGKILL at that step. After each death the next
claimant must get every device, a waiter must move up, and no two jobs
may ever have used one device at once."""

import os
import signal

import pytest

import journal as J
import jobs
from conftest import BUILD

HOLDER = os.path.join(BUILD, "tests", "lease-holder")
CRASHER = os.path.join(BUILD, "tests", "lease-holder-san")

CLAIM_POINTS = ["job-locked", "counter-locked", "ticket-made",
                "partial-devices", "before-record", "after-record",
                "granted"]


def everything_free(lockdir, journal, devices):
    env = jobs.job_env(lockdir, journal, devices=devices,
                       want=len(devices.split(",")), timeout=0)
    return jobs.start(HOLDER, env).wait() == 0


@pytest.mark.parametrize("point", CLAIM_POINTS)
def test_claimant_killed(built, lockdir, journal, point):
    """A claimant dies at `point` while another job waits behind it, and a
    process of its own job waits for its job lock: both move on."""
    env = jobs.job_env(lockdir, journal, devices="0,1", want=2)
    crash_env = dict(env, GM_CRASH_AT=point, GPUMUTEX_JOB="victim")
    victim = jobs.start(CRASHER, crash_env)
    assert victim.wait() == -signal.SIGKILL, f"did not reach {point}"
    # Nothing it held survives it: everything is free right away.
    assert everything_free(lockdir, journal, "0,1")
    # Its job can claim again, and it is served.
    again = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="victim", GPUMUTEX_TIMEOUT="30"))
    assert again.wait() == 0
    # No ticket is left; a claim killed while it held the counter lock may
    # leave its ticket's temporary name (.tmp.*, which no one reads; its
    # user's later claims remove it after a minute).
    left = os.listdir(os.path.join(lockdir, "queue"))
    assert [f for f in left if not f.startswith(".tmp.")] == ["seq"]


@pytest.mark.parametrize("point,ahead", [("queued", True),
                                         ("head-waiting", False),
                                         ("job-locked", False)])
def test_waiter_killed_while_others_wait(built, lockdir, journal, point,
                                         ahead):
    """Killed while queued behind another waiter, while waiting at the head
    for devices, or while holding its job lock: the waiter behind it is
    served next, in order."""
    env = jobs.job_env(lockdir, journal, devices="0")
    holder = jobs.start(HOLDER, env, ready=True, hold=True)
    assert holder.ready()
    order = [holder]
    if ahead:
        order.append(jobs.start(HOLDER, env, waiting=True))
        assert order[-1].waited()
    victim = jobs.start(CRASHER, dict(env, GM_CRASH_AT=point))
    assert victim.wait() == -signal.SIGKILL
    behind = jobs.start(HOLDER, env, waiting=True)
    assert behind.waited()
    order.append(behind)
    holder.release()
    assert [j.wait() for j in order] == [0] * len(order)
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert [int(e["pid"]) for e in J.grants(ev)] == [j.pid for j in order]


@pytest.mark.parametrize("point", ["join-device-locked", "join-checked"])
def test_joiner_killed(built, lockdir, journal, point):
    """A joiner dies between taking its read lock and the liveness check
    (or just after it): the lease it tried to join is unaffected, ends
    when its real members do, and the next job is served then, not
    before."""
    env = jobs.job_env(lockdir, journal, devices="0,1", want=2,
                       job="lived")
    member = jobs.start(HOLDER, env, ready=True, hold=True)
    assert member.ready()
    joiner = jobs.start(CRASHER, dict(env, GM_CRASH_AT=point))
    assert joiner.wait() == -signal.SIGKILL
    other_env = jobs.job_env(lockdir, journal, devices="0,1", want=2,
                             job="other")
    other = jobs.start(HOLDER, other_env, waiting=True)
    assert other.waited(), "the lease must still be held by its member"
    member.release()
    assert member.wait() == 0
    assert other.wait() == 0
    J.check_exclusive(J.parse(journal))


@pytest.mark.parametrize("point", ["join-device-locked", "join-checked"])
def test_joiner_of_ended_lease_killed(built, lockdir, journal, point):
    """A late process of a finished job dies mid-check: nothing is left
    held, and no other job's lease is joined by mistake."""
    env = jobs.job_env(lockdir, journal, devices="0", job="ended")
    assert jobs.start(HOLDER, env).wait() == 0
    record = jobs.job_file(lockdir, "ended", ".lease")
    with open(record) as f:
        saved = f.read()
    # Job "other" now holds device 0 with a new lease. Its grant removed
    # the dead job's files; put the record back, as it would stay if
    # "other" belonged to another user (who cannot remove it).
    other_env = jobs.job_env(lockdir, journal, devices="0", job="other")
    other = jobs.start(HOLDER, other_env, ready=True, hold=True)
    assert other.ready()
    with open(record, "w") as f:
        f.write(saved)
    late = jobs.start(CRASHER, dict(env, GM_CRASH_AT=point))
    assert late.wait() == -signal.SIGKILL
    # A late process of "ended" that does not crash must wait for "other".
    late2 = jobs.start(HOLDER, env, waiting=True)
    assert late2.waited(), "a late process must not join another job's lease"
    other.release()
    assert other.wait() == 0
    assert late2.wait() == 0
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert not J.by_kind(ev, "join")
