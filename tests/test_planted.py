"""Files planted by another user under every name the protocol uses.

User B (the planter) makes a symlink, a FIFO, a regular file or a
directory, with a restrictive or an open mode, under a name the protocol
uses: the lock directory itself, its subdirectories, queue/seq, a ticket's
name in queue/, a device file in dev/, and the names of a job's files in
job/. Then user A (the victim) and root claim with GPUMUTEX_TIMEOUT=0.
Each claim must either succeed or fail closed (exit 4) with a message that
names the file and its owner; it must never hang or fail silently.

Names the protocol never makes anyone depend on - tickets of other users,
job files - must not make a claim fail at all (docs/design.md, "Users and
permissions").
"""

import os
import shutil
import stat
import subprocess
import traceback

import pytest

import journal as J
import jobs
from conftest import BUILD

HOLDER = os.path.join(BUILD, "tests", "lease-holder")
pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root to play several users")
USER_A, USER_B, USER_C = 4301, 4302, 4303  # victim, planter, bystander

KINDS = ["symlink", "fifo600", "fifo644", "fifo666", "file600", "file644",
         "dir700", "dir755", "dir1777"]
VICTIMS = pytest.mark.parametrize("victim", [USER_A, None],
                                  ids=["user", "root"])




def as_user(uid, fn):
    """Run fn() in a child process that has become `uid`."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            fn()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "planting failed"


def plant(path, kind, uid=USER_B):
    """Make `path` a `kind` (see KINDS) owned by `uid`."""
    target = os.path.join(os.path.dirname(path), f".target-{uid}")

    def make():
        if kind == "symlink":
            if not os.path.exists(target):
                os.mkdir(target)
            os.symlink(target, path)
            return
        mode = int(kind.lstrip("abcdefghijklmnopqrstuvwxyz"), 8)
        if kind.startswith("fifo"):
            os.mkfifo(path)
        elif kind.startswith("file"):
            with open(path, "w") as f:
                f.write("gpumutex-lease 1\nlease=5eed\njob=x\nuid=1\n"
                        "devices=0\n")
        else:
            os.mkdir(path)
        os.chmod(path, mode)
    as_user(uid, make)


def claim(lockdir, journal, user, job="victim", devices="0,1"):
    env = jobs.job_env(lockdir, journal, devices=devices, want=1, job=job,
                       timeout=0)
    return subprocess.run([jobs.for_user(HOLDER, user)], env=env,
                          preexec_fn=jobs.as_user(user) if user else None,
                          capture_output=True, text=True,
                          timeout=jobs.HANG_GUARD)


def used_before(lockdir, journal):
    """A bystander (C) uses the directory first, so that it exists."""
    r = claim(lockdir, journal, USER_C, job="c")
    assert r.returncode == 0, r.stderr


def served_or_refused(r, name, uid=USER_B):
    """Success, or a failure that names the file and its owner."""
    if r.returncode == 0:
        return True
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert name in r.stderr and f"uid {uid}" in r.stderr, (
        f"the message does not name {name} and its owner uid {uid}: "
        f"{r.stderr.strip()}")
    return False


def ticket_name(seq, uid):
    return f"{seq:016x}.{uid}.99999.1.{3:016x}.old"


def next_ticket(lockdir, uid=USER_B):
    """The name of a ticket numbered where the counter stands, with the
    index link (queue/<seq:016x>) the protocol makes, planted by `uid`:
    so that claimants meet it on their walk down the queue instead of
    passing it by the queue's marks."""
    with open(os.path.join(lockdir, "queue", "seq")) as f:
        seq = int(f.readline(), 16)
    name = ticket_name(seq, uid)
    index = os.path.join(lockdir, "queue", f"{seq:016x}")
    as_user(USER_B, lambda: os.symlink(name, index))
    return name


