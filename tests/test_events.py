"""The event log (src/lease/events.c, read back by src/cli/evlog.c):
complete under concurrent writers and kills, per-user and unforgeable,
refusing planted files, bounded by rotation (docs/report.md)."""

import json
import os
import random
import signal
import subprocess

import jobs
import journal as J
from conftest import BUILD

GPUMUTEX = os.path.join(BUILD, "gpumutex")
HOLDER = os.path.join(BUILD, "tests", "lease-holder")


def gm(*args, env=None, user=None, check=True):
    p = subprocess.run([jobs.for_user(GPUMUTEX, user)] + list(args),
                       env=env, capture_output=True, text=True, timeout=120,
                       preexec_fn=jobs.as_user(user) if user else None)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def log_json(lockdir, *args):
    out = gm("log", "--json", "--lock-dir", lockdir, *args).stdout
    return [json.loads(line) for line in out.splitlines()]


def log_lines(lockdir, uid=None):
    d = jobs.job_dir(lockdir, uid)
    lines = []
    for name in ("events.log.1", "events.log"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            with open(p) as f:
                lines += f.read().split("\n")[:-1]
    return lines


def test_concurrent_writers_with_kills(built, lockdir, journal):
    """Many jobs at once on two GPUs, some killed while waiting or while
    holding: no torn line; every grant the jobs saw has exactly one
    record and every lease exactly one end; the report's leased time per
    GPU is the sum of its leases; each exact end lies between the last
    use the holder journaled and the next holder's first use."""
    rnd = random.Random(14)
    env = jobs.job_env(lockdir, journal, devices="0,1")
    n = 120
    started = []
    for i in range(n):
        started.append(jobs.start(HOLDER, env, ["--ticks", "3", "--tick-us", "300"],
                                  ready=True))
    killed = set()
    # Kill a fifth of them, each once it holds its lease (the moment it
    # is killed after that is left to chance) or before (still waiting).
    for i, j in enumerate(started[:-10]):
        if rnd.random() < 0.1:
            os.kill(j.pid, signal.SIGKILL)
            killed.add(j.pid)
        elif rnd.random() < 0.12 and j.ready():
            os.kill(j.pid, signal.SIGKILL)
            killed.add(j.pid)
    for j in started:
        rc = j.wait()
        assert rc == 0 or (j.pid in killed and rc == -signal.SIGKILL), rc
    ev = J.parse(journal)
    J.check_exclusive(ev)

    lines = log_lines(lockdir)
    assert lines and all(line.startswith("gm1 ") for line in lines), \
        [line for line in lines if not line.startswith("gm1 ")][:3]
    records = log_json(lockdir)
    grants = [r for r in records if r["ev"] == "grant"]
    ends = [r for r in records if r["ev"] == "end"]
    assert len(lines) == len([r for r in records if r["ev"] != "end"])
    # Every grant a job saw (its journal's grant line) has exactly one record.
    seen = {int(e["pid"]) for e in J.by_kind(ev, "grant")}
    by_pid = {}
    for g in grants:
        by_pid.setdefault(g["pid"], []).append(g)
    for pid in seen:
        # A job killed between its grant and the record (written once the
        # ticket is gone, to keep hand-offs short) leaves none: its lease
        # lasted no longer than that gap. Every other grant has its record.
        n = len(by_pid.get(pid, []))
        assert n == 1 or (pid in killed and n == 0), (pid, by_pid.get(pid))
    assert all(len(v) == 1 for v in by_pid.values())
    # Every lease has exactly one end, none of them still live.
    lease_ids = [g["lease"] for g in grants]
    assert sorted(lease_ids) == sorted(e["lease"] for e in ends)
    assert len(set(lease_ids)) == len(lease_ids)

    rep = json.loads(gm("report", "--json", "--lock-dir", lockdir,
                        "--since", "1h").stdout)
    leases = rep["leases"]
    assert {x["lease"] for x in leases} == set(lease_ids)
    for gpu in rep["gpus"]:
        mine = [x for x in leases if gpu["index"] in x["devices"]]
        total = sum(x["end"] - x["start"] for x in mine)
        # Each printed start and end is rounded to the microsecond, so the
        # sum of n printed lengths may differ from the exact total by up to
        # n microseconds (plus one for the total's own rounding).
        assert abs(gpu["leased_s"] - total) <= 1e-6 * (len(mine) + 1), (gpu, total)
        assert gpu["jobs"] == sum(gpu["index"] in x["devices"] for x in leases)

    # Against the journal (CLOCK_MONOTONIC, as the records' mono).
    points = {}
    for e in ev:
        if e["ev"] in ("begin", "tick", "end"):
            points.setdefault(int(e["pid"]), []).append((e.t, int(e["dev"])))
    starts = {}
    for x in leases:
        pts = points.get(x["pid"], [])
        if pts:
            # The lease covers every use the job journaled.
            assert x["start_mono"] <= min(t for t, _ in pts)
            if x["exact"]:
                assert x["end_mono"] >= max(t for t, _ in pts), x
        starts.setdefault(x["devices"][0], []).append(
            (min((t for t, _ in pts), default=None), x))
    for dev, v in starts.items():
        v.sort(key=lambda p: p[1]["start_mono"])
        for (_, a), (first_use, b) in zip(v, v[1:]):
            # It ended before the next holder's first use of the GPU.
            if first_use is not None:
                assert a["end_mono"] <= first_use, (a, b)
    # Killed holders' ends are known exactly when someone was waiting
    # (the successor's wake-up); the last ones exited normally.
    hows = {x["end_how"] for x in leases}
    assert hows <= {"woken", "exit", "next-grant", "last-seen"}, hows
    assert "woken" in hows


def test_waits_timeouts_and_joins_are_recorded(built, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0")
    holder = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="holder"), ready=True,
                        hold=True)
    assert holder.ready()
    joiner = subprocess.run([HOLDER], env=dict(env, GPUMUTEX_JOB="holder"),
                            timeout=60)
    assert joiner.returncode == 0
    late = subprocess.run([HOLDER], env=dict(env, GPUMUTEX_JOB="late",
                                             GPUMUTEX_TIMEOUT="0.05"),
                          capture_output=True, timeout=60)
    assert late.returncode == 3
    waiter = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="waiter"), waiting=True)
    assert waiter.waited()
    holder.release()
    assert holder.wait() == 0 and waiter.wait() == 0
    rec = log_json(lockdir)
    kinds = [(r["ev"], r["job"]) for r in rec]
    assert ("join", "holder") in kinds
    assert ("wait", "late") in kinds and ("giveup", "late") in kinds
    give = [r for r in rec if r["ev"] == "giveup"][0]
    assert give["why"] == "timeout" and give["waited"] >= 0.05
    w = [r for r in rec if r["ev"] == "grant" and r["job"] == "waiter"][0]
    assert w["queued"] and w["place"] == 0
    # The holder's end: its successor was woken by it.
    end = [r for r in rec if r["ev"] == "end" and r["job"] == "holder"][0]
    assert end["how"] == "woken" and end["exact"]
    assert [r["job"] for r in log_json(lockdir, "--job", "late")] == \
        ["late", "late"]
    assert log_json(lockdir, "--user", "4999") == []
    text = gm("log", "--lock-dir", lockdir).stdout
    assert "gives up (timeout)" in text and "joins the job's lease" in text


