"""Idle holders suspended through the driver's checkpoint API (fake driver):
docs/suspend.md."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import journal  # noqa: E402
from preloadlib import LIB, TIMEOUT, built, env  # noqa: E402,F401

HOLDER = os.path.join(os.path.dirname(__file__), "preload", "idleholder.py")


def start(e, *args, job):
    x = dict(e, LD_PRELOAD=str(LIB), GPUMUTEX_JOB=job,
             GPUMUTEX_VISIBLE_DEVICES="0")
    return subprocess.Popen([sys.executable, HOLDER, *args], env=x,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def ready(p):
    assert p.stdout.readline().strip() == "ready", p.stderr.read()


def status(e):
    import json
    from preloadlib import B
    r = subprocess.run([str(B / "gpumutex"), "status", "--json", "--lock-dir",
                        e["GPUMUTEX_LOCK_DIR"]], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def status_text(e):
    from preloadlib import B
    return subprocess.run([str(B / "gpumutex"), "status", "--lock-dir",
                           e["GPUMUTEX_LOCK_DIR"]], capture_output=True,
                          text=True, timeout=TIMEOUT).stdout


def events(e):
    return journal.parse(e["FAKECUDA_JOURNAL"])


def test_idle_holder_yields_to_waiter_and_resumes(env):
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    holder = start(e, job="holder")
    ready(holder)
    # The waiter is served while the holder idles (it never calls again
    # before the waiter is done: it waits on its stdin).
    waiter = start(e, job="waiter")
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert waiter.returncode == 0, err
    assert "sync=0" in out
    # The holder is suspended now (its lease is gone): status lists it.
    doc = status(e)
    assert [s["pid"] for s in doc["suspended"]] == [holder.pid], doc
    assert not doc["leases"]
    assert f"pid {holder.pid}" in status_text(e)
    # ... and the metrics count it (docs/deploy.md, "Monitoring").
    from preloadlib import B
    m = subprocess.run([str(B / "gpumutex"), "metrics", "--lock-dir",
                        e["GPUMUTEX_LOCK_DIR"]], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert m.returncode == 0, m.stderr
    lines = m.stdout.splitlines()
    assert "gpumutex_suspended_processes 1" in lines, m.stdout
    assert "gpumutex_suspensions_total 1" in lines, m.stdout
    assert "gpumutex_resumes_total 0" in lines, m.stdout
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert holder.returncode == 0, err
    assert "sync=0" in out
    # The event log records the suspension and the resume.
    logs = ""
    for root, _, files in os.walk(os.path.join(e["GPUMUTEX_LOCK_DIR"], "job")):
        for f in files:
            if f.startswith("events.log"):
                with open(os.path.join(root, f)) as fh:
                    logs += fh.read()
    assert "gm1 suspend " in logs and "gm1 resume " in logs, logs
    from preloadlib import B
    r = subprocess.run([str(B / "gpumutex"), "log", "--lock-dir",
                        e["GPUMUTEX_LOCK_DIR"]], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert "suspended after" in r.stdout and "resumed on GPU 0" in r.stdout, \
        r.stdout
    r = subprocess.run([str(B / "gpumutex"), "report", "--lock-dir",
                        e["GPUMUTEX_LOCK_DIR"]], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.split("Idle suspensions")[1].splitlines()[2:]
    assert rows and rows[0].split()[:3] == ["holder", str(holder.pid), "0"]
    # report --json has the same suspension, per lease, job and user too.
    import json
    r = subprocess.run([str(B / "gpumutex"), "report", "--json",
                        "--lock-dir", e["GPUMUTEX_LOCK_DIR"]],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (s,) = doc["suspensions"]
    assert (s["pid"], s["job"], s["devices"], s["resumed"]) == (
        holder.pid, "holder", [0], True)
    r = subprocess.run([str(B / "gpumutex"), "log", "--json", "--lock-dir",
                        e["GPUMUTEX_LOCK_DIR"]], capture_output=True,
                       text=True, timeout=TIMEOUT)
    logged = [json.loads(x) for x in r.stdout.splitlines()]
    (susp,) = [x for x in logged if x["ev"] == "suspend"]
    (res,) = [x for x in logged if x["ev"] == "resume"]
    assert s["memory_bytes"] == susp["memory"]
    assert s["checkpoint_s"] == pytest.approx(susp["checkpoint_s"], abs=1e-3)
    assert s["lease"] == susp["lease"]
    assert s["suspended_s"] == pytest.approx(res["t"] - susp["t"], abs=1e-3)
    (job,) = [j for j in doc["jobs"] if j["job"] == "holder"]
    (lease,) = [x for x in doc["leases"] if x["lease"] == s["lease"]]
    (user,) = doc["users"]
    for totals in (job["suspensions"], lease["suspensions"],
                   user["suspensions"]):
        assert totals["count"] == 1
        assert totals["memory_moved_bytes"] == s["memory_bytes"]
        assert totals["suspended_s"] == pytest.approx(s["suspended_s"])
        assert totals["checkpoint_s"] == pytest.approx(s["checkpoint_s"])
    (waiter_job,) = [j for j in doc["jobs"] if j["job"] == "waiter"]
    assert waiter_job["suspensions"]["count"] == 0
    svg = os.path.join(os.path.dirname(e["FAKECUDA_JOURNAL"]), "r.svg")
    r = subprocess.run([str(B / "gpumutex"), "report", "--lock-dir",
                        e["GPUMUTEX_LOCK_DIR"], "--svg", svg],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    with open(svg) as fh:
        assert 'class="suspended"' in fh.read()
    ev = events(e)
    journal.check_exclusive(ev)
    hp = str(holder.pid)
    kinds = [x["ev"] for x in ev if x["pid"] == hp]
    assert "ckpt" in kinds and "restore" in kinds
    # The holder's ticks after the resume come after its restore, and the
    # waiter's between its checkpoint and restore.
    ck = [x.t for x in ev if x["pid"] == hp and x["ev"] == "ckpt"][0]
    rs = [x.t for x in ev if x["pid"] == hp and x["ev"] == "restore"][0]
    wt = [x.t for x in ev if x["pid"] == str(waiter.pid) and x["ev"] == "tick"]
    assert wt and all(ck < t < rs for t in wt)


def test_suspended_holder_tears_down_after_restoring(env):
    """A suspended process that ends (its teardown frees and releases, as
    the CUDA runtime's at exit) while the job it yielded to holds the GPU:
    the teardown waits for the GPU, restores, then frees; it succeeds,
    and no call of it reaches the driver while the other job holds it."""
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    holder = start(e, job="holder")
    ready(holder)
    waiter = start(e, job="waiter")
    ready(waiter)
    waiter.stdin.write("go\n")
    waiter.stdin.flush()
    assert waiter.stdout.readline().strip() == "sync=0"
    # The waiter holds the GPU (it waits on its stdin); the holder, which
    # was suspended for it, tears down now.
    assert [s["pid"] for s in status(e)["suspended"]] == [holder.pid]
    holder.stdin.write("teardown\n")
    holder.stdin.flush()
    out, err = waiter.communicate("quit\n", timeout=TIMEOUT)
    assert waiter.returncode == 0, err
    out, err = holder.communicate(timeout=TIMEOUT)
    assert holder.returncode == 0, err
    assert out.strip() == "teardown=0,0", (out, err)
    ev = events(e)
    journal.check_exclusive(ev)
    hp, wp = str(holder.pid), str(waiter.pid)
    ck = [x.t for x in ev if x["pid"] == hp and x["ev"] == "ckpt"][0]
    rs = [x.t for x in ev if x["pid"] == hp and x["ev"] == "restore"][0]
    # The holder's teardown (its context's end on the device) came after
    # its restore, and that after the waiter's last call.
    mine = [(x["ev"], x.t) for x in ev if x["pid"] == hp and x.t > ck]
    assert [k for k, _ in mine] == ["restore", "end"], mine
    assert rs > max(x.t for x in ev if x["pid"] == wp and x["ev"] == "tick")
    assert not status(e)["suspended"]


def test_no_waiter_no_suspension(env):
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    holder = start(e, job="alone")
    ready(holder)
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out
    assert not [x for x in events(e) if x["ev"] in ("ckpt", "restore")]


def test_never_when_zero(env):
    """GPUMUTEX_IDLE_SUSPEND_MS=0: the waiter waits for the holder's end."""
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="0")
    holder = start(e, job="h0")
    ready(holder)
    waiter = start(e, job="w0")
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out
    ev = events(e)
    journal.check_exclusive(ev)
    assert not [x for x in ev if x["ev"] in ("ckpt", "restore")]


