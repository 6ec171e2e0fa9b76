"""Adversarial and stress tests of the lease core.

Two kinds of test live here:

- "bug" tests: each demonstrates one concrete defect with a fixed
  interleaving (set up with the pipes of tests/lib/jobs.py, files and
  locks, never sleeps). They fail until the core is fixed, so they carry
  a strict xfail marker (`bug`); GM_SHOW_BUGS=1 runs them as plain tests.
  Each docstring names the interleaving.
- stress tests: mixed job sizes, overlapping candidate sets, same-job
  arrivals, random SIGKILLs, forks, orphans and threads. They must keep
  passing while the core is right.

Helpers that lease-holder cannot play (locking a byte of a device file as
another user, reading the state, running near the descriptor limit,
threads) are in tests/lease/adversary.c, built by the Makefile's generic
rule (`make build/tests/adversary`).
"""

import collections
import os
import random
import signal
import subprocess
import threading

import pytest

import journal as J
import jobs
from conftest import BUILD, REPO

HOLDER = os.path.join(BUILD, "tests", "lease-holder")
HOLDER_SAN = os.path.join(BUILD, "tests", "lease-holder-san")
BOTH = pytest.mark.parametrize("holder", [HOLDER, HOLDER_SAN],
                               ids=["plain", "asan"])
ADV = os.path.join(BUILD, "tests", "adversary")


def bug(reason):
    """A test that demonstrates a known defect of the core: expected to
    fail (strictly: once the core is fixed it passes, and the marker must
    go). GM_SHOW_BUGS=1 runs them as plain tests, to see the failures."""
    return pytest.mark.xfail(os.environ.get("GM_SHOW_BUGS") != "1",
                             strict=True, raises=AssertionError,
                             reason="bug: " + reason)


ROOT = pytest.mark.skipif(os.geteuid() != 0,
                          reason="needs root to play several users")
USER_A, USER_C, USER_B = 4101, 4102, 4103  # victim, bystander, attacker


@pytest.fixture(scope="module")
def adv(built):
    subprocess.run(["make", "-C", REPO, "-s", "build/tests/adversary"],
                   check=True)
    return ADV




def ls(lockdir, sub):
    """The files in a subdirectory; for "job", in our job directory."""
    p = jobs.job_dir(lockdir) if sub == "job" else os.path.join(lockdir, sub)
    return sorted(os.listdir(p)) if os.path.isdir(p) else []


def named(files):
    """Without the temporary names (.tmp.*) that a claim killed while it
    held the counter lock leaves (harmless; its user removes them later)."""
    return [f for f in files if not f.startswith(".tmp.")]


class Held:
    """adversary lock: a one-byte OFD lock held until release()."""

    def __init__(self, path, offset, kind="rd", user=None):
        ready_r, ready_w = os.pipe()
        wait_r, self._wait_w = os.pipe()
        self.proc = subprocess.Popen(
            [jobs.for_user(ADV, user), "lock", path, str(offset), kind,
             str(ready_w), str(wait_r)],
            pass_fds=[ready_w, wait_r],
            preexec_fn=jobs.as_user(user) if user else None)
        os.close(ready_w)
        os.close(wait_r)
        os.set_inheritable(self._wait_w, False)
        with os.fdopen(ready_r, "rb", buffering=0) as f:
            self.ok = f.read(1) == b"r"

    def release(self):
        if self._wait_w is not None:
            os.close(self._wait_w)
            self._wait_w = None
        return self.proc.wait(timeout=jobs.HANG_GUARD)


def record_lease(lockdir, uid, job):
    with open(jobs.job_file(lockdir, job, ".lease", uid=uid)) as f:
        for line in f:
            if line.startswith("lease="):
                return int(line.split("=", 1)[1], 16)
    raise AssertionError("record has no lease= line")


def run_as(user, argv):
    subprocess.run([jobs.for_user(argv[0], user)] + list(argv[1:]),
                   preexec_fn=jobs.as_user(user), check=True)


def check_pairwise_order(events, masks):
    """Grants of jobs whose candidate sets intersect follow ticket order.
    `masks` maps pid -> set of candidate devices. Journal order of grant
    lines is the order of the grants (each is written before the granted
    job releases its ticket, which is what a younger conflicting waiter
    waits for)."""
    g = [(int(e["pid"]), int(e["seq"])) for e in J.grants(events)]
    for i in range(len(g)):
        for k in range(i + 1, len(g)):
            (p1, s1), (p2, s2) = g[i], g[k]
            if masks[p1] & masks[p2] and s1 > s2:
                raise AssertionError(
                    f"pid {p2} (ticket {s2}, {sorted(masks[p2])}) was granted "
                    f"after the younger pid {p1} (ticket {s1}, "
                    f"{sorted(masks[p1])}) "
                    "although their candidates intersect")