def test_log_off(built, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0",
                       extra={"GPUMUTEX_LOG": "0"})
    assert subprocess.run([HOLDER], env=env, timeout=60).returncode == 0
    assert not os.path.exists(os.path.join(jobs.job_dir(lockdir), "events.log"))


def test_other_users_cannot_forge_or_erase(built, shared_tmp):
    lockdir = os.path.join(shared_tmp, "locks")
    journal = os.path.join(shared_tmp, "journal")
    env = jobs.job_env(lockdir, journal, devices="0")
    a = subprocess.run([jobs.for_user(HOLDER, 4001)], env=env,
                       preexec_fn=jobs.as_user(4001), timeout=60)
    assert a.returncode == 0
    alog = os.path.join(jobs.job_dir(lockdir, 4001), "events.log")
    st = os.stat(alog)
    assert st.st_uid == 4001 and st.st_mode & 0o777 == 0o644
    before = open(alog).read()
    # Another user can read it, but not write, truncate, remove or
    # replace it.
    attack = r"""
import os, sys
p = sys.argv[1]
open(p).read()
for f in (lambda: open(p, "a").write("gm1 grant forged\n"),
          lambda: os.truncate(p, 0), lambda: os.unlink(p),
          lambda: os.rename(p, p + ".x"),
          lambda: open(os.path.join(os.path.dirname(p), "events.log.1"), "w")):
    try:
        f()
    except PermissionError:
        continue
    sys.exit("allowed")
"""
    r = subprocess.run(["/usr/bin/python3", "-c", attack, alog],
                       preexec_fn=jobs.as_user(4002), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr + r.stdout
    assert open(alog).read() == before
    # Records in B's own log that claim to be A's are not believed.
    b = subprocess.run([jobs.for_user(HOLDER, 4002)], env=env,
                       preexec_fn=jobs.as_user(4002), timeout=60)
    assert b.returncode == 0
    blog = os.path.join(jobs.job_dir(lockdir, 4002), "events.log")
    forged = open(blog).readline().replace("uid=4002", "uid=4001")
    subprocess.run(["/usr/bin/python3", "-c",
                    f"open({blog!r}, 'a').write({forged!r})"],
                   preexec_fn=jobs.as_user(4002), check=True)
    uids = [r["uid"] for r in log_json(lockdir) if r["ev"] == "grant"]
    assert sorted(uids) == [4001, 4002]


def test_planted_symlink_or_fifo_is_refused(built, lockdir, journal, tmp_path):
    env = jobs.job_env(lockdir, journal, devices="0")
    assert subprocess.run([HOLDER], env=env, timeout=60).returncode == 0
    d = jobs.job_dir(lockdir)
    log = os.path.join(d, "events.log")
    target = tmp_path / "target"
    target.write_text("")
    os.unlink(log)
    os.symlink(target, log)
    # The claim goes on (nothing written through the link) ...
    assert subprocess.run([HOLDER], env=env, timeout=60).returncode == 0
    assert target.read_text() == ""
    # ... and the reader says what it refused.
    p = gm("log", "--lock-dir", lockdir)
    assert "events.log: a symbolic link, not a log file; refused" in p.stderr
    os.unlink(log)
    os.mkfifo(log, 0o644)
    # No hang: not the claim (O_NONBLOCK), not the reader.
    assert subprocess.run([HOLDER], env=env, timeout=60).returncode == 0
    p = gm("log", "--lock-dir", lockdir)
    assert "events.log: not a regular file of user 0 (a FIFO" in p.stderr
    p = gm("report", "--lock-dir", lockdir)
    assert "refused" in p.stderr


def test_rotation_bounds_the_log(built, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0",
                       extra={"GPUMUTEX_LOG_MAX": "4096"})
    for _ in range(40):
        assert subprocess.run([HOLDER], env=env, timeout=60).returncode == 0
    d = jobs.job_dir(lockdir)
    names = sorted(n for n in os.listdir(d) if n.startswith("events"))
    assert names == ["events.log", "events.log.1"]
    for n in names:
        assert os.path.getsize(os.path.join(d, n)) <= 4096 + 1024
    # What is left is whole records, the newest ones.
    recs = log_json(lockdir)
    assert recs and all(r["ev"] in ("grant", "exit", "end") for r in recs)


def open_files(pid):
    fds = os.path.join("/proc", str(pid), "fd")
    return {os.readlink(os.path.join(fds, n)) for n in os.listdir(fds)}


def test_claim_opens_its_log_before_it_waits(built, lockdir, journal):
    """The grant's record costs no open on the hand-off path: a waiter
    has its log open while it sleeps in line (and only then), and its
    grant is recorded even when the file it opened was rotated away
    meanwhile (once, below the limit: the record is in events.log.1;
    twice: that file is gone, so the record goes to a new events.log)."""
    env = jobs.job_env(lockdir, journal, devices="0")
    d = jobs.job_dir(lockdir)
    log, old = os.path.join(d, "events.log"), os.path.join(d, "events.log.1")
    for rotations in (1, 2):
        holder = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="h%d" % rotations),
                            ready=True, hold=True)
        assert holder.ready()
        job = "w%d" % rotations
        waiter = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB=job), waiting=True,
                            ready=True, hold=True)
        assert waiter.waited()
        assert log in open_files(waiter.pid)
        for _ in range(rotations):
            os.rename(log, old)
            with open(log, "a"):
                pass
            os.chmod(log, 0o644)
        holder.release()
        assert holder.wait() == 0 and waiter.ready()
        # Held now: the one log descriptor left is the lease's, for its
        # exit record (below): the file its grant record went to.
        assert [f for f in open_files(waiter.pid) if "events.log" in f] == \
            [old if rotations == 1 else log]
        waiter.release()
        assert waiter.wait() == 0
        grants = [r for r in log_json(lockdir)
                  if r["ev"] == "grant" and r["job"] == job]
        assert len(grants) == 1
        where = old if rotations == 1 else log
        assert any(" grant " in line and (" job=%s " % job) in line
                   for line in open(where).read().splitlines()), where