@VICTIMS
@pytest.mark.parametrize("owner_in_name", ["planter", "victim"])
@pytest.mark.parametrize("kind", KINDS)
def test_planted_ticket_is_skipped(built, shared, kind, owner_in_name,
                                   victim):
    """Something named like an older ticket that the protocol did not make
    (wrong type, symlink, 0600, or not owned by the user its name says) is
    not a waiter: claims pass it, whoever they are."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    used_before(lockdir, journal)
    uid = USER_B if owner_in_name == "planter" else USER_A
    name = next_ticket(lockdir, uid)
    plant(os.path.join(lockdir, "queue", name), kind)
    for job in ("first", "second"):  # the second after the counter moved
        r = claim(lockdir, journal, victim, job=job)
        assert r.returncode == 0, r.stderr
    J.check_exclusive(J.parse(journal))


def test_planted_ticket_alive_is_waited_for(built, shared):
    """A ticket that is a 0644 FIFO of the user its name says, and locked,
    is a live waiter (whoever made it): it is not skipped."""
    import leaseadv as adv
    subprocess.run(["make", "-C", os.path.dirname(BUILD), "-s",
                    "build/tests/adversary"], check=True)
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    used_before(lockdir, journal)
    path = os.path.join(lockdir, "queue", next_ticket(lockdir))
    plant(path, "fifo644")
    held = adv.Held(path, 0, kind="wr", user=USER_B)
    assert held.ok
    r = claim(lockdir, journal, USER_A)
    held.release()
    assert r.returncode == 3, r.stderr  # waited behind it, gave up
    assert claim(lockdir, journal, USER_A).returncode == 0


JOB_NAMES = ["{a}-victim", "{a}-victim.lease", "{a}-victim.lease.tmp",
             "{a}"]


@VICTIMS
@pytest.mark.parametrize("name", JOB_NAMES,
                         ids=["jobfifo", "record", "record-tmp", "userdir"])
@pytest.mark.parametrize("kind", KINDS)
def test_planted_job_files_do_not_stop_a_claim(built, shared, kind, name,
                                               victim):
    """Another user's files under the names of the victim's job files (the
    job lock, the record and its temporary file, or the victim's own
    directory of job files) never make the victim's claim fail, nor its
    next process join a lease the planter described."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    used_before(lockdir, journal)
    uid = USER_A if victim else 0
    plant(os.path.join(lockdir, "job", name.format(a=uid)), kind)
    r = claim(lockdir, journal, victim)
    assert r.returncode == 0, r.stderr
    r = claim(lockdir, journal, victim)  # the same job again
    assert r.returncode == 0, r.stderr
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert not J.by_kind(ev, "join")


@VICTIMS
@pytest.mark.parametrize("kind", KINDS)
def test_planted_device_file(built, shared, kind, victim):
    """A device file planted before anyone used the GPU: claims succeed or
    fail closed naming dev/<i> and its owner."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    used_before(lockdir, journal)
    plant(os.path.join(lockdir, "dev", "5"), kind)
    served_or_refused(claim(lockdir, journal, victim, devices="5"), "dev/5")
    J.check_exclusive(J.parse(journal))


@VICTIMS
@pytest.mark.parametrize("kind", KINDS)
def test_planted_lock_directory(built, shared, kind, victim):
    """The lock directory itself planted before first use."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    plant(lockdir, kind)
    ok = served_or_refused(claim(lockdir, journal, victim), lockdir)
    if kind == "dir1777":
        assert ok  # a shared directory, whoever made it (docs/design.md)


@VICTIMS
@pytest.mark.parametrize("sub", ["dev", "queue", "job"])
@pytest.mark.parametrize("kind", KINDS)
def test_planted_subdirectory(built, shared, kind, sub, victim):
    """An empty shared lock directory (made by hand, as root): another
    user plants one of its subdirectories."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    os.mkdir(lockdir)
    os.chmod(lockdir, 0o1777)
    plant(os.path.join(lockdir, sub), kind)
    served_or_refused(claim(lockdir, journal, victim),
                      os.path.join(lockdir, sub))


@VICTIMS
@pytest.mark.parametrize("kind", KINDS)
def test_planted_counter(built, shared, kind, victim):
    """queue/seq planted in a queue/ made by hand."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    for d in (lockdir, os.path.join(lockdir, "queue")):
        os.mkdir(d)
        os.chmod(d, 0o1777)
    plant(os.path.join(lockdir, "queue", "seq"), kind)
    served_or_refused(claim(lockdir, journal, victim), "queue/seq")


def test_modes_after_first_use(built, shared):
    """A claim that makes the lock directory leaves it shared (1777) and
    its files as docs/design.md lists them."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    used_before(lockdir, journal)
    for sub in ("", "dev", "queue", "job"):
        st = os.lstat(os.path.join(lockdir, sub))
        assert stat.S_IMODE(st.st_mode) == 0o1777, sub


def start(lockdir, journal, user, job, **kw):
    env = jobs.job_env(lockdir, journal, devices="0", job=job)
    return jobs.start(HOLDER, env, user=user, **kw)


@pytest.mark.parametrize("damage", ["garbage\n", "ffffffffffffffff\n", ""],
                         ids=["garbage", "too-large", "empty"])
def test_damaged_counter_is_renumbered_in_order(built, shared, damage):
    """Any user can write to queue/seq (every claimant must). A damaged
    value no longer fails every claim until root removes the file: the
    next claim numbers on from the live tickets, so a waiter that queued
    before the damage is still served before one that queued after."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    holder = start(lockdir, journal, USER_C, "h", ready=True, hold=True)
    assert holder.ready()
    first = start(lockdir, journal, USER_A, "w1", waiting=True)
    assert first.waited()

    def spoil():
        with open(os.path.join(lockdir, "queue", "seq"), "w") as f:
            f.write(damage)
    as_user(USER_B, spoil)
    second = start(lockdir, journal, USER_A, "w2", waiting=True,
                   stderr=subprocess.PIPE)
    assert second.waited(), second.proc.stderr.read()
    holder.release()
    assert [j.wait() for j in (holder, first, second)] == [0, 0, 0]
    ev = J.parse(journal)
    J.check_exclusive(ev)
    assert [int(e["pid"]) for e in J.grants(ev)] == [
        holder.pid, first.pid, second.pid]


