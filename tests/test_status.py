"""`gpumutex status` and `gpumutex init`, checked against jobs whose state
the test controls (holding, waiting), not against the core's word."""

import fcntl
import json
import os
import pty
import signal
import struct
import subprocess

import pytest

import jobs
import journal as J
from conftest import BUILD

GPUMUTEX = os.path.join(BUILD, "gpumutex")
HOLDER = os.path.join(BUILD, "tests", "lease-holder")


def status(lockdir, *args):
    return subprocess.run([GPUMUTEX, "status", "--lock-dir", lockdir, *args],
                          capture_output=True, text=True, timeout=60)


def test_status_shows_holders_and_queue(built, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0,1,2")
    big = jobs.start(HOLDER, dict(env, GPUMUTEX_NUM_DEVICES="2",
                                  GPUMUTEX_JOB="bigjob"), ready=True, hold=True)
    assert big.ready()
    small = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="smalljob"),
                       ready=True, hold=True)
    assert small.ready()
    w1 = jobs.start(HOLDER, dict(env, GPUMUTEX_NUM_DEVICES="3",
                                 GPUMUTEX_JOB="waitall"), waiting=True)
    assert w1.waited()
    w2 = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="waitone"), waiting=True)
    assert w2.waited()

    doc = json.loads(status(lockdir, "--json").stdout)
    assert doc["schema"] == "gpumutex.status/2" and doc["exists"]
    assert [d["state"] for d in doc["devices"]] == ["held"] * 3
    leases = {lease["lease"]: lease for lease in doc["leases"]}
    by_dev = {d["index"]: leases[d["lease"]] for d in doc["devices"]}
    assert by_dev[0]["job"] == by_dev[1]["job"] == "bigjob"
    assert by_dev[2]["job"] == "smalljob"
    assert by_dev[0]["pids"] == [big.pid]
    assert by_dev[2]["pids"] == [small.pid]
    assert "lease-holder" in by_dev[0]["command"]
    assert [(q["position"], q["pid"], q["job"], q["want"])
            for q in doc["queue"]] == [(1, w1.pid, "waitall", 3),
                                       (2, w2.pid, "waitone", 1)]
    assert all(q["devices"] == [0, 1, 2] for q in doc["queue"])

    text = status(lockdir)
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert any(line.split()[:3] == ["0", "held", "bigjob"] for line in lines)
    assert any(line.split()[:3] == ["2", "held", "smalljob"] for line in lines)
    assert "Queue (2 waiting" in text.stdout
    q = [line.split() for line in lines if line[:1].isdigit() and
         len(line.split()) > 5 and line.split()[1] == str(w1.pid)]
    assert q and q[0][0] == "1"

    for j in (big, small):
        j.release()
    for j in (big, small, w1, w2):
        assert j.wait() == 0
    # Everyone gone, and no `gpumutex init`: nobody manages GPUs here now.
    doc = json.loads(status(lockdir, "--json").stdout)
    assert doc["devices"] == [] and doc["unmanaged"] == [0, 1, 2]
    assert doc["queue"] == [] and doc["leases"] == []