def cloexec(pid, path):
    fds = os.path.join("/proc", str(pid), "fd")
    for n in os.listdir(fds):
        if os.readlink(os.path.join(fds, n)) == path:
            with open(os.path.join("/proc", str(pid), "fdinfo", n)) as f:
                flags = [l for l in f if l.startswith("flags:")][0]
            return bool(int(flags.split()[1], 8) & 0o2000000)
    raise AssertionError(path + " not open in %d" % pid)


def test_exit_record_goes_through_the_leases_descriptor(built, lockdir, journal):
    """The exit record costs the hand-off no open and no path lookup: the
    log descriptor the claim opened is the lease's while it is held
    (close-on-exec, like the lease's own), and the destructor writes the
    record through it. Observable: the file is renamed to events.log.1
    (a rotation, below the limit) while the lease is held, and the exit
    record is in the file the descriptor names, not in a new events.log."""
    env = jobs.job_env(lockdir, journal, devices="0")
    d = jobs.job_dir(lockdir)
    log, old = os.path.join(d, "events.log"), os.path.join(d, "events.log.1")
    holder = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="x"), ready=True,
                        hold=True)
    assert holder.ready()
    assert [f for f in open_files(holder.pid) if "events.log" in f] == [log]
    assert cloexec(holder.pid, log)
    os.rename(log, old)
    with open(log, "a"):
        pass
    os.chmod(log, 0o644)
    holder.release()
    assert holder.wait() == 0
    exits = [r for r in log_json(lockdir) if r["ev"] == "exit"]
    assert len(exits) == 1 and exits[0]["job"] == "x"
    assert [l for l in open(old).read().splitlines() if l.startswith("gm1 exit ")]
    assert open(log).read() == ""
    # The record is whole and says what the path-written one said.
    grant = [r for r in log_json(lockdir) if r["ev"] == "grant"][0]
    assert exits[0]["lease"] == grant["lease"]
    assert exits[0]["pid"] == holder.pid and exits[0]["uid"] == os.geteuid()
    line = [l for l in open(old).read().splitlines() if l.startswith("gm1 exit ")][0]
    g = [l for l in open(old).read().splitlines() if l.startswith("gm1 grant ")][0]
    same = [f for f in g.split() if f.startswith(("lease=", "dev="))]
    assert line.endswith(" job=x " + " ".join(same)), (line, g)