def check_one_lease_per_job(events):
    """Two leases of one job never live at the same time: a process of a
    job whose lease is alive joins it instead of claiming a second one."""
    spans = collections.defaultdict(lambda: [None, None])
    for e in events:
        if e["ev"] in ("begin", "tick", "end"):
            s = spans[(e["job"], e["lease"])]
            s[0] = e.t if s[0] is None else min(s[0], e.t)
            s[1] = e.t if s[1] is None else max(s[1], e.t)
    byjob = collections.defaultdict(list)
    for (job, lease), (a, b) in spans.items():
        byjob[job].append((a, b, lease))
    for job, ss in byjob.items():
        ss.sort()
        for x, y in zip(ss, ss[1:]):
            if y[0] <= x[1]:
                raise AssertionError(
                    f"job {job}: leases {x[2]} and {y[2]} were alive at once")


def all_free(lockdir, journal, devices):
    env = jobs.job_env(lockdir, journal, devices=devices,
                       want=len(devices.split(",")), timeout=0)
    return jobs.start(HOLDER, env, stderr=subprocess.DEVNULL).wait() == 0


# =====================================================================
# Bugs. Each of these is expected to fail until the core is fixed.
# =====================================================================


@ROOT
@pytest.mark.parametrize("variant", [
    pytest.param("name-byte", marks=pytest.mark.xfail(
        os.environ.get("GM_SHOW_BUGS") != "1", strict=True,
        raises=AssertionError,
        reason="known limitation (docs/design.md, Users and permissions): "
               "a lease's name byte can be read-locked by any user")),
    "counter-rewind", "counter-wrap", "planted-record"])
def test_other_user_breaks_exclusion_of_two_honest_jobs(adv, shared_tmp,
                                                        variant):
    """User B (attacker, owns nothing in the lock directory) makes a late
    process of user A's job "train" join the lease of user C on GPU 0: two
    honest jobs on one device.

    The join check trusts "someone holds byte 1+L of dev/0" to mean "a
    member of lease L holds GPU 0", and trusts L to be unique. Neither
    holds against another local user:
      name-byte      dev/<i> is 0666 (even when root made it): B read-locks
                     byte 1+L of A's ended lease L (stale record).
      counter-rewind queue/seq is 0666: B writes L into it, so C's next
                     lease gets id L, the id in A's stale record.
      counter-wrap   B writes ffffffffffffffff: were lease ids ticket
                     numbers, A's lease would get that id, and 1+L would
                     wrap to byte 0 (the device byte), which every holder
                     of GPU 0 holds: A's later processes would join
                     anyone's lease on GPU 0.
      planted-record B plants A's record (in a directory job/<A> of
                     his, and under the older flat name job/<A>-train.lease)
                     naming a lease L' of his choice and read-locks byte
                     1+L'.
    Interleaving: [A: train runs and exits] -> [B: one of the above] ->
    [C: takes GPU 0, holds] -> [A: train again, GPUMUTEX_TIMEOUT=0].
    Expected: A is refused (GPU 0 is C's). The core now defends the
    counter and record variants (random lease ids, a range check on ids,
    a damaged counter renumbered from the live tickets, records must be
    regular files of the job's own user, in its own directory); name-byte
    remains a documented limitation: only a user who could use the GPU
    without gpumutex anyway can mount it."""
    lockdir = os.path.join(shared_tmp, "locks")
    journal = os.path.join(shared_tmp, "journal")
    env = jobs.job_env(lockdir, journal, devices="0")
    seq = os.path.join(lockdir, "queue", "seq")
    # Someone (C) uses the directory first, so it and queue/seq exist.
    assert jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="init"),
                      user=USER_C).wait() == 0
    held = None
    if variant == "counter-wrap":
        run_as(USER_B, ["/bin/sh", "-c", f"echo ffffffffffffffff > {seq}"])
    if variant != "planted-record":
        assert jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="train"),
                          user=USER_A).wait() == 0
        lease = record_lease(lockdir, USER_A, "train")
    if variant == "counter-wrap":
        # The damaged counter was renumbered from the live tickets (there
        # were none); lease ids never came from it.
        with open(seq) as f:  # then the queue's marks, on line 2
            assert f.readline() == f"{2:016x}\n"
        assert lease != 0xffffffffffffffff
    if variant == "name-byte":
        held = Held(os.path.join(lockdir, "dev", "0"), 1 + lease,
                    user=USER_B)
        assert held.ok
    elif variant == "counter-rewind":
        # Rewind the counter so that C's ticket repeats an old number.
        # Lease ids are random, not ticket numbers, so no id repeats.
        run_as(USER_B, ["/bin/sh", "-c", f"printf '%016x\\n' 1 > {seq}"])
    elif variant == "planted-record":
        lease = 0x5eed
        # Where A's record would be: in job/<A> (B makes that directory
        # before A's first job) and under the older flat name.
        udir = os.path.join(lockdir, "job", str(USER_A))
        for rec in (os.path.join(udir, "train.lease"),
                    os.path.join(lockdir, "job", f"{USER_A}-train.lease")):
            run_as(USER_B, ["/bin/sh", "-c",
                            f"mkdir -p {udir} && "
                            f"printf 'gpumutex-lease 1\\nlease={lease:x}\\n"
                            f"job=train\\nuid={USER_A}\\ndevices=0\\n' > {rec}"])
        held = Held(os.path.join(lockdir, "dev", "0"), 1 + lease,
                    user=USER_B)
        assert held.ok
    c = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="cjob"), ready=True,
                   hold=True, user=USER_C)
    assert c.ready()
    late = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="train",
                                   GPUMUTEX_TIMEOUT="0"),
                      user=USER_A, stderr=subprocess.DEVNULL)
    rc = late.wait()
    c.release()
    assert c.wait() == 0
    if held:
        held.release()
    ev = J.parse(journal)
    joins = [e for e in J.by_kind(ev, "join") if int(e["pid"]) == late.pid]
    assert rc != 0 and not joins, (
        f"A's late process joined C's lease on GPU 0 ({variant}): "
        "two jobs on one device")
    J.check_exclusive(ev)


