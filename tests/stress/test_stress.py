"""The slow tests (`make stress`; marked `stress`, skipped by `make check`).

- Crash-point sweeps over every C library call a claim makes (the shim,
  tests/stress/crashshim.c), in several situations: a lock directory that
  does not exist yet, one used before, a claim that waits behind another
  user's job, a claim that joins its job's lease, a damaged counter, and
  a user whose job directory name another user took. After each death,
  other users, root and the dead claim's own job are served at once.
- Many users at once, with SIGKILLs at random moments and a user planting
  files under the protocol's names meanwhile.
"""

import os
import random
import signal
import subprocess

import pytest

import journal as J
import jobs
import test_crash_sweep as S
from leaseadv import check_one_lease_per_job
from test_planted import as_user, plant, ticket_name

pytestmark = [pytest.mark.stress, S.ROOT]


def spoiled(lockdir, journal):
    """Used before, then another user wrote garbage into the counter."""
    S.prepared(lockdir, journal)

    def spoil():
        with open(os.path.join(lockdir, "queue", "seq"), "w") as f:
            f.write("not a number\n")
    as_user(S.USER_B, spoil)


def squatted(lockdir, journal):
    """Used before; another user took the victim's job directory name and
    planted things named like tickets."""
    S.prepared(lockdir, journal)
    plant(os.path.join(lockdir, "job", str(S.USER_A)), "dir755")
    plant(os.path.join(lockdir, "queue", ticket_name(1, S.USER_B)), "fifo600")
    plant(os.path.join(lockdir, "queue", ticket_name(2, S.USER_A)), "symlink")


@pytest.mark.parametrize("prepare", [S.fresh, S.prepared, spoiled, squatted],
                         ids=["fresh", "prepared", "spoiled", "squatted"])
def test_kill_before_every_call(built, shared, prepare):
    n = S.sweep(shared, prepare, S.EVERY)
    assert n >= 20


def victim(lockdir, journal, n, job="victim", want=1, **kw):
    env = jobs.job_env(lockdir, journal, devices="0,1", want=want, job=job)
    env.update(LD_PRELOAD=jobs.for_user(S.SHIM, S.USER_A),
               GM_SHIM_KILL_AT=str(n), GM_SHIM_REPORT="2")
    return jobs.start(S.HOLDER, env, user=S.USER_A, stderr=subprocess.PIPE,
                      **kw)


@pytest.mark.parametrize("held,want", [("0,1", 1), ("1", 2)],
                         ids=["queued", "at-head"])
def test_kill_waiter_before_every_call(built, shared, held, want):
    """The victim waits for another user's job, which holds both GPUs (the
    victim queues behind its ticket, then gets one) or GPU 1 (the victim,
    wanting both, is at the head and waits for devices, never keeping
    GPU 0 meanwhile). The holder lets go once the victim waits, or died."""
    journal = os.path.join(shared, "journal")
    for n in range(1, 2000):
        lockdir = os.path.join(shared, f"locks{n}")
        S.prepared(lockdir, journal)
        env = jobs.job_env(lockdir, journal, devices=held,
                           want=len(held.split(",")), job="h")
        holder = jobs.start(S.HOLDER, env, user=S.USER_C, ready=True,
                            hold=True)
        assert holder.ready()
        v = victim(lockdir, journal, n, want=want, waiting=True)
        waited = v.waited()
        holder.release()
        assert holder.wait() == 0
        rc = v.wait()
        report = v.proc.stderr.read().decode()
        if rc == 0:
            assert waited
            assert n > 20
            J.check_exclusive(J.parse(journal))
            return
        assert rc == -signal.SIGKILL, (n, rc, report)
        S.probe_all(lockdir, journal, "0,1", "victim",
                    f"killed while queued, before call {report.strip()}")
    raise AssertionError("the waiting claim never completed")


