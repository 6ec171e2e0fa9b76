"""What the adversarial tests of the lease core share:
test_lease_adversarial.py (the bug tests, one defect each) and
test_lease_contention.py (contention that must keep passing), and
test_planted.py and tests/stress: the test programs, the `bug` and `ROOT`
markers, the users they play, a lock held by tests/lease/adversary.c
(Held), and the journal checks of ticket order and of one lease per job.
The test modules import the `adv` fixture by name."""

import collections
import os
import subprocess

import pytest

import journal as J
import jobs
from conftest import BUILD, REPO


HOLDER = os.path.join(BUILD, "tests", "lease-holder")
HOLDER_SAN = os.path.join(BUILD, "tests", "lease-holder-san")
BOTH = pytest.mark.parametrize("holder", [HOLDER, HOLDER_SAN],
                               ids=["plain", "asan"])
ADV = os.path.join(BUILD, "tests", "adversary")


def bug(reason):
    """A test that demonstrates a known defect of the core: expected to
    fail (strictly: once the core is fixed it passes, and the marker must
    go). GM_SHOW_BUGS=1 runs them as plain tests, to see the failures."""
    return pytest.mark.xfail(os.environ.get("GM_SHOW_BUGS") != "1",
                             strict=True, raises=AssertionError,
                             reason="bug: " + reason)


ROOT = pytest.mark.skipif(os.geteuid() != 0,
                          reason="needs root to play several users")
USER_A, USER_C, USER_B = 4101, 4102, 4103  # victim, bystander, attacker


@pytest.fixture(scope="module")
def adv(built):
    subprocess.run(["make", "-C", REPO, "-s", "build/tests/adversary"],
                   check=True)
    return ADV


def ls(lockdir, sub):
    """The files in a subdirectory; for "job", in our job directory."""
    p = jobs.job_dir(lockdir) if sub == "job" else os.path.join(lockdir, sub)
    return sorted(os.listdir(p)) if os.path.isdir(p) else []


def named(files):
    """Without the temporary names (.tmp.*) that a claim killed while it
    held the counter lock leaves (harmless; its user removes them later)."""
    return [f for f in files if not f.startswith(".tmp.")]


class Held:
    """adversary lock: a one-byte OFD lock held until release()."""

    def __init__(self, path, offset, kind="rd", user=None):
        ready_r, ready_w = os.pipe()
        wait_r, self._wait_w = os.pipe()
        self.proc = subprocess.Popen(
            [jobs.for_user(ADV, user), "lock", path, str(offset), kind,
             str(ready_w), str(wait_r)],
            pass_fds=[ready_w, wait_r],
            preexec_fn=jobs.as_user(user) if user else None)
        os.close(ready_w)
        os.close(wait_r)
        os.set_inheritable(self._wait_w, False)
        with os.fdopen(ready_r, "rb", buffering=0) as f:
            self.ok = f.read(1) == b"r"

    def release(self):
        if self._wait_w is not None:
            os.close(self._wait_w)
            self._wait_w = None
        return self.proc.wait(timeout=jobs.HANG_GUARD)


def record_lease(lockdir, uid, job):
    with open(jobs.job_file(lockdir, job, ".lease", uid=uid)) as f:
        for line in f:
            if line.startswith("lease="):
                return int(line.split("=", 1)[1], 16)
    raise AssertionError("record has no lease= line")


def run_as(user, argv):
    subprocess.run([jobs.for_user(argv[0], user)] + list(argv[1:]),
                   preexec_fn=jobs.as_user(user), check=True)


def check_pairwise_order(events, masks):
    """Grants of jobs whose candidate sets intersect follow ticket order.
    `masks` maps pid -> set of candidate devices. Journal order of grant
    lines is the order of the grants (each is written before the granted
    job releases its ticket, which is what a younger conflicting waiter
    waits for)."""
    g = [(int(e["pid"]), int(e["seq"])) for e in J.grants(events)]
    for i in range(len(g)):
        for k in range(i + 1, len(g)):
            (p1, s1), (p2, s2) = g[i], g[k]
            if masks[p1] & masks[p2] and s1 > s2:
                raise AssertionError(
                    f"pid {p2} (ticket {s2}, {sorted(masks[p2])}) was granted "
                    f"after the younger pid {p1} (ticket {s1}, "
                    f"{sorted(masks[p1])}) "
                    "although their candidates intersect")


def check_one_lease_per_job(events):
    """Two leases of one job never live at the same time: a process of a
    job whose lease is alive joins it instead of claiming a second one."""
    spans = collections.defaultdict(lambda: [None, None])
    for e in events:
        if e["ev"] in ("begin", "tick", "end"):
            s = spans[(e["job"], e["lease"])]
            s[0] = e.t if s[0] is None else min(s[0], e.t)
            s[1] = e.t if s[1] is None else max(s[1], e.t)
    byjob = collections.defaultdict(list)
    for (job, lease), (a, b) in spans.items():
        byjob[job].append((a, b, lease))
    for job, ss in byjob.items():
        ss.sort()
        for x, y in zip(ss, ss[1:]):
            if y[0] <= x[1]:
                raise AssertionError(
                    f"job {job}: leases {x[2]} and {y[2]} were alive at once")


def all_free(lockdir, journal, devices):
    env = jobs.job_env(lockdir, journal, devices=devices,
                       want=len(devices.split(",")), timeout=0)
    return jobs.start(HOLDER, env, stderr=subprocess.DEVNULL).wait() == 0