@pytest.mark.parametrize("who", ["status", "acquire", "cleanup"])
def test_fifo_named_like_a_record_is_opened_blocking(adv, lockdir, journal,
                                                     who):
    """Lease records are opened with a plain blocking open(2) and read
    without checking the file type (state.c read_leases, lease.c
    record_read and record_add_member, records.c read_small). job/ is 1777:
    any user can make a FIFO called `<anything>.lease` (status, and the
    preload's on_wait message, which calls gm_state_read), `<uid>-<job>.lease`
    for a job name not yet used (acquire), or `<uid>-<x>` plus
    `<uid>-<x>.lease` (the post-grant cleanup of every process of that
    user). With no writer on the FIFO, open() blocks forever, inside
    cuInit, ignoring GPUMUTEX_TIMEOUT.

    To show it without a hang, the test keeps a writer open and puts bytes
    in the FIFO: the code under test then reads them. Expected: the FIFO is
    left alone (opened O_NONBLOCK and skipped as not a regular file).
    Actual: its bytes are consumed, i.e. the FIFO was opened and read as a
    record; without our writer that open would never have returned.

    (Job files now live in each user's own directory, job/<uid>/, which
    only that user can write to; the FIFOs are planted there by the user
    itself, and in job/ itself, where status still reads the records of
    the older flat layout.)"""
    env = jobs.job_env(lockdir, journal, devices="0")
    assert jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="init")).wait() == 0
    jobdir = jobs.job_dir(lockdir)
    name = {"status": "../9999-x.lease", "acquire": "victim.lease",
            "cleanup": "zzz.lease"}[who]
    path = os.path.join(jobdir, name)
    os.mkfifo(path, 0o666)
    if who == "cleanup":
        os.mkfifo(os.path.join(jobdir, "zzz"), 0o600)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    data = b"gpumutex-lease 1\nlease=7\njob=x\nuid=9999\ndevices=0\n"
    os.write(fd, data)
    try:
        if who == "status":
            p = subprocess.run([ADV, "state", lockdir], capture_output=True,
                               timeout=jobs.HANG_GUARD)
            assert p.returncode == 0
        else:
            job = "victim" if who == "acquire" else "other"
            j = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB=job),
                           stderr=subprocess.DEVNULL)
            j.wait()
        try:
            left = os.read(fd, 4096)
        except BlockingIOError:
            left = b""
        assert left == data, (
            f"{who}: a FIFO named {name} was opened blocking and read as a "
            "lease record; with no writer it hangs the caller forever")
    finally:
        os.close(fd)


