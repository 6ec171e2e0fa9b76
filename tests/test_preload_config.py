"""libgpumutex.so's configuration and failure policy: a bad
configuration or an unusable lock directory fails closed, inherited
visible devices restrict the candidates, no GPU wanted takes no lease,
the timeout and its message, one lease for many threads, errno kept, and
only the lease's descriptors left open. Shared with test_preload.py:
tests/preloadlib.py (same method: real processes on the fake driver,
observable outcomes only)."""

import os
import re
import subprocess

import pytest

from preloadlib import T, Holder, assert_caught, grun, inits, journal, kv, run, used_by
from preloadlib import built, env  # noqa: F401 (fixtures)


# ---- Configuration and failure --------------------------------------------

BAD = [
    ("GPUMUTEX_VISIBLE_DEVICES", "0,,1"),
    ("GPUMUTEX_VISIBLE_DEVICES", "a"),
    ("GPUMUTEX_VISIBLE_DEVICES", "-1"),
    ("GPUMUTEX_VISIBLE_DEVICES", "1,1"),
    ("GPUMUTEX_NUM_DEVICES", "0"),
    ("GPUMUTEX_NUM_DEVICES", "-1"),
    ("GPUMUTEX_NUM_DEVICES", "x"),
    ("GPUMUTEX_NUM_DEVICES", "3"),
    ("GPUMUTEX_LOCK_DIR", "relative/dir"),
    ("GPUMUTEX_TIMEOUT", "soon"),
    ("GPUMUTEX_JOB", "no spaces"),
    ("GPUMUTEX_QUIET", "false"),
    ("GPUMUTEX_QUIET", "no"),
    ("GPUMUTEX_QUIET", ""),
]


@pytest.mark.parametrize("var,value", BAD, ids=lambda x: str(x) or "empty")
def test_bad_configuration_fails_closed(env, var, value):
    env[var] = value
    res = run([T / "cuprobe", "threads", "4"], env)
    rcs = [v for k, v in (l.split("=") for l in res.stdout.splitlines())
           if k == "thread-rc"]
    assert rcs == ["1"] * 4, res.stdout  # CUDA_ERROR_INVALID_VALUE, sticky
    msgs = [l for l in res.stderr.splitlines() if l.startswith("gpumutex: ")]
    assert len(msgs) == 1 and var in msgs[0], res.stderr
    assert "gpumutex" not in res.stdout
    assert inits(env) == []


@pytest.mark.parametrize("kind", ["file", "open-dir"])
def test_unusable_lock_dir_fails_closed(env, tmp_path, kind):
    bad = tmp_path / "bad"
    if kind == "file":
        bad.write_text("")
    else:
        bad.mkdir()
        bad.chmod(0o777)  # writable by all, not sticky: refused
    env["GPUMUTEX_LOCK_DIR"] = str(bad)
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100"
    assert "gpumutex: " in res.stderr and "GPUMUTEX_LOCK_DIR" in res.stderr
    assert inits(env) == []


@pytest.mark.parametrize("cvd,expect", [
    ("1", "1"), ("3,1", "1"), ("1,0", "0"), ("0,-1,1", "0"),
])
def test_inherited_visible_devices_restrict_candidates(env, cvd, expect):
    env["CUDA_VISIBLE_DEVICES"] = cvd
    ev = assert_caught(env, run([T / "cuprobe", "dlopen"], env))
    assert ev["cvd"] == expect


@pytest.mark.parametrize("cvd", ["", "-1"])
def test_no_gpu_wanted_takes_no_lease(env, tmp_path, cvd):
    env["CUDA_VISIBLE_DEVICES"] = cvd
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100"  # the fake driver: no device
    ev = inits(env)
    assert len(ev) == 1 and ev[0]["ndev"] == "0" and ev[0]["job"] == "-"
    assert not (tmp_path / "lock").exists()


@pytest.mark.parametrize("cvd", ["5", "GPU-fake0000-0000-0000-0000-000000000000",
                                 "MIG-1234", "zero"])
def test_unsupported_visible_devices_fail_closed(env, cvd):
    env["CUDA_VISIBLE_DEVICES"] = cvd
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "1"
    assert "gpumutex: CUDA_VISIBLE_DEVICES" in res.stderr
    assert inits(env) == []



