"""Contention tests of the lease core that must keep passing while the
core is right: mixed job sizes, overlapping candidate sets, same-job
arrivals, random SIGKILLs, two users arriving late, forks, orphans and
threads, each checked on the journal (never two jobs on a GPU, ticket
order, one lease per job) and on the lock directory left behind. The
defects' tests are in test_lease_adversarial.py; what both use is
tests/leaseadv.py."""

import os
import random
import signal
import subprocess
import threading

import journal as J
import jobs
from leaseadv import (ADV, BOTH, HOLDER, ROOT, USER_A, USER_C, all_free,
                      check_one_lease_per_job, check_pairwise_order, ls,
                      named)
from leaseadv import adv  # noqa: F401 (a fixture)


# =====================================================================
# Stress: must keep passing while the core is right.
# =====================================================================

SETS = ["0,1", "1,2", "0,2", "2,3"]


@BOTH
def test_overlapping_candidate_sets(adv, lockdir, journal, holder):
    """Jobs on "0,1", "1,2", "0,2", "2,3" (1 or 2 GPUs each) started at
    once, with status readers running meanwhile: all are served, never two
    on a GPU, and grants of jobs whose candidates intersect follow ticket
    order."""
    rng = random.Random(7)
    masks = {}
    for rnd in range(10 if holder == HOLDER else 3):
        js = []
        for i in range(30):
            devs = rng.choice(SETS)
            want = rng.choice([1, 1, 2])
            env = jobs.job_env(lockdir, journal, devices=devs, want=want,
                               job=f"o{rnd}-{i}")
            j = jobs.start(holder, env, ["--ticks", str(rng.randrange(1, 10))])
            masks[j.pid] = set(map(int, devs.split(",")))
            js.append(j)
            if i % 7 == 3 and os.path.isdir(os.path.join(lockdir, "job")):
                st = subprocess.run([ADV, "state", lockdir],
                                    capture_output=True, timeout=60)
                assert st.returncode == 0, st.stderr
        assert [j.wait() for j in js] == [0] * len(js)
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert len(J.grants(ev)) == len(masks)
    check_pairwise_order(ev, masks)
    assert ls(lockdir, "queue") == ["seq"]


def test_multi_gpu_job_is_not_overtaken(built, lockdir, journal):
    """A 2-GPU job on "1,2" queued behind holders of GPU 1 and GPU 2 is
    served before every later job that wants GPU 1 or 2, even though those
    later jobs could be served at once on a free GPU of theirs."""
    hold1 = jobs.start(HOLDER, jobs.job_env(lockdir, journal, devices="1"),
                       ready=True, hold=True)
    assert hold1.ready()
    hold2 = jobs.start(HOLDER, jobs.job_env(lockdir, journal, devices="2"),
                       ready=True, hold=True)
    assert hold2.ready()
    big = jobs.start(HOLDER, jobs.job_env(lockdir, journal, devices="1,2",
                                          want=2), waiting=True)
    assert big.waited()
    later = []
    for devs in ["0,1", "2,3", "1,2", "0,2"]:
        j = jobs.start(HOLDER, jobs.job_env(lockdir, journal, devices=devs),
                       waiting=True)
        assert j.waited(), f"a job on {devs} must queue behind the 2-GPU job"
        later.append(j)
    free = jobs.start(HOLDER, jobs.job_env(lockdir, journal, devices="4"),
                      waiting=True)
    assert not free.waited(), "a job on a GPU nobody queues for never waits"
    hold1.release()
    assert hold1.wait() == 0
    hold2.release()
    assert [j.wait() for j in [hold2, big, free] + later] == [0] * 7
    ev = J.parse(journal)
    J.check_exclusive(ev)
    order = [int(e["pid"]) for e in J.grants(ev)]
    assert order.index(big.pid) < min(order.index(j.pid) for j in later)


