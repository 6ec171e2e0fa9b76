"""Adversarial tests of the lease core: "bug" tests, each demonstrating one
concrete defect with a fixed interleaving (set up with the pipes of
tests/lib/jobs.py, files and locks, never sleeps). They fail until the
core is fixed, so they carry a strict xfail marker (`bug`); GM_SHOW_BUGS=1
runs them as plain tests. Each docstring names the interleaving.

Contention that must keep passing (mixed job sizes, overlapping
candidate sets, same-job arrivals, random SIGKILLs, forks, orphans and
threads) is in test_lease_contention.py; what both use is
tests/leaseadv.py.

Helpers that lease-holder cannot play (locking a byte of a device file as
another user, reading the state, running near the descriptor limit,
threads) are in tests/lease/adversary.c, built by the Makefile's generic
rule (`make build/tests/adversary`).
"""

import os
import subprocess

import pytest

import journal as J
import jobs
from leaseadv import (ADV, HOLDER, ROOT, USER_A, USER_B, USER_C, Held,
                      record_lease, run_as)
from leaseadv import adv  # noqa: F401 (a fixture)


# =====================================================================
# Bugs. Each of these is expected to fail until the core is fixed.
# =====================================================================


@ROOT
@pytest.mark.parametrize("variant", [
    pytest.param("name-byte", marks=pytest.mark.xfail(
        os.environ.get("GM_SHOW_BUGS") != "1", strict=True,
        raises=AssertionError,
        reason="known limitation (docs/permissions.md): "
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