@pytest.mark.parametrize("knob,why", [("FAKECUDA_CKPT=off", "nodriver"),
                                      ("FAKECUDA_CKPT_FAIL=checkpoint",
                                       "refused"),
                                      ("FAKECUDA_CKPT_FAIL=lock", "busy"),
                                      ("FAKECUDA_CKPT_FAIL=unsupported",
                                       "unsupported")])
def test_declined(env, knob, why):
    """The driver lacks the API, or refuses a step: nothing is suspended,
    a half-done checkpoint is undone (the holder's next call works), and
    the waiter is served after the holder's end."""
    k, v = knob.split("=")
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1", **{k: v})
    holder = start(e, job="hd")
    ready(holder)
    waiter = start(e, job="wd")
    # The holder publishes why it was not suspended (gpumutex status).
    act = os.path.join(e["GPUMUTEX_LOCK_DIR"], "job")
    seen = ""
    import time
    deadline = time.monotonic() + TIMEOUT
    while f"why={why}" not in seen and time.monotonic() < deadline:
        seen = ""
        for root, _, files in os.walk(act):
            for f in files:
                if f.split(".")[:2] == ["act", str(holder.pid)]:
                    with open(os.path.join(root, f)) as fh:
                        seen = fh.read()
    doc = status(e)
    lease = [x for x in doc["leases"] if x["job"] == "hd"][0]
    assert lease["suspend_declined"] == why
    assert lease["idle_s"] is not None and not doc["suspended"]
    assert f"not suspended: {why}" in status_text(e)
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    ev = events(e)
    journal.check_exclusive(ev)
    assert not [x for x in ev if x["ev"] in ("ckpt", "restore")]


