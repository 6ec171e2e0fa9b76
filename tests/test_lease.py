"""Multi-process tests of the lease core, through tests/lease/lease-holder.

Every check reads what the jobs recorded (the journal), their exit codes
and the lock directory; none takes the core's word for anything."""

import os
import random
import signal
import stat
import subprocess

import pytest

import journal as J
import jobs
from conftest import BUILD

HOLDER = os.path.join(BUILD, "tests", "lease-holder")
HOLDER_SAN = os.path.join(BUILD, "tests", "lease-holder-san")
BOTH = pytest.mark.parametrize("holder", [HOLDER, HOLDER_SAN],
                               ids=["plain", "asan"])


def finish(js):
    codes = [j.wait() for j in js]
    return codes


def live_files(lockdir, sub):
    """The files in a subdirectory; for "job", in our job directory, less
    the holder files (held.<d>: one per device, rewritten at each grant,
    so they do not accumulate; test_holder_files_are_one_per_device) and
    the event log (events.log*, bounded by rotation: tests/test_events.py)."""
    p = jobs.job_dir(lockdir) if sub == "job" else os.path.join(lockdir, sub)
    names = sorted(os.listdir(p)) if os.path.isdir(p) else []
    if sub == "job":
        names = [n for n in names if not n.startswith(("held.", "events.log"))]
    return names


def test_holder_files_are_one_per_device(built, lockdir, journal):
    """Each grant names its job's record in job/<user>/held.<d>, for each
    device it got: one file per device, whatever the number of jobs."""
    for i in range(3):
        env = jobs.job_env(lockdir, journal, devices="0,1", want=2,
                           job=f"j{i}")
        old = os.umask(0o077)  # inherited by the holder
        try:
            h = jobs.start(HOLDER, env, ready=True, hold=True)
        finally:
            os.umask(old)
        assert h.ready()
        d = jobs.job_dir(lockdir)
        links = sorted(n for n in os.listdir(d) if n.startswith("held."))
        assert links == ["held.0", "held.1"]
        targets = set()
        for n in links:
            # Readable by every user whatever the umask (waiting lines of
            # other users read it).
            assert os.stat(os.path.join(d, n)).st_mode & 0o777 == 0o644
            with open(os.path.join(d, n)) as f:
                targets.add(f.readline().strip())
        assert targets == {f"j{i}.lease"}, targets
        h.release()
        assert h.wait() == 0


# ---- exclusion and order ------------------------------------------------


@BOTH
def test_contention_one_device_each(built, lockdir, journal, holder):
    """40 jobs on 2 devices: all finish, never two on one device, and
    grants follow arrival order."""
    env = jobs.job_env(lockdir, journal, devices="0,1")
    js = [jobs.start(holder, env, ["--ticks", "20"]) for _ in range(40)]
    assert finish(js) == [0] * 40
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert len(J.grants(ev)) == 40
    J.check_grant_order(ev)
    assert len(J.by_kind(ev, "end")) == 40


def test_fcfs_mixed_sizes(built, lockdir, journal):
    """Jobs of 1 and 2 devices queued in a known order behind a blocker
    are served strictly in that order: a 2-device job is served in its
    turn and not overtaken by the 1-device jobs behind it."""
    env = jobs.job_env(lockdir, journal, devices="0,1,2,3")
    blocker = jobs.start(HOLDER, dict(env, GPUMUTEX_NUM_DEVICES="4"),
                         ready=True, hold=True)
    assert blocker.ready()
    wants = [1, 2, 1, 1, 2, 1, 3, 1, 1, 2]
    js = []
    for w in wants:
        j = jobs.start(HOLDER, dict(env, GPUMUTEX_NUM_DEVICES=str(w)),
                       ["--ticks", "10"], waiting=True)
        assert j.waited(), "a job behind the blocker must wait"
        js.append(j)
    blocker.release()
    assert blocker.wait() == 0
    assert finish(js) == [0] * len(wants)
    ev = J.parse(journal)
    J.check_exclusive(ev)
    order = [int(e["pid"]) for e in J.grants(ev)]
    assert order == [blocker.pid] + [j.pid for j in js]
    J.check_grant_order(ev)
    sizes = {int(e["pid"]): len(e["devs"].split(",")) for e in J.grants(ev)}
    assert [sizes[j.pid] for j in js] == wants


def test_disjoint_pools_do_not_block(built, lockdir, journal):
    """A waiter for GPU 0 does not hold up a job that wants only GPU 1."""
    env0 = jobs.job_env(lockdir, journal, devices="0")
    env1 = jobs.job_env(lockdir, journal, devices="1", timeout=60)
    holder0 = jobs.start(HOLDER, env0, ready=True, hold=True)
    assert holder0.ready()
    waiter0 = jobs.start(HOLDER, env0, waiting=True)
    assert waiter0.waited()
    other = jobs.start(HOLDER, env1, waiting=True)
    assert not other.waited(), "a job on a free, disjoint GPU never waits"
    assert other.wait() == 0
    holder0.release()
    assert finish([holder0, waiter0]) == [0, 0]
    J.check_exclusive(J.parse(journal))


