"""Containers share one queue: processes in different PID and mount
namespaces (unshare, as a container runtime makes them) that see one lock
directory, each through a bind mount at its own path (as a Docker volume
or a Kubernetes hostPath), exclude each other and are served in arrival
order, proven from the fake driver's journal; `gpumutex status` in
another namespace shows their leases and waiters without PIDs that would
name other processes there, and still shows command and user."""

import json
import os
import select
import subprocess

import pytest

import journal as J
from conftest import BUILD, fake_driver_env

LIB = os.path.join(BUILD, "libgpumutex.so")
PROBE = os.path.join(BUILD, "tests", "preload", "cuprobe")
GM = os.path.join(BUILD, "gpumutex")
HANG = 60  # against hangs only; nothing waits on time


def unshare_reason():
    if os.geteuid() != 0:
        return "needs root to make PID and mount namespaces"
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc",
                        "--mount", "--propagation", "private", "true"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "unshare of PID and mount namespaces is not permitted: " + r.stderr
    return None


pytestmark = pytest.mark.skipif(unshare_reason() is not None,
                                reason=str(unshare_reason()))


@pytest.fixture(scope="module")
def built():
    subprocess.run(["make", "-s", "-C", os.path.dirname(BUILD), "all",
                    "fakecuda", "preload-tests"], check=True)


def in_container(lockdir, view, argv):
    """argv as PID 1 of new PID and mount namespaces, seeing `lockdir` at
    `view` only (a bind mount made inside)."""
    os.makedirs(view, exist_ok=True)
    return ["unshare", "--pid", "--fork", "--mount-proc", "--mount",
            "--propagation", "private", "sh", "-c",
            'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
            lockdir, view, *argv]


def until(fd, needle, buf):
    """Read descriptor `fd` until a line holds `needle`; True, or False at
    EOF. `buf` keeps what was read past it."""
    while True:
        while b"\n" in buf[0]:
            line, buf[0] = buf[0].split(b"\n", 1)
            if needle in line:
                return True
        r, _, _ = select.select([fd], [], [], HANG)
        assert r, f"hung waiting for {needle!r}"
        chunk = os.read(fd, 4096)
        if not chunk:
            return False
        buf[0] += chunk


def test_namespaces_share_one_queue(built, tmp_path):
    lockdir = str(tmp_path / "locks")
    os.mkdir(lockdir)
    env = fake_driver_env(tmp_path, LD_PRELOAD=LIB, GPUMUTEX_VISIBLE_DEVICES="0",
                          GPUMUTEX_RECHECK_MS="0", GPUMUTEX_TIMEOUT="120")
    journal = env["FAKECUDA_JOURNAL"]

    def start(name, argv):
        view = str(tmp_path / f"view-{name}")
        e = dict(env, GPUMUTEX_LOCK_DIR=view, GPUMUTEX_JOB=name)
        return subprocess.Popen(in_container(lockdir, view, argv), env=e,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, bufsize=0)

    holder = start("holder", [PROBE, "hold"])
    assert until(holder.stdout.fileno(), b"ready 1", [b""]), "holder is not PID 1"
    waiters = []
    for name in ("second", "third"):
        w = start(name, [PROBE, "work", "1"])
        assert until(w.stderr.fileno(), b"waits for", [b""]), name
        waiters.append(w)
    # The waiters ran the real cuInit (the lease waits for their first
    # device call, docs/preload.md "When the lease is taken") but touched
    # no device.
    assert not [e for e in J.parse(journal) if e["ev"] in ("begin", "tick")
                and e.get("job") != "holder"], "a waiter used a device"

    # Seen from here (the host's namespaces) and from a third container.
    host = json.loads(subprocess.run(
        [GM, "status", "--json"], env=dict(env, GPUMUTEX_LOCK_DIR=lockdir),
        capture_output=True, text=True, check=True).stdout)
    view = str(tmp_path / "view-status")
    other = subprocess.run(in_container(lockdir, view, [GM, "status", "--json"]),
                           env=dict(env, GPUMUTEX_LOCK_DIR=view),
                           capture_output=True, text=True, check=True)
    text = subprocess.run(
        [GM, "status"], env=dict(env, GPUMUTEX_LOCK_DIR=lockdir),
        capture_output=True, text=True, check=True).stdout
    for st in (host, json.loads(other.stdout)):
        (lease,) = st["leases"]
        assert lease["job"] == "holder" and lease["user"] == "root"
        assert lease["pids"] == [] and lease["pids_hidden"] == 1, lease
        assert "cuprobe hold" in lease["command"]
        assert [w["job"] for w in st["queue"]] == ["second", "third"]
        for w in st["queue"]:
            assert w["pid"] is None and w["pid_visible"] is False, w
            assert w["user"] == "root"
    assert "(1 elsewhere)" in text and "(not visible from here)" in text, text
    # No PID at all: the holder's and the waiters' are 1 in their own
    # namespaces, which here is this machine's init.
    rows = [r.split() for r in text.splitlines() if r[:1].isdigit()]
    assert [r[3] for r in rows[:1]] == ["(1"] and all(
        r[1] == "elsewhere" for r in rows[1:]), text

    holder.stdin.close()
    holder.stdin = None
    for p in [holder] + waiters:
        p.communicate(timeout=HANG)
        assert p.returncode == 0
    ev = J.parse(journal)
    J.check_exclusive(ev)
    begins = [e["job"] for e in J.by_kind(ev, "begin")]
    assert begins == ["holder", "second", "third"], begins
    assert {e["pid"] for e in J.by_kind(ev, "begin")} == {"1"}  # PID 1 in each


def test_status_in_the_same_namespace_still_shows_pids(built, tmp_path):
    """The other side of the rule: in the holder's own namespace its PID
    is shown as before."""
    lockdir = str(tmp_path / "locks")
    env = fake_driver_env(tmp_path, LD_PRELOAD=LIB, GPUMUTEX_VISIBLE_DEVICES="0",
                          GPUMUTEX_LOCK_DIR=lockdir)
    h = subprocess.Popen([PROBE, "hold"], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    assert until(h.stdout.fileno(), b"ready", [b""])
    w = subprocess.Popen([PROBE, "work", "1"], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    assert until(w.stderr.fileno(), b"waits for", [b""])
    st = json.loads(subprocess.run([GM, "status", "--json"], env=env,
                                   capture_output=True, text=True,
                                   check=True).stdout)
    h.stdin.close()
    h.stdin = None
    h.communicate(timeout=HANG)
    w.communicate(timeout=HANG)
    (lease,) = st["leases"]
    assert lease["pids"] == [h.pid] and lease["pids_hidden"] == 0
    (q,) = st["queue"]
    assert q["pid"] == w.pid and q["pid_visible"] is True
    assert "cuprobe work 1" in q["command"]