@pytest.mark.parametrize("value", ["abc", "-1", "1e3", "", "86400001"])
def test_bad_setting_fails_closed(env, value):
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS=value)
    p = start(e, job="bad")
    out, err = p.communicate("", timeout=TIMEOUT)
    assert p.returncode != 0
    assert "GPUMUTEX_IDLE_SUSPEND_MS" in err


@pytest.mark.parametrize("how", ["flag", "env", "give_back"])
def test_gpumutex_run_refuses_bad_values(env, tmp_path, how):
    """A malformed millisecond setting is gpumutex-run's error (exit 2),
    before the command runs (GPUMUTEX_GIVE_BACK_MS=abc used to run it)."""
    from preloadlib import B
    marker = tmp_path / "ran"
    e = dict(env)
    args = [str(B / "gpumutex-run")]
    if how == "flag":
        args += ["--idle-suspend", "abc"]
    elif how == "env":
        e["GPUMUTEX_IDLE_SUSPEND_MS"] = "1e3"
    else:
        e["GPUMUTEX_GIVE_BACK_MS"] = "abc"
    r = subprocess.run(args + ["--", "touch", str(marker)], env=e,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 2, r.stderr
    assert "not valid" in r.stderr
    assert not marker.exists()


def test_gpumutex_run_sets_idle_suspend(env):
    from preloadlib import B
    r = subprocess.run([str(B / "gpumutex-run"), "--idle-suspend", "250",
                        "--", "sh", "-c", "echo $GPUMUTEX_IDLE_SUSPEND_MS"],
                       env=env, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "250"


def test_python_idle_suspend_ms():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..",
                                    "python"))
    import gpumutex
    e = gpumutex.environ(visible_devices="0", env={}, idle_suspend_ms=0)
    assert e["GPUMUTEX_IDLE_SUSPEND_MS"] == "0"
    for bad in ("abc", -1, 86400001):
        with pytest.raises(ValueError, match="idle_suspend_ms"):
            gpumutex.environ(visible_devices="0", env={},
                             idle_suspend_ms=bad)
    with pytest.raises(TypeError):
        gpumutex.environ(visible_devices="0", env={}, idle_suspend_ms=1.5)
    with pytest.raises(ValueError, match="GPUMUTEX_GIVE_BACK_MS"):
        gpumutex.environ(visible_devices="0",
                         env={"GPUMUTEX_GIVE_BACK_MS": "abc"})


# ---- Kills and calls at every step ----------------------------------------