def test_kill_joiner_before_every_call(built, shared):
    """The victim joins its job's live lease; after its death another
    process of the job still joins, and the lease ends with its member."""
    journal = os.path.join(shared, "journal")
    for n in range(1, 2000):
        lockdir = os.path.join(shared, f"locks{n}")
        S.prepared(lockdir, journal)
        env = jobs.job_env(lockdir, journal, devices="0,1", want=1,
                           job="victim")
        member = jobs.start(S.HOLDER, env, user=S.USER_A, ready=True,
                            hold=True)
        assert member.ready()
        v = victim(lockdir, journal, n)
        rc = v.wait()
        report = v.proc.stderr.read().decode()
        if rc != 0:
            assert rc == -signal.SIGKILL, (n, rc, report)
            r = S.claim(env, S.USER_A, timeout=0)
            assert r.returncode == 0, (
                f"killed while joining, before call {report.strip()}: "
                f"the job's next process failed: {r.stderr}")
        member.release()
        assert member.wait() == 0
        ev = J.parse(journal)
        J.check_exclusive(ev)
        if rc == 0:
            assert v.pid in [int(e["pid"]) for e in J.by_kind(ev, "join")]
            assert n > 10
            return
        S.probe_all(lockdir, journal, "0,1", "victim",
                    f"killed while joining, before call {report.strip()}")
    raise AssertionError("the joining claim never completed")


SETS = ["0,1", "1,2", "0,2", "2"]


def test_many_users_kills_and_plants(built, shared):
    """Rounds of jobs of four users (some jobs with several processes) on
    overlapping GPU sets, SIGKILLs at random moments, while a fifth user
    plants files under ticket names, job directory names and old record
    names, and spoils the counter. Every process not killed is served;
    never two jobs on a GPU, never two leases of one job at once."""
    rng = random.Random(21)
    lockdir = os.path.join(shared, "locks")
    journal = os.path.join(shared, "journal")
    users = [4211, 4212, 4213, 4215]
    planter = 4214
    for rnd in range(60):
        # The users not yet seen here find their job directory taken.
        for u in users[rnd // 2:rnd // 2 + 1]:
            if not os.path.exists(os.path.join(lockdir, "job", str(u))):
                os.makedirs(os.path.join(lockdir, "job"), exist_ok=True)
                os.chmod(lockdir, 0o1777)
                os.chmod(os.path.join(lockdir, "job"), 0o1777)
                plant(os.path.join(lockdir, "job", str(u)),
                      rng.choice(["dir755", "fifo600", "symlink"]),
                      uid=planter)
        procs, victims, spec = [], set(), {}
        for i in range(20):
            user = rng.choice(users)
            job = f"r{rnd}j{rng.randrange(6)}u{user}"
            # A job's processes share its settings (a lease cannot grow
            # or move for a process that asks for other GPUs).
            devs = rng.choice(SETS)
            devs, want = spec.setdefault(
                job, (devs, rng.choice([1, 2]) if "," in devs else 1))
            env = jobs.job_env(lockdir, journal, devices=devs, want=want,
                               job=job)
            kill = rng.random() < 0.25
            p = jobs.start(S.HOLDER, env, ["--ticks", str(rng.randrange(1, 8))],
                           user=user, waiting=kill and rng.random() < 0.5,
                           stderr=subprocess.PIPE)
            procs.append(p)
            if kill:
                victims.add(i)
            if i % 5 == 2 and os.path.isdir(os.path.join(lockdir, "queue")):
                name = ticket_name(rng.randrange(1, 50), rng.choice(users))
                path = os.path.join(lockdir, "queue", name)
                if not os.path.lexists(path):
                    plant(path, rng.choice(["fifo600", "symlink", "file644",
                                            "dir700"]), uid=planter)
            if i == 10 and os.path.exists(os.path.join(lockdir, "queue",
                                                       "seq")):
                def spoil():
                    with open(os.path.join(lockdir, "queue", "seq"),
                              "w") as f:
                        f.write("x")
                as_user(planter, spoil)
        for i in sorted(victims, key=lambda _: rng.random()):
            p = procs[i]
            if p._waiting_r is not None:
                p.waited()
            p.proc.send_signal(signal.SIGKILL)
        for i, p in enumerate(procs):
            rc = p.wait()
            err = p.proc.stderr.read().decode()
            if i in victims:
                assert rc in (0, -signal.SIGKILL), (rc, err)
            else:
                assert rc == 0, f"round {rnd}: pid {p.pid} exited {rc}: {err}"
        ev = J.parse(journal)
        J.check_exclusive(ev)
        check_one_lease_per_job(ev)
