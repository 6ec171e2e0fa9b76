"""A holder that exits gives its lease back before its teardown, and the
next holder's allocation waits for that exit instead of failing
(GPUMUTEX_EXIT_EARLY=1; docs/design.md, "Exit and readiness rules").

On the fake driver with its memory counted per GPU across processes
(FAKECUDA_MEM_DIR): the holder (tests/preload/exitjob.c, `hold`) waits in
an atexit handler that runs after the library's exit release, until the
next job (or the fake driver, at the next job's out-of-memory) writes to
a FIFO. Where the lease is kept to the end, that is a deadlock, which the
holder ends after 60 s with exit status 3 (and the next job gives up
after GPUMUTEX_TIMEOUT): that is how these tests fail on a library
without the release. Nothing here sleeps or measures time."""

import os
import select
import signal
import subprocess
from pathlib import Path

import pytest

from preloadlib import LIB, T
from preloadlib import built  # noqa: F401 (fixture)
from conftest import fake_driver_env

JOB = T / "exitjob"
WAIT = 120  # seconds; only so that a hang fails instead of blocking CI


@pytest.fixture
def env(tmp_path, built):  # noqa: F811
    (tmp_path / "mem").mkdir()
    os.mkfifo(tmp_path / "fifo")
    return fake_driver_env(
        tmp_path, FAKECUDA_NUM_DEVICES="1", GPUMUTEX_VISIBLE_DEVICES="0",
        FAKECUDA_MEM_DIR=str(tmp_path / "mem"), FAKECUDA_MEM_TOTAL="1000",
        GPUMUTEX_RECHECK_MS="0", GPUMUTEX_EXIT_EARLY="1",
        LD_PRELOAD=os.environ.get("EXIT_EARLY_TEST_LIB", str(LIB)))