def test_join_error_destroys_the_live_lease_record(adv, lockdir, journal):
    """A process of job X that fails *with an error* (here EMFILE: a host
    program near its descriptor limit) while holding X's job lock takes the
    give-up path of gm_lease_acquire, which unlinks X's record and job FIFO
    ("we hold the job lock and found no live lease") although X's lease is
    alive: join() returned an error, not "dead". X's later processes then
    find no record, claim a second lease and queue behind their own job
    (a parent waiting for a child that waits for the parent hangs).
    Interleaving: [M: X holds GPUs 0,1] -> [V: X, at its fd limit, errors in
    join/claim] -> [P: X, GPUMUTEX_TIMEOUT=0]. Expected: P joins.
    Actual: P finds no record and times out."""
    env = jobs.job_env(lockdir, journal, devices="0,1", want=2, job="X")
    m = jobs.start(HOLDER, env, ready=True, hold=True)
    assert m.ready()
    bad = []
    for extra in range(3, 10):
        v = subprocess.run([ADV, "joinlimit", str(extra)],
                           env=dict(env, GPUMUTEX_TIMEOUT="0"),
                           capture_output=True, text=True, timeout=60)
        p = jobs.start(HOLDER, dict(env, GPUMUTEX_TIMEOUT="0"),
                       stderr=subprocess.DEVNULL)
        if p.wait() != 0:
            bad.append((extra, v.returncode, v.stderr.strip()))
            break
    m.release()
    assert m.wait() == 0
    assert not bad, ("after a same-job process failed with an error, the "
                     f"live lease of job X could no longer be joined: {bad}")


def test_cleanup_error_destroys_a_live_lease_record(adv, lockdir, journal):
    """gm__cleanup_jobs (run by every process after its grant) removes
    another job's files when it cannot *read* that job's record, or (in
    gm__lease_alive) when it cannot open a device file: any error counts as
    "dead". Here the granted process is at its descriptor limit (EMFILE).
    Interleaving: [M: job X holds GPU 0] -> [G: job Y is granted GPU 1,
    cleanup hits EMFILE on X's record and unlinks it] -> [P: job X,
    GPUMUTEX_TIMEOUT=0]. Expected: P joins X's live lease. Actual: P finds
    no record, claims, and times out behind its own job."""
    env = jobs.job_env(lockdir, journal, devices="0", job="X")
    m = jobs.start(HOLDER, env, ready=True, hold=True)
    assert m.ready()
    g = subprocess.run([ADV, "grantlimit"],
                       env=jobs.job_env(lockdir, journal, devices="1",
                                        job="Y"),
                       capture_output=True, text=True, timeout=60)
    assert g.returncode == 0, g.stderr
    p = jobs.start(HOLDER, dict(env, GPUMUTEX_TIMEOUT="0"),
                   stderr=subprocess.DEVNULL)
    rc = p.wait()
    m.release()
    assert m.wait() == 0
    assert rc == 0, ("a live lease's record was removed by another job's "
                     "cleanup that could not read it")


def test_record_grows_with_every_join(built, lockdir, journal):
    """Every joiner appends `member=<pid>` to the record and nothing ever
    removes dead members, so one long-lived lease whose job starts many
    short processes (a driver that runs `python step.py` in a loop) grows
    its record without bound, and status (which reads 2 KiB) stops seeing
    the live ones. Expected: the record stays small. Actual: +14 bytes per
    process ever joined."""
    env = jobs.job_env(lockdir, journal, devices="0", job="X")
    m = jobs.start(HOLDER, env, ready=True, hold=True)
    assert m.ready()
    for _ in range(250):
        assert jobs.start(HOLDER, env).wait() == 0
    size = os.path.getsize(jobs.job_file(lockdir, "X", ".lease"))
    m.release()
    assert m.wait() == 0
    assert size < 2048, f"record of one lease is {size} bytes"


def test_counter_lock_ignores_timeout(adv, lockdir, journal):
    """take_ticket blocks in F_OFD_SETLKW on queue/seq, a 0666 file: a
    process that holds it (any user; or one stopped while holding it)
    stalls every arrival forever, whatever GPUMUTEX_TIMEOUT says.
    Interleaving: [B: write-locks queue/seq] -> [V: GPUMUTEX_TIMEOUT=0 on a
    free GPU]. Expected: V returns by itself (granted or timed out).
    Actual: V blocks in the kernel on queue/seq (seen in /proc/locks)."""
    env = jobs.job_env(lockdir, journal, devices="0")
    assert jobs.start(HOLDER, env).wait() == 0
    seq = os.path.join(lockdir, "queue", "seq")
    ino = os.stat(seq).st_ino
    h = Held(seq, 0, kind="wr")
    assert h.ok
    v = jobs.start(HOLDER, dict(env, GPUMUTEX_TIMEOUT="0"),
                   stderr=subprocess.DEVNULL)
    blocked = False
    # Ends either way: V exits, or its lock request shows up as blocked.
    while v.proc.poll() is None:
        with open("/proc/locks") as f:
            if any("->" in ln and f":{ino} " in ln for ln in f):
                blocked = True
                break
        os.sched_yield()
    h.release()
    v.wait()
    assert not blocked, ("GPUMUTEX_TIMEOUT=0 process blocked on the ticket "
                         "counter lock held by someone else")


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
