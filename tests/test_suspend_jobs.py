"""Idle suspension with several processes per job and more jobs than GPUs
(fake driver, docs/suspend.md, "Where a resumed job stands").

A new process of a job whose members are suspended takes its lease on
their GPUs, so that they can join it when they resume (a deterministic
case). Then random schedules: up to six CUDA "notebooks" of four jobs (so
some share a lease) on GPUs 0 and 1 of the fake driver, each holding one
GPU or both, asked to compute in a random order, several at once, started
while others wait, and SIGKILLed at random moments: while idle, suspended,
queued, checkpointing, resuming or being granted; some tear their
context down and exit (one schedule with the give-back after 1 ms and the
exit release on). The schedule is fixed
by the seed; where each kill lands is left to chance, and the outcome
must not depend on it:

- every call a live notebook makes succeeds (sync=0), and every one that
  was not killed exits 0;
- the fake driver's journal never shows two jobs on one GPU at once
  (checkpointed spans excluded: a suspended process holds nothing);
- afterwards nothing is left: no lease, no suspended process, and a new
  job gets both GPUs.

Waits are for the notebooks' own lines (a guard turns a hang into a
failure); no sleep stands in for an event."""
import os
import random
import select
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import jobs  # noqa: E402
import journal  # noqa: E402
from preloadlib import B, LIB, TIMEOUT, built, cli as gm, env  # noqa: E402,F401

HOLDER = os.path.join(os.path.dirname(__file__), "preload", "idleholder.py")


class Notebook:
    """One idleholder.py: its expected lines, read with a guard."""

    def __init__(self, e, job, ndev=1, devices="0,1", uid=None,
                 holder=HOLDER):
        x = dict({"LD_PRELOAD": str(LIB)}, **e)
        x.update(GPUMUTEX_JOB=job, GPUMUTEX_VISIBLE_DEVICES=devices,
                 GPUMUTEX_NUM_DEVICES=str(ndev))
        self.job = job
        self.p = subprocess.Popen([sys.executable, holder], env=x,
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE,
                                  preexec_fn=jobs.as_user(uid) if uid else None)
        self.buf = b""
        self.expect = ["ready"]
        self.killed = False
        self.ended = False      # tore its context down and exited

    def send(self, text):
        self.p.stdin.write(text.encode())
        self.p.stdin.flush()

    def line(self, why):
        deadline = time.monotonic() + TIMEOUT
        fd = self.p.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"pid {self.p.pid} ({self.job}) never "
                                     f"said its line ({why})")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError(f"pid {self.p.pid} ({self.job}) ended "
                                     f"before its line ({why}): rc "
                                     f"{self.p.wait()}, "
                                     f"{self.p.stderr.read().decode()[-400:]}")
            self.buf += chunk
        ln, self.buf = self.buf.split(b"\n", 1)
        return ln.decode().strip()

    def collect(self):
        while self.expect:
            want = self.expect.pop(0)
            got = self.line(want)
            if got != want:
                self.p.kill()
                raise AssertionError(f"pid {self.p.pid} ({self.job}) said "
                                     f"{got}, not {want}: "
                                     f"{self.p.stderr.read().decode()[-600:]}")

    def go(self):
        self.send("go\n")
        self.expect.append("sync=0")

    def teardown(self):
        self.send("teardown\n")
        self.expect.append("teardown=0,0")
        self.ended = True

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(timeout=TIMEOUT)
        self.killed = True


def test_new_member_takes_the_suspended_members_gpus(env):
    """A (job j) holds GPU 0 and is suspended for W, which can use GPU 0
    only. B of job j starts while GPU 1 is free: it waits for GPU 0, A's
    (W is suspended in turn), and A then resumes into B's lease. Without
    that, B took GPU 1 and A's next call failed: its job's lease was on a
    GPU its memory cannot come back to."""
    import json
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    a = Notebook(e, "j")
    a.collect()
    w = Notebook(e, "w", devices="0")
    w.collect()  # granted: A is suspended
    b = Notebook(e, "j")
    b.collect()  # granted GPU 0: W is suspended
    doc = json.loads(gm(e, "status", "--json"))
    (lease,) = doc["leases"]
    assert (lease["job"], lease["devices"]) == ("j", [0]), doc
    a.go()
    a.collect()  # joined B's lease and restored on GPU 0
    w.go()
    w.collect()
    for n in (a, b, w):
        n.send("quit\n")
        assert n.p.wait(timeout=TIMEOUT) == 0, n.p.stderr.read()
    # B's line says what it waits for: GPU 0 alone, and why.
    err = b.p.stderr.read().decode()
    assert "waits for 1 GPU of 0 (" in err, err
    assert "its job's suspended processes resume on it" in err, err
    ev = journal.parse(e["FAKECUDA_JOURNAL"])
    journal.check_exclusive(ev)
    # (suspended again later, for W's call)
    assert [x["ev"] for x in ev if x["pid"] == str(a.p.pid)
            and x["ev"] in ("ckpt", "restore")][:2] == ["ckpt", "restore"]