def until_event(e, pred):
    """Follow the fake driver's journal until an event matches `pred`
    (the driver writes it when the step is reached; a hang fails by the
    guard, not by a timing assumption)."""
    import time
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            for x in journal.parse(e["FAKECUDA_JOURNAL"], complete_only=True):
                if pred(x):
                    return x
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    raise AssertionError("journal event never came")


def send(p, text):
    p.stdin.write(text)
    p.stdin.flush()


def test_kill_holder_while_suspended(env):
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    holder = start(e, job="kh")
    ready(holder)
    waiter = start(e, job="kw")
    ready(waiter)  # granted: the holder is suspended
    send(waiter, "go\n")
    assert waiter.stdout.readline().strip() == "sync=0"
    holder.kill()
    holder.wait()
    out, err = waiter.communicate("quit\n", timeout=TIMEOUT)
    assert waiter.returncode == 0, err
    third = start(e, job="kx")
    out, err = third.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    journal.check_exclusive(events(e))
    assert not status(e)["suspended"]


def test_waiter_killed_before_grant(env, tmp_path):
    gate = tmp_path / "go-on"
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1",
             FAKECUDA_CKPT_PAUSE=str(gate))
    holder = start(e, job="wh")
    ready(holder)
    waiter = start(e, job="ww")
    until_event(e, lambda x: x["ev"] == "ckpt-pause" and
                x["pid"] == str(holder.pid))
    waiter.kill()
    waiter.wait()
    gate.touch()
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    third = start(e, job="wx")
    out, err = third.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    journal.check_exclusive(events(e))


def test_member_killed_mid_checkpoint(env, tmp_path):
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1",
             FAKECUDA_CKPT_PAUSE=str(tmp_path / "never"))
    holder = start(e, job="mh")
    ready(holder)
    waiter = start(e, job="mw")
    until_event(e, lambda x: x["ev"] == "ckpt-pause" and
                x["pid"] == str(holder.pid))
    holder.kill()
    holder.wait()
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    journal.check_exclusive(events(e))


@pytest.mark.parametrize("step", ["lock", "locked", "checkpoint",
                                  "checkpointed"])
def test_calls_during_suspension(env, tmp_path, step):
    """Two threads of the holder call the driver while its helper thread
    is at `step` of suspending it: they wait, the waiter is served, and
    they resume after it, with no overlap in the journal."""
    gate = tmp_path / "go-on"
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1", FAKECUDA_CKPT_PAUSE=str(gate),
             FAKECUDA_CKPT_PAUSE_AT=step)
    holder = start(e, "threads", job="sh")
    ready(holder)
    waiter = start(e, job="sw")
    until_event(e, lambda x: x["ev"] == "ckpt-pause" and
                x["pid"] == str(holder.pid))
    send(holder, "go\n")
    gate.touch()
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    out, err = holder.communicate("quit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    ev = events(e)
    journal.check_exclusive(ev)
    kinds = [x["ev"] for x in ev if x["pid"] == str(holder.pid)]
    assert "ckpt" in kinds and "restore" in kinds


@pytest.mark.parametrize("step", ["restore", "restored", "unlock"])
def test_calls_during_resume(env, tmp_path, step):
    """The same while one thread resumes the holder: the other waits for
    the resume; a job that queued meanwhile waits for the holder."""
    gate = tmp_path / "go-on"
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1", FAKECUDA_CKPT_PAUSE=str(gate),
             FAKECUDA_CKPT_PAUSE_AT=step)
    holder = start(e, "threads", job="rh")
    ready(holder)
    waiter = start(e, job="rw")
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    send(holder, "go\n")
    until_event(e, lambda x: x["ev"] == "ckpt-pause" and
                x["pid"] == str(holder.pid))
    third = start(e, job="rx", **{})
    gate.touch()
    assert holder.stdout.readline().strip() == "sync=0"
    send(holder, "quit\n")
    holder.wait(timeout=TIMEOUT)
    out, err = third.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    journal.check_exclusive(events(e))


def test_two_members_of_one_job(env):
    """Both members checkpoint themselves; the lease goes to the waiter
    only then; both resume (the first queues, the second joins)."""
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    a = start(e, job="pair")
    ready(a)
    b = start(e, job="pair")
    ready(b)
    waiter = start(e, job="pw")
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    for p in (a, b):
        send(p, "go\n")
    for p in (a, b):
        out, err = p.communicate("quit\n", timeout=TIMEOUT)
        assert "sync=0" in out, err
    ev = events(e)
    journal.check_exclusive(ev)
    for p in (a, b):
        kinds = [x["ev"] for x in ev if x["pid"] == str(p.pid)]
        assert "ckpt" in kinds and "restore" in kinds