def start(env, *args, **extra):
    return subprocess.Popen([str(JOB), *map(str, args)],
                            env=dict(env, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read_one(fd):
    """One byte from FIFO descriptor fd, or b'' after WAIT seconds (so a
    failure fails instead of hanging)."""
    r, _, _ = select.select([fd], [], [], WAIT)
    return os.read(fd, 1) if r else b""


def holder(env, tmp_path, mem, late="-"):
    """The holder, started and done with its GPU work (its lease and its
    memory held) before anything else starts: it is the first in line."""
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    # Read-write: a reader that is also a writer never sees end-of-file.
    watch = os.open(ready, os.O_RDWR)
    try:
        a = start(env, "hold", tmp_path / "fifo", mem, late, ready)
        assert read_one(watch) == b"n"
    finally:
        os.close(watch)
    return a


def finish(p):
    out, err = p.communicate(timeout=WAIT)
    return p.returncode, err


def journal(env):
    return [dict(f.split("=", 1) for f in ln.split())
            for ln in Path(env["FAKECUDA_JOURNAL"]).read_text().splitlines()]


def events(env):
    out = []
    for f in (Path(env["GPUMUTEX_LOCK_DIR"]) / "job").glob("*/events.log"):
        for ln in f.read_text().splitlines():
            p = ln.split()
            out.append(dict([("event", p[1])] + [f.split("=", 1)
                                                 for f in p[2:] if "=" in f]))
    return out


def first(j, pid, ev):
    return next(int(e["t"]) for e in j if e["pid"] == str(pid)
                and e["ev"] == ev)


def test_holder_lets_go_before_its_teardown(env, tmp_path):
    a = holder(env, tmp_path, 100)
    b = start(env, "next", tmp_path / "fifo", 100)
    (ra, ea), (rb, eb) = finish(a), finish(b)
    assert (ra, rb) == (0, 0), ea + eb
    j = journal(env)
    # The next job worked on the GPU while the holder still had its
    # context (the fake driver's `end` comes from its teardown) ...
    assert first(j, b.pid, "begin") < first(j, a.pid, "end")
    # ... but never while the holder could still do GPU work: all of the
    # holder's work came before the next job's first.
    last_a = max(int(e["t"]) for e in j
                 if e["pid"] == str(a.pid) and e["ev"] == "tick")
    assert last_a < first(j, b.pid, "tick")
    gave = [e for e in events(env) if e["event"] == "exit"
            and e["pid"] == str(a.pid)]
    assert [e.get("why") for e in gave] == ["give-back"]


def test_allocation_waits_for_the_exiting_holder(env, tmp_path):
    """Each job takes 60 % of the GPU's memory: the next one's allocation
    fails while the holder exits, waits for it to be gone, and succeeds."""
    a = holder(env, tmp_path, 600)
    b = start(env, "plain", "-", 600,
              FAKECUDA_OOM_FIFO=str(tmp_path / "fifo"))
    (ra, ea), (rb, eb) = finish(a), finish(b)
    assert (ra, rb) == (0, 0), ea + eb
    j = journal(env)
    oom = first(j, b.pid, "oom")
    assert oom < first(j, a.pid, "end")
    assert any(e["ev"] == "tick" and e["pid"] == str(b.pid)
               and int(e["t"]) > first(j, a.pid, "end") for e in j)


@pytest.mark.xfail(strict=False, reason="known race (docs/design.md, 'An "
                   "allocation waits for an exiting holder'): about 1 run in "
                   "100 under load, the third job finds no exit mark while "
                   "memory is still booked, and its allocation fails")
def test_three_jobs_of_60_percent_at_once(env):
    ps = [start(env, "plain", "-", 600) for _ in range(3)]
    res = [finish(p) for p in ps]
    assert [r for r, _ in res] == [0, 0, 0], "".join(e for _, e in res)


def test_killed_exiting_holder_is_waited_for_too(env, tmp_path):
    """The holder is killed while it exits (SIGKILL): the next job's
    allocation waits for exactly that and succeeds."""
    oom_fifo = tmp_path / "oom"
    os.mkfifo(oom_fifo)
    watch = os.open(oom_fifo, os.O_RDWR)
    a = holder(env, tmp_path, 600)
    b = start(env, "plain", "-", 600, FAKECUDA_OOM_FIFO=str(oom_fifo))
    try:
        assert read_one(watch) == b"o"  # b's first allocation failed
    finally:
        os.close(watch)
    a.send_signal(signal.SIGKILL)
    rb, eb = finish(b)
    finish(a)
    assert a.returncode == -signal.SIGKILL
    assert rb == 0, eb


def test_memory_short_for_another_reason_still_fails(env, tmp_path):
    """Memory taken by a process that is not an exiting holder (here one
    without gpumutex): the out-of-memory error stands, at once."""
    fifo = tmp_path / "fifo"
    other = holder(dict(env, LD_PRELOAD=""), tmp_path, 600)
    try:
        # It has its memory; it is told to go only after b is done.
        b = start(env, "plain", "-", 600)
        rb, eb = finish(b)
        assert rb == 2, eb  # CUDA_ERROR_OUT_OF_MEMORY
    finally:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"x")
        os.close(fd)
        finish(other)


def test_gpu_work_during_exit_queues_again(env, tmp_path):
    """The holder launches a kernel in its exit handler, after it gave the
    lease back: that kernel waits for a new lease, so it never runs while
    the next job holds the GPU."""
    a = holder(env, tmp_path, 100, "late")
    b = start(env, "next", tmp_path / "fifo", 100)
    (ra, ea), (rb, eb) = finish(a), finish(b)
    assert (ra, rb) == (0, 0), ea + eb
    j = journal(env)
    b_ticks = [int(e["t"]) for e in j
               if e["pid"] == str(b.pid) and e["ev"] == "tick"]
    late = [int(e["t"]) for e in j if e["pid"] == str(a.pid)
            and e["ev"] == "tick" and int(e["t"]) > min(b_ticks)]
    assert late and min(late) > max(b_ticks)
    ev = events(env)
    b_gone = max(int(e["mono"]) for e in ev
                 if e["event"] == "exit" and e["pid"] == str(b.pid))
    assert min(late) > b_gone
    assert len([e for e in ev if e["event"] == "grant"
                and e["pid"] == str(a.pid)]) == 2