@BOTH
def test_kills_during_same_job_arrivals(built, lockdir, journal, holder):
    """Rounds of jobs whose processes arrive together (3 per job) mixed
    with single jobs on overlapping sets, with SIGKILLs at random moments,
    while waiting (job lock or queue) and while holding: never two jobs on
    a GPU, never two live leases of one job, every survivor is served,
    everything is free after each round, and the last grant's cleanup
    leaves no dead job's files and no tickets behind."""
    rng = random.Random(99)
    devices = "0,1,2"
    for rnd in range(20 if holder == HOLDER else 5):
        specs = []
        for k in range(3):
            env = jobs.job_env(lockdir, journal, devices=devices,
                               want=rng.choice([1, 2]), job=f"s{rnd}j{k}")
            specs += [env] * 3
        for k in range(4):
            specs.append(jobs.job_env(lockdir, journal,
                                      devices=rng.choice(SETS[:3]),
                                      want=rng.choice([1, 2]),
                                      job=f"s{rnd}x{k}"))
        victims = set(rng.sample(range(len(specs)), 4))
        how = {i: rng.choice(["early", "waiting", "ready"]) for i in victims}
        procs = []
        for i, env in enumerate(specs):
            procs.append(jobs.start(
                holder, env, ["--ticks", str(rng.randrange(1, 15))],
                waiting=how.get(i) == "waiting", ready=how.get(i) == "ready",
                stderr=subprocess.DEVNULL))
        for i in sorted(victims, key=lambda _: rng.random()):
            v = procs[i]
            if how[i] == "early":
                for _ in range(rng.randrange(0, 3000)):
                    pass
            elif how[i] == "waiting":
                v.waited()
            else:
                v.ready()
            v.proc.send_signal(signal.SIGKILL)
        for i, p in enumerate(procs):
            rc = p.wait()
            if i in victims:
                assert rc in (0, -signal.SIGKILL), rc
            else:
                assert rc == 0, f"round {rnd}: pid {p.pid} exited {rc}"
        assert all_free(lockdir, journal, devices), f"round {rnd}"
        ev = J.parse(journal)
        J.check_exclusive(ev)
        check_one_lease_per_job(ev)
    # Dead tickets and dead jobs' files are removed by every 16th claimant
    # (GM_CLEANUP_EVERY; claims walk past dead tickets by the queue's marks
    # without looking): 16 more claims on every GPU include one, after
    # which no dead ticket is left, and at most the files of the last 16
    # jobs (a FIFO and a record each) remain.
    for _ in range(16):
        assert all_free(lockdir, journal, "0,1,2,3")
    assert named(ls(lockdir, "queue")) == ["seq"]
    # (Less the holder files held.<d>, one per device, not per job, and
    # the event log, bounded by its rotation.)
    left = [n for n in named(ls(lockdir, "job"))
            if not n.startswith(("held.", "events.log"))]
    assert len(left) <= 2 * 16, left


@ROOT
def test_two_users_late_arrivals(built, shared_tmp):
    """Two users, each with a few recurring jobs (fixed candidate sets),
    whose processes arrive staggered: some while their job's lease lives
    (they join), some after it ended while the other user's job holds the
    GPU (their stale record, which the other user's grants cannot clean,
    must not make them join). Never two jobs on a GPU, never two live
    leases of one job, intersecting grants in ticket order."""
    lockdir = os.path.join(shared_tmp, "locks")
    journal = os.path.join(shared_tmp, "journal")
    rng = random.Random(11)
    pool = {}
    for user, tag in ((USER_A, "a"), (USER_C, "c")):
        for k in range(3):
            pool[f"{tag}{k}"] = (user, rng.choice(SETS), rng.choice([1, 2]))
    masks = {}
    for rnd in range(6):
        running = []
        for i in range(18):
            job = rng.choice(sorted(pool))
            user, devs, want = pool[job]
            env = jobs.job_env(lockdir, journal, devices=devs, want=want,
                               job=job)
            j = jobs.start(HOLDER, env, ["--ticks", str(rng.randrange(1, 8))],
                           user=user)
            masks[j.pid] = set(map(int, devs.split(",")))
            running.append(j)
            if rng.random() < 0.5:
                # Let one earlier process finish first: later arrivals of
                # its job then find its lease ended, or still alive.
                done = running.pop(rng.randrange(len(running)))
                assert done.wait() == 0
        assert [j.wait() for j in running] == [0] * len(running)
        ev = J.parse(journal)
        J.check_exclusive(ev)
        check_one_lease_per_job(ev)
        check_pairwise_order(ev, masks)