def test_declined_host_memory(env, tmp_path):
    """Device memory in use (NVML) that host memory would not hold: the
    holder is not suspended, and says why ("memory")."""
    from conftest import BUILD
    fake = os.path.join(BUILD, "tests", "fakenvml")
    if not os.path.exists(os.path.join(fake, "libnvidia-ml.so.1")):
        subprocess.run(["make", "-C", os.path.join(BUILD, ".."), "fakenvml"],
                       check=True, capture_output=True)
    nv = tmp_path / "nvml"
    nv.write_text(f"count 4\nmem 0 {1 << 52} {1 << 53}\n")
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1", FAKENVML_FILE=str(nv),
             LD_LIBRARY_PATH=env["LD_LIBRARY_PATH"] + ":" + fake)
    holder = start(e, job="mem")
    ready(holder)
    waiter = start(e, job="memw")
    import time
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:  # a guard against a hang only
        doc = status(e)
        lease = [x for x in doc["leases"] if x["job"] == "mem"]
        if lease and lease[0]["suspend_declined"] == "memory":
            break
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    assert not [x for x in events(e) if x["ev"] in ("ckpt", "restore")]


def test_stopped_member_keeps_the_lease(env):
    """A stopped holder never checkpoints (its helper thread cannot run):
    the waiter waits, and status says why."""
    import signal
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    holder = start(e, job="st")
    ready(holder)
    os.kill(holder.pid, signal.SIGSTOP)
    waiter = start(e, job="sw2")
    try:
        lease = [x for x in status(e)["leases"] if x["job"] == "st"][0]
        assert lease["suspend_declined"] == "stopped"
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    journal.check_exclusive(events(e))


def test_config_file_setting(env, tmp_path):
    """idle_suspend_ms in the configuration file (GPUMUTEX_CONFIG's file
    here) applies without the variable: the waiter is served while the
    holder idles (with the default, a minute, it would not be)."""
    conf = tmp_path / "gm.conf"
    conf.write_text("idle_suspend_ms = 1\n")
    conf.chmod(0o644)
    e = dict(env, GPUMUTEX_CONFIG=str(conf))
    holder = start(e, job="cf")
    ready(holder)
    waiter = start(e, job="cw")
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    kinds = [x["ev"] for x in events(e) if x["pid"] == str(holder.pid)]
    assert "ckpt" in kinds and "restore" in kinds


def test_resume_timeout_fails_that_call_only(env):
    """GPUMUTEX_TIMEOUT applies to a resume's wait: the call returns
    CUDA_ERROR_NO_DEVICE (100), the process stays suspended, and its next
    call, once the GPU is free, resumes it."""
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1", GPUMUTEX_TIMEOUT="0")
    holder = start(e, job="th")
    ready(holder)
    waiter = start(dict(e, GPUMUTEX_TIMEOUT="30"), job="tw")
    ready(waiter)
    send(waiter, "go\n")
    assert waiter.stdout.readline().strip() == "sync=0"
    send(holder, "go\n")
    assert holder.stdout.readline().strip() == "sync=100"
    out, err = waiter.communicate("quit\n", timeout=TIMEOUT)
    assert waiter.returncode == 0, err
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    journal.check_exclusive(events(e))


def test_ipc_user_is_declined(env):
    """A process that used CUDA IPC is not suspended (an importer's restore
    fails on the real driver): status says ipc, the waiter waits."""
    e = dict(env, GPUMUTEX_IDLE_SUSPEND_MS="1")
    holder = start(e, "ipc", job="ip")
    ready(holder)
    waiter = start(e, job="iw")
    import time
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:  # a guard against a hang only
        lease = [x for x in status(e)["leases"] if x["job"] == "ip"]
        if lease and lease[0]["suspend_declined"] == "ipc":
            break
    assert lease and lease[0]["suspend_declined"] == "ipc"
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert "sync=0" in out, err
    assert not [x for x in events(e) if x["ev"] in ("ckpt", "restore")]