def test_timeout_and_waiting_message(env):
    env["GPUMUTEX_NUM_DEVICES"] = "2"
    env["CUPROBE_TOUCH"] = "1"
    h = Holder(env)
    holder_job = inits(env)[0]["job"]
    env["GPUMUTEX_TIMEOUT"] = "0.5"
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100"  # CUDA_ERROR_NO_DEVICE
    lines = res.stderr.splitlines()
    assert all(l.startswith("gpumutex: ") for l in lines), lines
    wait = [l for l in lines if "waits for" in l]
    assert len(wait) == 1, lines
    # The holder's job in its short form (12 characters and "...").
    assert "pid %d" % h.pid in wait[0] and holder_job[:12] + "..." in wait[0]
    assert len(wait[0]) <= 200, wait[0]
    assert "cuprobe hold" in wait[0]
    assert any("GPUMUTEX_TIMEOUT" in l for l in lines)
    assert "gpumutex" not in res.stdout
    # The real cuInit ran (the lease waits for the first device call), but
    # only the holder used a device.
    assert used_by(env) == {str(h.pid)}
    # GPUMUTEX_QUIET=1: no waiting line; the failure is still explained.
    env["GPUMUTEX_QUIET"] = "1"
    res = run([T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100"
    assert "waits for" not in res.stderr
    assert "GPUMUTEX_TIMEOUT" in res.stderr
    assert h.release() == 0


@pytest.mark.parametrize("how", ["variable", "gpumutex-run"])
def test_timeout_zero_does_not_say_it_waits(env, how):
    """GPUMUTEX_TIMEOUT=0 (or --timeout 0) on busy GPUs: cuInit fails at
    once with CUDA_ERROR_NO_DEVICE and one line saying why; no "waits for"
    line, since the process never waits."""
    env["GPUMUTEX_NUM_DEVICES"] = "2"
    env["CUPROBE_TOUCH"] = "1"
    h = Holder(env)
    if how == "variable":
        res = run([T / "cuprobe", "dlopen"], dict(env, GPUMUTEX_TIMEOUT="0"))
    else:
        res = grun(["--timeout", "0", "--", T / "cuprobe", "dlopen"], env)
    assert kv(res.stdout)["rc"] == "100", res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "waits for" not in lines[0]
    assert lines[0].startswith("gpumutex: could not get 2 of GPUs 0,1 at "
                               "once, and GPUMUTEX_TIMEOUT=0 says not to "
                               "wait"), lines
    assert "CUDA_ERROR_NO_DEVICE" in lines[0]
    # The real cuInit ran (the lease waits for the first device call), but
    # only the holder used a device.
    assert used_by(env) == {str(h.pid)}
    assert h.release() == 0


def test_threads_make_one_lease(env, tmp_path):
    res = run([T / "cuprobe", "threads", "16"], env)
    assert kv(res.stdout)["rc"] == "0"
    assert res.stdout.count("thread-rc=0") == 16
    job = inits(env)[0]["job"]
    records = list((tmp_path / "lock" / "job").glob("*/%s.lease" % job))
    assert len(records) == 1
    members = re.findall(r"^member=(\d+)$", records[0].read_text(), re.M)
    assert len(members) == 1, records[0].read_text()


def test_errno_is_preserved(env):
    # The fake driver itself zeroes errno while it parses
    # FAKECUDA_NUM_DEVICES; leave it at its default (8) here.
    del env["FAKECUDA_NUM_DEVICES"]
    res = run([T / "cuprobe", "errno"], env)
    assert_caught(env, res)
    assert kv(res.stdout)["errno-after"] == "4242"


@pytest.mark.parametrize("n", ["1", "2"])
def test_only_the_lease_descriptors_stay_open(env, tmp_path, n):
    """After cuInit the process holds one descriptor per leased GPU (the
    lease itself), one of its user's event log (the lease's too, for its
    exit record) and one of its activity file (docs/suspend.md: opened at
    the grant, so that publishing opens nothing later), all close-on-exec,
    and nothing else of ours."""
    env["GPUMUTEX_NUM_DEVICES"] = n
    env["CUPROBE_TOUCH"] = "1"
    res = run([T / "cuprobe", "fds"], env)
    assert_caught(env, res, n=int(n))
    fds = [l.split()[0][3:] for l in res.stdout.splitlines()
           if l.startswith("fd=")]
    cloexec = [l.split()[1] for l in res.stdout.splitlines()
               if l.startswith("fd=")]
    dev = str(tmp_path / "lock" / "dev") + "/"
    leased = inits(env)[0]["cvd"].split(",")
    user = tmp_path / "lock" / "job" / str(os.geteuid())
    acts = [str(p) for p in user.glob("act.*")]
    assert len(acts) == 1, acts
    assert sorted(fds) == sorted([str(user / "events.log")] + acts +
                                 [dev + d for d in leased]), res.stdout
    assert set(cloexec) == {"cloexec=1"}


def test_activity_files_of_gone_processes_are_removed(env, tmp_path):
    """A process that takes a lease removes its user's activity files
    whose writer is gone (docs/suspend.md): the previous probe's (it has
    exited), a reaped child's PID's (with and without this PID namespace
    in the name), and another namespace's whose lock is free; a live
    PID's, another namespace's whose lock is held, and a file that is not
    an activity file stay, and so does the new probe's own."""
    env["GPUMUTEX_NUM_DEVICES"] = "1"
    first = run([T / "cuprobe", "errno"], env)
    assert_caught(env, first)
    user = tmp_path / "lock" / "job" / str(os.geteuid())
    before = {p.name for p in user.glob("act.*")}
    assert len(before) == 1, before
    child = subprocess.Popen(["true"])
    child.wait()
    line = "gm1act pid=%d lease=1 job=x state=idle\n"
    ns = os.stat("/proc/self/ns/pid").st_ino
    gone = [f"act.{child.pid}", f"act.{child.pid}.{ns}",
            # another PID namespace's, unlocked: its writer is gone
            f"act.{os.getpid()}.{ns + 1}"]
    kept = [f"act.{os.getpid()}", f"act.{os.getpid()}.{ns}", "act.notes",
            # another namespace's, locked by its (live) writer
            f"act.{child.pid}.{ns + 1}"]
    for name in gone + kept:
        (user / name).write_text(line % child.pid)
    import fcntl
    with open(user / kept[-1], "r+") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        second = run([T / "cuprobe", "errno"], env)
    assert second.returncode == 0 and len(inits(env)) == 2, second.stderr
    after = {p.name for p in user.glob("act.*")}
    assert before.isdisjoint(after) and not set(gone) & after, after
    assert set(kept) < after, after
    # and the new probe's own, named by its PID and namespace
    (own,) = after - set(kept)
    assert own.startswith("act.") and own.endswith(f".{ns}"), own