def test_forks_and_orphans_under_contention(built, lockdir, journal):
    """Orphaned children keeping their parent's lease, forked children
    joining, and plain jobs, on two GPUs, with some fork-join parents
    killed: no overlap, and all non-killed jobs finish."""
    rng = random.Random(5)
    for rnd in range(8):
        procs, orphans, pipes = [], [], []
        for k in range(2):
            r, w = os.pipe()
            env = jobs.job_env(lockdir, journal, devices="0,1",
                               job=f"f{rnd}o{k}")
            orphans.append(jobs.start(HOLDER, env, ["--orphan", str(r)],
                                      pass_fds=[r]))
            os.close(r)
            os.set_inheritable(w, False)
            pipes.append(w)
        forkers = []
        for k in range(3):
            env = jobs.job_env(lockdir, journal, devices="0,1",
                               want=rng.choice([1, 2]), job=f"f{rnd}f{k}")
            forkers.append(jobs.start(HOLDER, env,
                                      ["--ticks", "3", "--fork-join"],
                                      stderr=subprocess.DEVNULL))
        for k in range(4):
            env = jobs.job_env(lockdir, journal, devices="0,1",
                               job=f"f{rnd}p{k}")
            procs.append(jobs.start(HOLDER, env, ["--ticks", "4"]))
        victim = rng.choice(forkers)
        for _ in range(rng.randrange(0, 3000)):
            pass
        victim.proc.kill()
        # An orphan's parent leaves once it holds; its child keeps the
        # lease until the test closes the child's pipe, which it does as
        # soon as that parent is gone (waiting for the parents in a fixed
        # order could deadlock: FCFS without backfilling can put one
        # orphan's parent behind a 2-GPU job that needs the other orphan's
        # GPU).
        def let_go(k):
            codes[k] = orphans[k].wait()
            os.close(pipes[k])
        codes = [None, None]
        ts = [threading.Thread(target=let_go, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert codes == [0, 0]
        for f in forkers:
            rc = f.wait()
            assert rc == 0 or f is victim, rc
        assert [p.wait() for p in procs] == [0] * 4
        assert all_free(lockdir, journal, "0,1")
        J.check_exclusive(J.parse(journal))


def test_threads_of_one_process(adv, lockdir, journal):
    """Threads of one process calling acquire at once (distinct jobs, and
    one job shared by all threads), next to another such process: OFD
    locks exclude threads of one process from each other."""
    env = jobs.job_env(lockdir, journal, devices="0,1", job="thr")
    for rnd in range(5):
        a = subprocess.Popen([ADV, "threads", "8", "0"],
                             env=dict(env, GPUMUTEX_JOB=f"ta{rnd}"))
        b = subprocess.Popen([ADV, "threads", "8", "0"],
                             env=dict(env, GPUMUTEX_JOB=f"tb{rnd}"))
        c = subprocess.Popen([ADV, "threads", "6", "1"],
                             env=dict(env, GPUMUTEX_JOB=f"tc{rnd}"))
        assert [p.wait(timeout=jobs.HANG_GUARD) for p in (a, b, c)] == [0] * 3
    ev = J.parse(journal)
    J.check_exclusive(ev)
    J.check_grant_order(ev)  # one candidate set: a total order
    check_one_lease_per_job(ev)
    assert ls(lockdir, "queue") == ["seq"]


def test_give_up_at_each_stage_leaves_nothing(built, lockdir, journal):
    """GPUMUTEX_TIMEOUT=0 while another process of the job holds the job
    lock, while queued behind a waiter, and at the head with a dead
    predecessor: each gives up at once and leaves no file or ticket."""
    env = jobs.job_env(lockdir, journal, devices="0")
    h = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="H"), ready=True, hold=True)
    assert h.ready()
    base_job = ls(lockdir, "job")
    p1 = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="X"), waiting=True)
    assert p1.waited()  # at the head, holding X's job lock
    p2 = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="X", GPUMUTEX_TIMEOUT="0"),
                    stderr=subprocess.DEVNULL)
    assert p2.wait() == 3
    p3 = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="Y", GPUMUTEX_TIMEOUT="0"),
                    stderr=subprocess.DEVNULL)
    assert p3.wait() == 3
    # p1's job FIFO and the temporary file its record will be written
    # into at the grant (made before waiting, off the hand-off path).
    assert ls(lockdir, "job") == sorted(base_job + ["X", "X.lease.tmp"])
    assert len(ls(lockdir, "queue")) == 3  # seq, p1's ticket and its index
    p1.proc.kill()
    assert p1.wait() == -signal.SIGKILL
    p4 = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="X", GPUMUTEX_TIMEOUT="0"),
                    stderr=subprocess.DEVNULL)
    assert p4.wait() == 3
    assert ls(lockdir, "job") == base_job
    assert ls(lockdir, "queue") == ["seq"]
    assert not [f for f in ls(lockdir, "dev") if f.startswith(".")]
    h.release()
    assert h.wait() == 0
    J.check_exclusive(J.parse(journal))