@BOTH
def test_scale_256_jobs_8_devices(built, lockdir, journal, holder):
    """256 jobs started at once on 8 devices are all served, in arrival
    order, with no lost waiter (a lost wake-up would hang: the fallback
    re-check timer is off)."""
    n = 256 if holder == HOLDER else 64
    env = jobs.job_env(lockdir, journal, devices="0,1,2,3,4,5,6,7")
    js = [jobs.start(holder, env, ["--ticks", "2"]) for _ in range(n)]
    assert finish(js) == [0] * n
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert len(J.grants(ev)) == n
    J.check_grant_order(ev)
    # Nothing left behind: no ticket, no lease record of a dead job beyond
    # the ones the last jobs had no reason to clean.
    assert live_files(lockdir, "queue") == ["seq"]


# ---- crashes -------------------------------------------------------------


def all_devices_free(lockdir, devices, journal):
    """Every device can be taken at once by a fresh job: nothing is left
    stuck. The job may wait (up to a bound far above any release), not
    fail at once: a task that shares a killed holder's descriptors holds
    its lease until that task exits too, which can be just after the
    holder's own process was reaped. The sanitizer build's holders have
    one: LeakSanitizer's exit-time check runs in a tracer task cloned with
    CLONE_FILES (not a thread: the holder's wait does not wait for it),
    which lives on briefly when the holder is killed during that check
    (seen once in about 15 full runs under load: "could not get 3 of
    GPUs 0,1,2 at once" with GPUMUTEX_TIMEOUT=0). A lease that stays
    stuck still fails here, at the bound."""
    env = jobs.job_env(lockdir, journal, devices=devices,
                       want=len(devices.split(",")), timeout=60)
    j = jobs.start(HOLDER, env)
    return j.wait() == 0


@BOTH
def test_random_sigkill_rounds(built, lockdir, journal, holder):
    """Holders, waiters and joiners killed at random moments never leave a
    device or a queue position stuck, and nothing overlaps."""
    rng = random.Random(1234)
    devices = "0,1,2"
    rounds = 12 if holder == HOLDER else 5
    for rnd in range(rounds):
        procs = []
        for i in range(10):
            k = rng.randrange(6)
            job = f"r{rnd}j{k}"  # some share a job: joiners
            # One want per job: a process that wants more than its job's
            # lease is refused (tests/test_join.py), not served.
            want = 2 if k % 3 == 2 else 1
            env = jobs.job_env(lockdir, journal, devices=devices, want=want,
                               job=job)
            procs.append(jobs.start(holder, env, ["--ticks",
                                                  str(rng.randrange(1, 30))],
                                    stderr=subprocess.DEVNULL))
        victims = rng.sample(procs, 4)
        for v in victims:
            # A random moment: anywhere from before its first system call
            # to while it holds. Randomising, not synchronising.
            os.sched_yield()
            for _ in range(rng.randrange(0, 2000)):
                pass
            v.proc.send_signal(signal.SIGKILL)
        for p in procs:
            rc = p.wait()
            if p in victims:
                assert rc in (0, -signal.SIGKILL, 3, 4), rc
            else:
                # A joiner whose job's lease ends may have to queue again;
                # every survivor is eventually served.
                assert rc == 0, f"round {rnd}: pid {p.pid} exited {rc}"
        assert all_devices_free(lockdir, devices, journal), f"round {rnd}"
        J.check_exclusive(J.parse(journal))


def test_kill_waiter_in_the_middle_of_the_line(built, lockdir, journal):
    """Killing a waiter between two others hands its place on: the one
    behind is served when the one ahead is done."""
    env = jobs.job_env(lockdir, journal, devices="0")
    holder = jobs.start(HOLDER, env, ready=True, hold=True)
    assert holder.ready()
    line = []
    for _ in range(3):  # one after another: a known arrival order
        line.append(jobs.start(HOLDER, env, waiting=True))
        assert line[-1].waited()
    line[1].proc.kill()
    assert line[1].wait() == -signal.SIGKILL
    holder.release()
    assert finish([holder, line[0], line[2]]) == [0, 0, 0]
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert [int(e["pid"]) for e in J.grants(ev)] == [holder.pid, line[0].pid,
                                                     line[2].pid]