def test_status_missing_dir_and_usage(built, tmp_path):
    missing = str(tmp_path / "nope")
    r = status(missing)
    assert r.returncode == 0 and "does not exist" in r.stdout
    assert json.loads(status(missing, "--json").stdout)["exists"] is False
    r = subprocess.run([GPUMUTEX, "status", "--bogus"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "--bogus" in r.stderr
    r = subprocess.run([GPUMUTEX, "frobnicate"], capture_output=True, text=True)
    assert r.returncode == 2
    for args in (["--help"], ["status", "--help"], ["init", "--help"]):
        r = subprocess.run([GPUMUTEX, *args], capture_output=True, text=True)
        assert r.returncode == 0 and "usage" in r.stdout.lower()
    r = subprocess.run([GPUMUTEX, "--help"], capture_output=True, text=True)
    for var in ("GPUMUTEX_VISIBLE_DEVICES", "GPUMUTEX_NUM_DEVICES",
                "GPUMUTEX_LOCK_DIR", "GPUMUTEX_TIMEOUT", "GPUMUTEX_QUIET"):
        assert var in r.stdout


def test_init_makes_devices(built, tmp_path):
    d = str(tmp_path / "locks")
    r = subprocess.run([GPUMUTEX, "init", "--lock-dir", d,
                        "--visible-devices", "0,1,3"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(os.path.join(d, "dev"))) == ["0", "1", "3"]
    doc = json.loads(status(d, "--json").stdout)
    assert [(x["index"], x["state"]) for x in doc["devices"]] == [
        (0, "free"), (1, "free"), (3, "free")]
    assert doc["pool"] == [0, 1, 3] and doc["unmanaged"] == []
    r = subprocess.run([GPUMUTEX, "init", "--lock-dir", d,
                        "--visible-devices", "0,,1"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "0,,1" in r.stderr


def test_init_takes_an_empty_variable_for_unset(built, tmp_path):
    """GPUMUTEX_VISIBLE_DEVICES="" is unset (as for the library): init asks
    for --visible-devices, and the flag then serves."""
    d = str(tmp_path / "locks")
    env = dict(os.environ, GPUMUTEX_VISIBLE_DEVICES="")
    r = subprocess.run([GPUMUTEX, "init", "--lock-dir", d], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--visible-devices LIST" in r.stderr
    assert not os.path.exists(d)
    r = subprocess.run([GPUMUTEX, "init", "--lock-dir", d,
                        "--visible-devices", "2"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.listdir(os.path.join(d, "dev")) == ["2"]


CLEAR = "\033[H\033[J"


def watch(lockdir, *args, stdout=subprocess.PIPE):
    return subprocess.Popen([GPUMUTEX, "status", "--watch", "--interval",
                             "0.05", "--lock-dir", lockdir, *args],
                            stdout=stdout)


def stop(p):
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=60) == 0


def test_status_watch_json_is_json_lines(built, lockdir, journal):
    """--json --watch writes one JSON document per line and nothing else
    (no terminal codes), each a full status; SIGINT ends it cleanly."""
    env = jobs.job_env(lockdir, journal, devices="0")
    holder = jobs.start(HOLDER, env, ready=True, hold=True)
    assert holder.ready()
    p = watch(lockdir, "--json")
    lines = [p.stdout.readline() for _ in range(3)]
    stop(p)
    holder.release()
    assert holder.wait() == 0
    for line in lines:
        assert line.endswith(b"\n") and b"\033" not in line, line
        doc = json.loads(line)
        assert doc["exists"] and doc["devices"][0]["state"] == "held"


def test_status_watch_text_in_a_pipe_has_no_codes(built, lockdir):
    """Text --watch into a pipe: each refresh follows the last after an
    empty line, without the clear-screen codes."""
    os.makedirs(lockdir)
    p = watch(lockdir)
    seen = b""
    while seen.count(b"gpumutex status: ") < 3:
        line = p.stdout.readline()
        assert line, f"status --watch ended early: {seen!r}"
        seen += line
    stop(p)
    assert b"\033" not in seen
    assert seen.count(b"\n\ngpumutex status: ") == 2, seen


def test_status_watch_on_a_terminal_redraws_in_place(built, lockdir):
    """On a terminal, text --watch clears the screen before each refresh
    (and --json --watch still writes bare JSON Lines)."""
    os.makedirs(lockdir)
    for args, want_clear, frame in (([], True, b"gpumutex status: "),
                                    (["--json"], False, b'{"schema": ')):
        master, slave = pty.openpty()
        p = watch(lockdir, *args, stdout=slave)
        os.close(slave)
        seen = b""
        while seen.count(frame) < 3:
            chunk = os.read(master, 4096)  # EIO once the program is gone
            assert chunk, f"status --watch ended early: {seen!r}"
            seen += chunk
        stop(p)
        os.close(master)
        assert (CLEAR.encode() in seen) == want_clear, seen
        if not want_clear:
            first = seen.split(b"\r\n")[0]  # the terminal's line ending
            assert json.loads(first)["lock_dir"] == lockdir


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")
def test_status_works_for_another_user(built, tmp_path):
    """Any user can read the state of another user's jobs."""
    import tempfile
    shared = tempfile.mkdtemp(prefix="gm-status-", dir="/tmp")
    try:
        os.chmod(shared, 0o1777)
        lockdir = os.path.join(shared, "locks")
        journal = os.path.join(shared, "journal")
        env = jobs.job_env(lockdir, journal, devices="0")
        holder = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="rootjob"),
                            ready=True, hold=True)
        assert holder.ready()
        r = subprocess.run([jobs.for_user(GPUMUTEX, 4301), "status",
                            "--json", "--lock-dir", lockdir],
                           capture_output=True, text=True,
                           preexec_fn=jobs.as_user(4301), timeout=60)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["devices"][0]["state"] == "held"
        assert doc["leases"][0]["job"] == "rootjob"
        holder.release()
        assert holder.wait() == 0
    finally:
        subprocess.run(["rm", "-rf", shared])


# ---- flags ------------------------------------------------------------------

RUN = os.path.join(BUILD, "gpumutex-run")


def gm(args, env=None, **kw):
    return subprocess.run([GPUMUTEX, *args], capture_output=True, text=True,
                          timeout=60, env=env, **kw)


@pytest.mark.parametrize("sub", ["status", "init"])
def test_lock_dir_must_be_absolute(built, tmp_path, sub):
    """status refuses a relative lock directory as init (and run) do, from
    the flag or the variable, with the same message naming where it came
    from; an empty variable is unset."""
    extra = ["--visible-devices", "0"] if sub == "init" else []
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUMUTEX_")}
    for args, e, name in (
            (["--lock-dir", "rel/dir"], env, "--lock-dir"),
            (["--lock-dir=rel/dir"], env, "--lock-dir"),
            ([], dict(env, GPUMUTEX_LOCK_DIR="rel/dir"), "GPUMUTEX_LOCK_DIR")):
        r = gm([sub, *args, *extra], env=e, cwd=tmp_path)
        assert r.returncode == 2, r
        assert r.stderr == (f'gpumutex {sub}: {name}="rel/dir" is not usable; '
                            "expected an absolute directory path of at most "
                            '4031 bytes such as "/tmp/libgpumutex"\n')
        assert r.stdout == ""
    assert not (tmp_path / "rel").exists()
    r = gm(["status", "--json"], env=dict(env, GPUMUTEX_LOCK_DIR=""))
    assert r.returncode == 0
    assert json.loads(r.stdout)["lock_dir"] == "/tmp/libgpumutex"


@pytest.mark.parametrize("value", ["0", "0.0", "-1", "inf", "1e3", "86401",
                                   "86400.5", "x", ""])
def test_interval_range_matches_the_help(built, lockdir, value):
    """A refused --interval states the range the help gives."""
    help_text = gm(["status", "--help"]).stdout
    assert "above 0 and\n                  at most 86400" in help_text
    for args in (["--interval", value], [f"--interval={value}"]):
        r = gm(["status", "--lock-dir", lockdir, *args])
        assert r.returncode == 2, r
        assert r.stderr == (f'gpumutex status: --interval="{value}" is not '
                            "valid; expected seconds above 0 and at most "
                            "86400 as a plain decimal number such as \"1\" "
                            'or "0.5"\n')


def test_init_help_shows_visible_devices_required(built):
    out = gm(["init", "--help"]).stdout
    usage = out.splitlines()[0]
    assert usage == ("usage: gpumutex init [--lock-dir DIR] "
                     "--visible-devices LIST")
    assert "required" in out


def env_of(r):
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines()
                if "=" in line)


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_every_value_flag_takes_both_forms(built, tmp_path, form):
    """--flag VALUE and --flag=VALUE mean the same for every flag of every
    subcommand."""
    def f(name, value):
        return [name, value] if form == "separate" else [f"{name}={value}"]

    d = str(tmp_path / "locks")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUMUTEX_")}
    # init: --lock-dir, --visible-devices
    r = gm(["init", *f("--lock-dir", d), *f("--visible-devices", "1,2")],
           env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(os.path.join(d, "dev"))) == ["1", "2"]
    # status: --lock-dir, --interval
    r = gm(["status", "--json", *f("--lock-dir", d), *f("--interval", "0.5")],
           env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["lock_dir"] == d
    # run (both programs): every flag
    for prog in ([RUN], [GPUMUTEX, "run"]):
        r = subprocess.run([*prog, *f("--visible-devices", "1,2"),
                            *f("--num-devices", "2"), *f("--lock-dir", d),
                            *f("--timeout", "7"), "--", "env"],
                           capture_output=True, text=True, env=env,
                           timeout=60)
        seen = env_of(r)
        assert (seen["GPUMUTEX_VISIBLE_DEVICES"], seen["GPUMUTEX_NUM_DEVICES"],
                seen["GPUMUTEX_LOCK_DIR"], seen["GPUMUTEX_TIMEOUT"]) == (
                    "1,2", "2", d, "7")


def test_run_quiet_takes_a_value_after_equals(built, tmp_path):
    """--quiet is GPUMUTEX_QUIET=1; --quiet=1 and --quiet=0 set that value
    (overriding the variable); anything else is a usage error."""
    env = dict({k: v for k, v in os.environ.items()
                if not k.startswith("GPUMUTEX_")},
               GPUMUTEX_VISIBLE_DEVICES="0",
               GPUMUTEX_LOCK_DIR=str(tmp_path / "locks"))
    for args, expect in ((["--quiet"], "1"), (["--quiet=1"], "1"),
                         (["--quiet=0"], "0")):
        for base in ("0", "1"):
            r = subprocess.run([RUN, *args, "--", "env"], capture_output=True,
                               text=True, env=dict(env, GPUMUTEX_QUIET=base),
                               timeout=60)
            assert env_of(r)["GPUMUTEX_QUIET"] == expect, (args, base)
    for bad in ("yes", "", "false", "2"):
        r = subprocess.run([RUN, f"--quiet={bad}", "--", "true"],
                           capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 2
        assert f'--quiet="{bad}" is not valid; expected 1' in r.stderr


# ---- lease ids --------------------------------------------------------------

def test_lease_ids_are_strings_of_the_journal_ids(built, lockdir, journal):
    """Each lease id in the JSON is a string holding the very number the
    job holds (lease-holder journals it), in devices[] and leases[]."""
    env = jobs.job_env(lockdir, journal, devices="0,1")
    h = jobs.start(HOLDER, dict(env, GPUMUTEX_NUM_DEVICES="2"), ready=True,
                   hold=True)
    assert h.ready()
    doc = json.loads(status(lockdir, "--json").stdout)
    h.release()
    assert h.wait() == 0
    begun = {e["lease"] for e in J.parse(journal) if e["ev"] == "begin"}
    assert len(begun) == 1
    assert [lease["lease"] for lease in doc["leases"]] == list(begun)
    assert [d["lease"] for d in doc["devices"]] == list(begun) * 2


class OfdLock:
    """A one-byte open-file-description read lock, as a lease member holds
    it, taken by this test process on `path`."""

    def __init__(self, path, offset):
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        lk = struct.pack("hhxxxxqqi4x", fcntl.F_RDLCK, os.SEEK_SET, offset,
                         1, 0)
        fcntl.fcntl(self.fd, getattr(fcntl, "F_OFD_SETLK", 37), lk)

    def close(self):
        os.close(self.fd)


def test_lease_id_above_2_53_survives_a_double_reader(built, lockdir):
    """The largest lease id there can be (2^61 - 1), made by hand the way a
    member holds it, comes out digit for digit, and a reader that parses
    numbers as doubles (jq, JavaScript) still sees it exactly."""
    lease = (1 << 61) - 1
    r = subprocess.run([GPUMUTEX, "init", "--lock-dir", lockdir,
                        "--visible-devices", "0"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(lockdir, "job", f"{os.geteuid()}-big.lease"),
              "w") as f:
        f.write(f"gpumutex-lease 1\nlease={lease:x}\njob=big\n"
                f"uid={os.geteuid()}\ndevices=0\nstart=1\npid={os.getpid()}\n"
                f"cmd=by hand\nmember={os.getpid()}\n")
    dev = os.path.join(lockdir, "dev", "0")
    locks = [OfdLock(dev, 0), OfdLock(dev, 1 + lease)]
    try:
        out = status(lockdir, "--json").stdout
    finally:
        for lk in locks:
            lk.close()
    doc = json.loads(out, parse_int=float)  # numbers as doubles
    assert doc["leases"][0]["lease"] == str(lease) == "2305843009213693951"
    assert doc["devices"][0] == {"index": 0, "state": "held",
                                 "lease": str(lease)}


# ---- which devices are listed ------------------------------------------------

def test_status_lists_only_devices_managed_now(built, lockdir, journal):
    """Device files outlive the jobs that made them. A GPU is listed while
    it is held, or a live waiter or lease has it among its candidates, or
    `gpumutex init` declared it; the others are only named as unmanaged
    (in the text, below the table)."""
    env = jobs.job_env(lockdir, journal, devices="0,1,2,3")
    assert jobs.start(HOLDER, env).wait() == 0  # made dev/0..3, then left
    doc = json.loads(status(lockdir, "--json").stdout)
    assert doc["devices"] == [] and doc["unmanaged"] == [0, 1, 2, 3]
    text = status(lockdir).stdout
    assert "No GPU is managed here now" in text
    assert "Not listed: GPUs 0,1,2,3" in text

    # A lease of a job managing 0,1: both listed (1 free), not 2 and 3.
    h = jobs.start(HOLDER, dict(env, GPUMUTEX_VISIBLE_DEVICES="0,1",
                                GPUMUTEX_JOB="small"), ready=True, hold=True)
    assert h.ready()
    doc = json.loads(status(lockdir, "--json").stdout)
    assert [(d["index"], d["state"]) for d in doc["devices"]] == [
        (0, "held"), (1, "free")]
    assert doc["unmanaged"] == [2, 3]
    assert doc["leases"][0]["candidates"] == [0, 1]
    text = status(lockdir).stdout
    assert [line.split()[:2] for line in text.splitlines()
            if line[:1].isdigit()] == [["0", "held"], ["1", "free"]]
    assert "Not listed: GPUs 2,3 " in text

    # A waiter whose candidates include 3: listed while it waits.
    w = jobs.start(HOLDER, dict(env, GPUMUTEX_VISIBLE_DEVICES="0,3",
                                GPUMUTEX_NUM_DEVICES="2",
                                GPUMUTEX_JOB="wide"), waiting=True)
    assert w.waited()
    doc = json.loads(status(lockdir, "--json").stdout)
    assert [d["index"] for d in doc["devices"]] == [0, 1, 3]
    assert doc["unmanaged"] == [2]
    h.release()
    assert h.wait() == 0 and w.wait() == 0

    # gpumutex init declares the pool: listed while nobody runs, and a
    # later init replaces it.
    for pool, listed, unmanaged in (("1,2", [1, 2], [0, 3]),
                                    ("3", [3], [0, 1, 2])):
        r = subprocess.run([GPUMUTEX, "init", "--lock-dir", lockdir,
                            "--visible-devices", pool], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        doc = json.loads(status(lockdir, "--json").stdout)
        assert [(d["index"], d["state"]) for d in doc["devices"]] == [
            (i, "free") for i in listed]
        assert doc["pool"] == listed and doc["unmanaged"] == unmanaged