def test_private_subdirectory_left_by_a_crash_is_repaired(built, shared):
    """An older version, killed between making a subdirectory and widening
    it, left it 0700: every other user was refused for good. Its owner's
    next claim now repairs it (the lock directory around it is shared, so
    it is meant to be)."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    os.mkdir(lockdir)
    os.chmod(lockdir, 0o1777)
    plant(os.path.join(lockdir, "dev"), "dir700", uid=USER_A)
    r = claim(lockdir, journal, USER_B)
    assert not served_or_refused(r, os.path.join(lockdir, "dev"), USER_A)
    assert claim(lockdir, journal, USER_A).returncode == 0
    r = claim(lockdir, journal, USER_B)
    assert r.returncode == 0, r.stderr


def test_init_as_root_takes_the_directory_over(built, shared):
    """The first user to use the lock directory owns it and its device
    files, and could remove a device file while it is held. `gpumutex init`
    as root takes everything over (while in use): root's directories,
    dev/ closed to others, root's device files and counter. After it, the
    old owner cannot remove a device file, everybody still claims, and a
    GPU init was not told about fails closed with a message."""
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    held = start(lockdir, journal, USER_A, "a", ready=True, hold=True)
    assert held.ready()
    r = subprocess.run([os.path.join(BUILD, "gpumutex"), "init",
                        "--lock-dir", lockdir, "--visible-devices", "0,1"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = {"": (0o755, stat.S_IFDIR), "dev": (0o755, stat.S_IFDIR),
            "queue": (0o1777, stat.S_IFDIR), "job": (0o1777, stat.S_IFDIR),
            "dev/0": (0o666, stat.S_IFIFO), "dev/1": (0o666, stat.S_IFIFO),
            "queue/seq": (0o666, stat.S_IFREG)}
    for name, (mode, kind) in want.items():
        st = os.lstat(os.path.join(lockdir, name))
        assert (st.st_uid, stat.S_IMODE(st.st_mode),
                stat.S_IFMT(st.st_mode)) == (0, mode, kind), name
    dev0 = os.path.join(lockdir, "dev", "0")
    subprocess.run(["rm", "-f", dev0], preexec_fn=jobs.as_user(USER_A),
                   capture_output=True)
    assert os.path.exists(dev0), "the old owner removed a held device file"
    r = claim(lockdir, journal, USER_B)  # gets GPU 1
    assert r.returncode == 0, r.stderr
    held.release()
    assert held.wait() == 0
    r = claim(lockdir, journal, USER_B, devices="5")
    assert r.returncode == 4 and "dev/5" in r.stderr, r.stderr
    J.check_exclusive(J.parse(journal))


def test_probes_find_a_moved_job_directory(built, shared):
    """When another user took job/<uid>, the user's job files live in
    job/<uid>.<hex>; a launcher's probe (gm_job_probe in gpumutex-run, and
    the Python package's) finds the job's live lease there too."""
    from conftest import REPO
    lockdir, journal = os.path.join(shared, "locks"), os.path.join(
        shared, "journal")
    used_before(lockdir, journal)
    plant(os.path.join(lockdir, "job", str(USER_A)), "dir755")
    held = start(lockdir, journal, USER_A, "J", ready=True, hold=True)
    assert held.ready()
    assert os.path.basename(jobs.job_dir(lockdir, USER_A)) != str(USER_A)
    env = jobs.job_env(lockdir, journal, devices="0", job="J")
    r = subprocess.run([jobs.for_user(os.path.join(BUILD, "gpumutex-run"),
                                      USER_A), "--", "true"], env=env,
                       preexec_fn=jobs.as_user(USER_A), capture_output=True,
                       text=True, timeout=jobs.HANG_GUARD)
    assert r.returncode == 0 and "which holds GPU 0" in r.stderr, r.stderr
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from gpumutex import _job; print(_job.probe(sys.argv[2], 'J'))")
    shutil.copytree(os.path.join(REPO, "python", "gpumutex"),
                    os.path.join(shared, "py", "gpumutex"))
    r = subprocess.run(["/usr/bin/python3", "-c", code,
                        os.path.join(shared, "py"), lockdir],
                       preexec_fn=jobs.as_user(USER_A), capture_output=True,
                       text=True, timeout=jobs.HANG_GUARD)
    assert r.stdout.strip() == "('leased', [0])", r.stdout + r.stderr
    held.release()
    assert held.wait() == 0
