"""A job's cost must not grow with the queue (docs/design.md, "Who is
ahead"). Counted exactly, not timed: the crash shim (tests/stress/
crashshim.c) counts every C library call a claim makes through the PLT,
and a claim arriving behind a long queue, behind a short one, or after
many dead tickets of another user must make the same number of calls.

Depths are chosen 16 tickets apart, so that the claims compared have the
same ticket number modulo GM_CLEANUP_EVERY (every 16th ticket also tidies
its user's dead jobs, which is a cost of its own)."""

import os
import signal
import subprocess

import pytest

import jobs
from conftest import BUILD

HOLDER = os.path.join(BUILD, "tests", "lease-holder")
SHIM = os.path.join(BUILD, "tests", "crashshim.so")
LIB = os.path.join(BUILD, "libgpumutex.so")
FAKEJOB = os.path.join(BUILD, "demo", "fakejob")
ROOT = pytest.mark.skipif(os.geteuid() != 0,
                          reason="needs root to play another user")
USER_B = 4401


@pytest.fixture(scope="module")
def programs(built):
    subprocess.run(["make", "-C", os.path.dirname(BUILD), "-s",
                    "build/tests/crashshim.so", "build/demo/fakejob",
                    "fakecuda"], check=True)


# Every function the shim counts but the waits themselves: how often a
# 1 ms wait wakes up is the clock's business, not the queue's.
NOT_WAITS = ("close,mkdir,mkdirat,mkfifoat,mknodat,fchmod,fchown,linkat,"
             "renameat,unlinkat,symlinkat,readlinkat,read,pread,write,pwrite,"
             "ftruncate,readdir,fdopendir,closedir,open,openat,fcntl,syscall")


def counted(argv, env, funcs=None):
    """Run argv under the shim; (returncode, calls, stderr)."""
    r, w = os.pipe()
    e = dict(env, LD_PRELOAD=":".join(
        [SHIM] + [p for p in env.get("LD_PRELOAD", "").split(":") if p]),
        GM_SHIM_COUNT=str(w))
    if funcs:
        e["GM_SHIM_FUNCS"] = funcs
    p = subprocess.run(argv, env=e, pass_fds=[w], capture_output=True,
                       text=True, timeout=jobs.HANG_GUARD)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read().split()
    assert out[:1] == ["calls"], (out, p.stderr)
    return p.returncode, int(out[1]), p.stderr


def queue(lockdir, journal, depth):
    """A holder of GPU 0 and `depth` jobs waiting behind it."""
    env = jobs.job_env(lockdir, journal, devices="0")
    holder = jobs.start(HOLDER, env, ready=True, hold=True)
    assert holder.ready()
    waiters = []
    for _ in range(depth):
        w = jobs.start(HOLDER, env, waiting=True)
        assert w.waited()
        waiters.append(w)
    return env, holder, waiters


def finish(holder, waiters):
    holder.release()
    assert [j.wait() for j in [holder] + waiters] == [0] * (1 + len(waiters))


def test_arriving_claim_costs_the_same_behind_any_queue(programs, tmp_path):
    """A claim arriving behind 2 or 50 waiters takes its ticket, finds the
    one ahead and (GPUMUTEX_TIMEOUT=0) gives up, in the same calls."""
    calls = {}
    for depth in (2, 50):
        env, holder, waiters = queue(str(tmp_path / f"l{depth}"),
                                     str(tmp_path / f"j{depth}"), depth)
        rc, calls[depth], err = counted(
            [HOLDER], dict(env, GPUMUTEX_TIMEOUT="0"))
        assert rc == 3, err  # gave up: somebody is ahead
        finish(holder, waiters)
    assert calls[2] == calls[50], calls


def test_waiting_line_costs_the_same_behind_any_queue(programs, tmp_path):
    """The same for a CUDA program under the preload library, whose first
    cuInit prints the waiting line (who holds the GPU, how far ahead)."""
    calls, lines = {}, {}
    for depth in (2, 50):
        env, holder, waiters = queue(str(tmp_path / f"l{depth}"),
                                     str(tmp_path / f"j{depth}"), depth)
        e = dict(env, LD_PRELOAD=LIB, GPUMUTEX_TIMEOUT="0.001",
                 LD_LIBRARY_PATH=os.path.join(BUILD, "tests", "fakecuda"),
                 FAKECUDA_JOURNAL=str(tmp_path / f"fake{depth}"),
                 FAKECUDA_NUM_DEVICES="1")
        rc, calls[depth], err = counted([FAKEJOB, "0"], e, NOT_WAITS)
        assert rc == 1, err  # cuInit failed: gave up waiting
        lines[depth] = [ln for ln in err.splitlines() if " waits for " in ln]
        finish(holder, waiters)
    assert calls[2] == calls[50], calls
    for depth, line in lines.items():
        assert len(line) == 1, lines
        assert f"up to {depth} ahead" in line[0], line
        assert "GPU 0 held by job" in line[0], line


@ROOT
def test_dead_tickets_of_another_user_cost_nothing_once_passed(
        programs, tmp_path):
    """Another user's dead tickets stay in queue/ (only their owner or root
    may remove them from the sticky directory). The first claim after them
    probes them once; the queue's marks then let every later claim pass
    them without a look, however many there are. Root's `gpumutex init`
    removes them."""
    import shutil
    import tempfile
    calls = {}
    for dead in (5, 101):
        shared = tempfile.mkdtemp(prefix="gm-cost-", dir="/tmp")
        try:
            os.chmod(shared, 0o1777)
            lockdir = os.path.join(shared, "locks")
            journal = os.path.join(shared, "journal")
            open(journal, "w").close()
            os.chmod(journal, 0o666)
            env = jobs.job_env(lockdir, journal, devices="0")
            holder = jobs.start(HOLDER, env, ready=True, hold=True)
            assert holder.ready()
            victims = []
            for _ in range(dead):
                w = jobs.start(HOLDER, env, waiting=True, user=USER_B)
                assert w.waited()
                victims.append(w)
            # Stopped first, so that none of them, woken by the death of
            # the one ahead, tidies up the others (they are all B's).
            for w in victims:
                w.proc.send_signal(signal.SIGSTOP)
            for w in victims:
                w.proc.send_signal(signal.SIGKILL)
                assert w.wait() == -signal.SIGKILL
            holder.release()
            assert holder.wait() == 0
            queue_dir = os.path.join(lockdir, "queue")
            left = [n for n in os.listdir(queue_dir) if n.count(".") == 5]
            assert len(left) == dead  # B's dead tickets are still there
            first = subprocess.run([HOLDER], env=env, timeout=60)
            assert first.returncode == 0
            rc, calls[dead], err = counted([HOLDER], env)
            assert rc == 0, err
            # Root's init removes what is provably dead, whoever made it.
            r = subprocess.run([os.path.join(BUILD, "gpumutex"), "init",
                                "--visible-devices", "0", "--lock-dir",
                                lockdir], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            assert sorted(os.listdir(queue_dir)) == ["seq"]
        finally:
            shutil.rmtree(shared, ignore_errors=True)
    assert calls[5] == calls[101], calls