def test_kill_holder_hands_over(built, lockdir, journal):
    """A holder killed with SIGKILL frees its devices at once: the next in
    line is granted (no timer involved: re-checks are off)."""
    env = jobs.job_env(lockdir, journal, devices="0,1", want=2)
    holder = jobs.start(HOLDER, env, ready=True, hold=True)
    assert holder.ready()
    nxt = jobs.start(HOLDER, env, waiting=True)
    assert nxt.waited()
    holder.proc.kill()
    assert holder.wait() == -signal.SIGKILL
    assert nxt.wait() == 0
    J.check_exclusive(J.parse(journal))


# ---- jobs: parents and children -------------------------------------------


def test_exec_child_closing_fds_joins(built, lockdir, journal):
    """A parent holding every device starts a child by fork+exec with all
    other descriptors closed; the child joins through GPUMUTEX_JOB at once
    (queueing would deadlock; the timeout turns that into a failure)."""
    env = jobs.job_env(lockdir, journal, devices="0,1", want=2, timeout=30)
    parent = jobs.start(HOLDER, env, ["--spawn", HOLDER, "--ticks", "3"])
    assert parent.wait() == 0
    ev = J.parse(journal)
    joins = J.by_kind(ev, "join")
    assert len(joins) == 1 and joins[0]["devs"] == "0,1"
    assert len(J.grants(ev)) == 1
    assert joins[0]["job"] == J.grants(ev)[0]["job"]