def test_contended_counts_only_waiters_left_in_line(built, lockdir, journal):
    """gm_lease_contended (idle suspension and gpu-offload give a lease
    back when it says yes) plays the queue: H holds GPU 0 of 0,1. X (GPUs
    0,1, stopped right after taking its ticket) is about to be granted the
    free GPU 1: no. Y (GPU 0 only) waits behind H: yes. Z (both GPUs)
    waits too: yes, alone (Y let go), since GPU 1 cannot serve it."""
    from leaseadv import HOLDER_SAN
    ask_r, to_h = os.pipe()
    from_h, ask_w = os.pipe()
    h = jobs.start(HOLDER, jobs.job_env(lockdir, journal, devices="0,1",
                                        job="h"),
                   ["--ask-fd", str(ask_r), str(ask_w)], ready=True,
                   hold=True, pass_fds=(ask_r, ask_w))
    os.close(ask_r)
    os.close(ask_w)
    assert h.ready()

    def contended():
        os.write(to_h, b"?")
        return os.read(from_h, 1)

    def stopped(devices, want, job):
        env = jobs.job_env(lockdir, journal, devices=devices, want=want,
                           job=job)
        env["GM_STOP_AT"] = "ticketed"
        j = jobs.start(HOLDER_SAN, env)
        _, st = os.waitpid(j.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(st), st
        return j

    import time
    assert contended() == b"0"          # nobody
    t0 = time.monotonic()
    x = stopped("0,1", 1, "x")
    got = contended()
    # X takes GPU 1 (a claim counts again once it has waited a second
    # with free candidates: only a CI machine slower than that sees it)
    assert got == b"0" or time.monotonic() - t0 >= 1, got
    y = stopped("0", 1, "y")
    assert contended() == b"1"          # Y waits for GPU 0
    y.proc.kill()
    y.proc.wait()
    z = stopped("0,1", 2, "z")
    assert contended() == b"1"          # Z wants both
    for j in (x, z):
        os.kill(j.pid, signal.SIGCONT)
    assert x.wait() == 0                # X got GPU 1 (and ends)
    os.close(to_h)
    os.close(from_h)
    h.release()
    assert h.wait() == 0 and z.wait() == 0
    J.check_exclusive(J.parse(journal))