def test_joiner_of_a_bigger_lease_resumes_on_all_its_gpus(env):
    """M wants 1 GPU of 0,1 but joins its job's lease of both (A's): the
    driver shows it both from then on. Suspended, its lease gone (A
    exited), it must resume on both: while X holds GPU 0 it waits (X is
    suspended in turn), never takes GPU 1 alone and restores onto GPU 0
    beside X."""
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    a = Notebook(e, "j", ndev=2)
    a.collect()
    m = Notebook(e, "j", ndev=1)
    m.collect()                         # joined A's lease
    a.send("quit\n")
    assert a.p.wait(timeout=TIMEOUT) == 0
    x = Notebook(e, "x", devices="0")
    x.collect()                         # M suspended, the lease gone
    m.go()
    m.collect()                         # after X was suspended
    x.go()
    x.collect()
    for n in (m, x):
        n.send("quit\n")
        assert n.p.wait(timeout=TIMEOUT) == 0, n.p.stderr.read()
    ev = journal.parse(e["FAKECUDA_JOURNAL"])
    journal.check_exclusive(ev)
    kinds = [x_["ev"] for x_ in ev if x_["pid"] == str(x.p.pid)
             and x_["ev"] in ("ckpt", "restore")]
    assert kinds[:1] == ["ckpt"], kinds


def test_a_claim_that_gives_up_keeps_the_marks(env):
    """M of job j is suspended on GPU 0, which X holds now. P of job j,
    with GPUMUTEX_TIMEOUT=0, is narrowed to GPU 0 and gives up at once;
    it must leave the job file M marked in place: Q of job j still takes
    GPU 0 (X is suspended for it), where M can join it."""
    import json
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    m = Notebook(e, "j")
    m.collect()
    x = Notebook(e, "x", devices="0")
    x.collect()                         # M suspended
    p = Notebook(dict(e, GPUMUTEX_TIMEOUT="0"), "j")
    assert p.p.wait(timeout=TIMEOUT) != 0
    assert "GPUMUTEX_TIMEOUT=0" in p.p.stderr.read().decode()
    q = Notebook(e, "j")
    q.collect()                         # X suspended for it
    doc = json.loads(gm(e, "status", "--json"))
    assert [(x_["job"], x_["devices"]) for x_ in doc["leases"]] == \
        [("j", [0])], doc
    for n in (m, q, x):
        n.go()
        n.collect()
        n.send("quit\n")
        assert n.p.wait(timeout=TIMEOUT) == 0, n.p.stderr.read()
    journal.check_exclusive(journal.parse(e["FAKECUDA_JOURNAL"]))


def test_failed_restore_is_no_longer_suspended(env):
    """A's restore fails (the fake driver refuses it): that call fails
    (fail closed), and A, alive, no longer counts as a suspended member:
    status does not list it, and B of its job is not narrowed to A's GPU
    (held by W2 now): it takes the free GPU 1."""
    import json
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    a = Notebook(dict(e, FAKECUDA_CKPT_FAIL="restore"), "j")
    a.collect()
    w = Notebook(e, "w", devices="0")
    w.collect()  # A suspended
    a.send("go\n")
    assert a.line("the failed resume") == "sync=100"
    w2 = Notebook(e, "w2", devices="0")
    w2.collect()  # W suspended
    doc = json.loads(gm(e, "status", "--json"))
    assert [x["pid"] for x in doc["suspended"]] == [w.p.pid], doc
    b = Notebook(e, "j")
    b.collect()
    doc = json.loads(gm(e, "status", "--json"))
    held = sorted((x["job"], x["devices"]) for x in doc["leases"])
    assert held == [("j", [1]), ("w2", [0])], doc
    for n in (b, w2, w):
        n.go()
        n.collect()
        n.send("quit\n")
        assert n.p.wait(timeout=TIMEOUT) == 0, n.p.stderr.read()
    a.send("quit\n")
    a.p.wait(timeout=TIMEOUT)
    assert "refused to restore" in a.p.stderr.read().decode()
    journal.check_exclusive(journal.parse(e["FAKECUDA_JOURNAL"]))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (other users)")