def test_fork_child_joins(built, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0,1", want=2, timeout=30)
    parent = jobs.start(HOLDER, env, ["--fork-join"])
    assert parent.wait() == 0
    ev = J.parse(journal)
    assert len(J.by_kind(ev, "join")) == 1


def test_orphaned_child_keeps_the_lease(built, lockdir, journal):
    """The parent exits while its forked child still holds the lease: an
    outside job keeps waiting until the child exits."""
    env = jobs.job_env(lockdir, journal, devices="0")
    r, w = os.pipe()
    parent = jobs.start(HOLDER, env, ["--orphan", str(r)], ready=True,
                        pass_fds=[r])
    # The child inherits r; the test keeps w and decides when it ends.
    assert parent.ready()
    assert parent.wait() == 0
    os.close(r)
    outsider = jobs.start(HOLDER, env, waiting=True)
    assert outsider.waited(), "the device is still held by the child"
    os.close(w)
    assert outsider.wait() == 0
    ev = J.parse(journal)
    J.check_exclusive(ev)
    child_end = [e for e in J.by_kind(ev, "end")
                 if e["job"] == J.grants(ev)[0]["job"]]
    assert len(child_end) == 1 and int(child_end[0]["pid"]) != parent.pid
    outsider_begin = [e for e in J.by_kind(ev, "begin")
                      if int(e["pid"]) == outsider.pid]
    assert outsider_begin[0].t > child_end[0].t


@pytest.mark.parametrize("contended", [False, True])
def test_two_processes_of_one_job_make_one_lease(built, lockdir, journal,
                                                 contended):
    env = jobs.job_env(lockdir, journal, devices="0,1")
    blocker = None
    if contended:
        blocker = jobs.start(HOLDER, dict(env, GPUMUTEX_NUM_DEVICES="2"),
                             ready=True, hold=True)
        assert blocker.ready()
    for rnd in range(20 if not contended else 5):
        jenv = dict(env, GPUMUTEX_JOB=f"same{rnd}")
        pair = [jobs.start(HOLDER, jenv, ["--ticks", "3"]) for _ in range(2)]
        if contended and rnd == 0:
            blocker.release()
            assert blocker.wait() == 0
        assert finish(pair) == [0, 0]
    ev = J.parse(journal)
    J.check_exclusive(ev)
    for rnd in range(20 if not contended else 5):
        g = [e for e in J.grants(ev) if e["job"] == f"same{rnd}"]
        jn = [e for e in J.by_kind(ev, "join") if e["job"] == f"same{rnd}"]
        # Either both were in one lease, or the first had finished before
        # the second arrived (then the second claims anew, legitimately).
        if len(g) == 1:
            assert len(jn) == 1
        else:
            ends = [e.t for e in J.by_kind(ev, "end")
                    if e["job"] == f"same{rnd}" and e["pid"] == g[0]["pid"]]
            assert len(g) == 2 and max(ends) < g[1].t


# ---- timeout, cleanup, errors ---------------------------------------------


def test_timeout_leaves_nothing(built, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0")
    holder = jobs.start(HOLDER, env, ready=True, hold=True)
    assert holder.ready()
    p = subprocess.run([HOLDER], env=dict(env, GPUMUTEX_TIMEOUT="0.2"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3
    assert "GPUMUTEX_TIMEOUT" in p.stderr
    assert live_files(lockdir, "queue") == ["seq"]
    # Only the holder's job files remain.
    assert len(live_files(lockdir, "job")) == 2
    # The next one still gets in after the holder.
    nxt = jobs.start(HOLDER, env, waiting=True)
    assert nxt.waited()
    holder.release()
    assert finish([holder, nxt]) == [0, 0]


def test_dead_files_are_cleaned(built, lockdir, journal):
    """Finished jobs' files are removed by later jobs of the same user,
    and killed waiters' tickets too: the directory does not grow."""
    env = jobs.job_env(lockdir, journal, devices="0")
    # Every 16th ticket cleans up (src/lease/lease.c, GM_CLEANUP_EVERY):
    # after any number of jobs, at most the files (FIFO and record) of the
    # jobs since the last cleaner remain.
    for i in range(80):
        assert jobs.start(HOLDER, env).wait() == 0
        assert len(live_files(lockdir, "job")) <= 2 * 16, i
    holder = jobs.start(HOLDER, env, ready=True, hold=True)
    assert holder.ready()
    victims = []
    for _ in range(5):
        victims.append(jobs.start(HOLDER, env, waiting=True))
        assert victims[-1].waited()
    for v in victims:
        v.proc.kill()
        v.wait()
    # Some dead tickets are left (waiters behind a killed one remove the
    # ones they find dead, so how many depends on timing).
    assert len(live_files(lockdir, "queue")) >= 2
    after = jobs.start(HOLDER, env, waiting=True)
    assert after.waited()
    holder.release()
    assert finish([holder, after]) == [0, 0]
    assert live_files(lockdir, "queue") == ["seq"]


def test_lockdir_permissions(built, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0,1")
    assert jobs.start(HOLDER, env).wait() == 0
    for sub in ("", "dev", "queue", "job"):
        st = os.stat(os.path.join(lockdir, sub))
        assert stat.S_IMODE(st.st_mode) == 0o1777, sub
    for d in ("0", "1"):
        st = os.lstat(os.path.join(lockdir, "dev", d))
        assert stat.S_ISFIFO(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o666




@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
def test_other_users_cannot_steal_or_delete(built, shared_tmp):
    """User A holds a lease; user B can neither delete A's files nor take
    A's device, waits in line, and is served after A."""
    lockdir = os.path.join(shared_tmp, "locks")
    journal = os.path.join(shared_tmp, "journal")
    open(journal, "w").close()
    os.chmod(journal, 0o666)
    env = jobs.job_env(lockdir, journal, devices="0")
    a = jobs.start(HOLDER, env, ready=True, hold=True, user=4001)
    assert a.ready()
    b = subprocess.run([jobs.for_user(HOLDER, 4002)],
                       env=dict(env, GPUMUTEX_TIMEOUT="0"),
                       preexec_fn=jobs.as_user(4002), capture_output=True,
                       text=True, timeout=60)
    assert b.returncode == 3, b.stderr
    # B cannot delete A's files, nor the device file A created.
    # (Only its event log, which records the give-up.)
    assert [n for n in os.listdir(jobs.job_dir(lockdir, 4002))
            if n != "events.log"] == [], \
        "B's attempt that gave up left files behind"
    adir = jobs.job_dir(lockdir, 4001)
    files = [os.path.join(adir, f) for f in os.listdir(adir)]
    files += [adir, os.path.join(lockdir, "dev", "0"),
              os.path.join(lockdir, "queue", "seq")]
    assert len(files) >= 5
    for f in files:
        subprocess.run(["rm", "-rf", f], preexec_fn=jobs.as_user(4002),
                       capture_output=True)
        assert os.path.lexists(f), f"user B deleted {f}"
    bwait = jobs.start(HOLDER, env, waiting=True, user=4002)
    assert bwait.waited()
    a.release()
    assert finish([a, bwait]) == [0, 0]
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert [int(e["pid"]) for e in J.grants(ev)] == [a.pid, bwait.pid]


def test_timeout_zero_never_reports_waiting(built, lockdir, journal):
    """With GPUMUTEX_TIMEOUT=0 the on_wait hook is not called, whether the
    device is held by another job or the job lock by a process of the same
    job: no ev=wait in the journal, exit 3 (timed out), and the message
    says it did not wait."""
    env = jobs.job_env(lockdir, journal, devices="0", job="H")
    h = jobs.start(HOLDER, env, ready=True, hold=True)
    assert h.ready()
    same = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="X"), waiting=True)
    assert same.waited()  # at the head, holding X's job lock
    for job in ("Y", "X"):
        p = subprocess.run([HOLDER], env=dict(env, GPUMUTEX_JOB=job,
                                              GPUMUTEX_TIMEOUT="0"),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 3, p.stderr
        assert "GPUMUTEX_TIMEOUT=0 says not to wait" in p.stderr, p.stderr
        assert not [e for e in J.parse(journal)
                    if e["ev"] == "wait" and e["job"] == job and
                    int(e["pid"]) != same.pid], job
    h.release()
    assert h.wait() == 0
    assert same.wait() == 0