def test_across_users(env, shared):
    """User 4001's idle notebook is suspended for user 4002's (its helper
    thread sees the other user's claim), and resumes after it; user 4003's
    job of the same name is another job (job names are per user): it is
    not narrowed to 4001's suspended GPU and takes the free one."""
    import json
    import shutil
    # Everything the other users run, where they can read it.
    bin_ = os.path.join(shared, "bin")
    os.mkdir(bin_)
    os.chmod(bin_, 0o755)
    for f in (str(LIB), HOLDER,
              str(B / "tests" / "fakecuda" / "libcuda.so.1")):
        shutil.copy2(f, bin_)
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1", LD_LIBRARY_PATH=bin_,
             LD_PRELOAD=os.path.join(bin_, os.path.basename(str(LIB))),
             FAKECUDA_JOURNAL=os.path.join(shared, "journal"),
             GPUMUTEX_LOCK_DIR=os.path.join(shared, "lock"))
    holder = os.path.join(bin_, os.path.basename(HOLDER))
    a = Notebook(e, "a", devices="0", uid=4001, holder=holder)
    a.collect()
    w = Notebook(e, "w", devices="0", uid=4002, holder=holder)
    w.collect()  # granted: A is suspended
    b = Notebook(e, "a", uid=4003, holder=holder)
    b.collect()
    doc = json.loads(gm(e, "status", "--json"))
    held = sorted((x["uid"], x["devices"]) for x in doc["leases"])
    assert held == [(4002, [0]), (4003, [1])], doc
    assert [(x["uid"], x["pid"]) for x in doc["suspended"]] == \
        [(4001, a.p.pid)], doc
    for n in (w, b, a):
        n.go()
        n.collect()
        n.send("quit\n")
        assert n.p.wait(timeout=TIMEOUT) == 0, n.p.stderr.read()
    ev = journal.parse(e["FAKECUDA_JOURNAL"])
    journal.check_exclusive(ev)
    assert [x["ev"] for x in ev if x["pid"] == str(a.p.pid)
            and x["ev"] in ("ckpt", "restore")] == ["ckpt", "restore"]


@pytest.mark.parametrize("seed,extra", [
    (1, {}), (2, {}), (3, {}),
    # contexts destroyed: leases given back after 1 ms, and at exit
    (4, {"GPUMUTEX_GIVE_BACK_MS": "1", "GPUMUTEX_EXIT_EARLY": "1"})])
def test_random_schedule_with_kills(env, seed, extra):
    import json
    rnd = random.Random(seed)
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1", **extra)
    books = []
    kills = 0
    try:
        for _ in range(120):
            live = [b for b in books if not b.killed and not b.ended]
            r = rnd.random()
            if r < 0.15 and len(live) < 6:
                # job j2 wants both GPUs (a job's processes agree on it)
                j = rnd.randrange(4)
                books.append(Notebook(e, f"j{j}", ndev=2 if j == 2 else 1))
            elif r < 0.6 and live:
                b = rnd.choice(live)
                if not b.expect:
                    b.go()
            elif r < 0.68 and live:
                rnd.choice(live).kill()
                kills += 1
            elif r < 0.74 and live:
                b = rnd.choice(live)
                if not b.expect:
                    b.teardown()
            elif live:
                rnd.choice(live).collect()
        for b in books:
            if not b.killed:
                b.collect()
                if not b.ended:
                    b.send("quit\n")
        for b in books:
            if not b.killed:
                assert b.p.wait(timeout=TIMEOUT) == 0, b.p.stderr.read()
    finally:
        for b in books:
            if b.p.poll() is None:
                b.p.kill()
                b.p.wait()
    ev = journal.parse(e["FAKECUDA_JOURNAL"])
    journal.check_exclusive(ev)
    assert kills and len(books) > 4, (kills, len(books))
    doc = json.loads(gm(e, "status", "--json"))
    assert not doc["leases"] and not doc["suspended"], doc
    kinds = [x["ev"] for x in ev]
    assert "ckpt" in kinds and "restore" in kinds, sorted(set(kinds))
    last = Notebook(e, "last", ndev=2)
    last.go()
    last.collect()
    last.send("quit\n")
    assert last.p.wait(timeout=TIMEOUT) == 0
