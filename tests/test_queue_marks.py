"""The queue's marks (queue/seq, line 2) and index links under damage:
what docs/design.md step 4 "Queue" promises when the marks cannot be
right, and the order and exclusion they must never cost."""

import os
import random
import signal

import pytest

import journal as J
import jobs
from conftest import BUILD

HOLDER = os.path.join(BUILD, "tests", "lease-holder")
NDEV = 64


def write_marks(lockdir, low):
    """Replace line 2 of queue/seq with marks `low` ({device: value}),
    as any user may (the file is 0666)."""
    seq = os.path.join(lockdir, "queue", "seq")
    with open(seq) as f:
        counter = f.readline()
    line = "L" + "".join(f"{low.get(d, 0):016x}" for d in range(NDEV)) + "\n"
    with open(seq, "w") as f:
        f.write(counter + line)
    return int(counter, 16)


@pytest.mark.parametrize("shared", ["same-device", "other-device"])
def test_mark_above_own_number_is_not_trusted(built, lockdir, journal,
                                              shared):
    """A mark above the claimant's own number cannot be right (nobody
    behind us is granted before us), so the claimant trusts none of the
    marks (docs/design.md, step 4). Interleaving: [H holds GPU 1] ->
    [big on "0,1", want 2, waits at the head] -> [someone writes marks far
    above every ticket, on GPU 0 ("same-device") or on GPU 0 while the
    bad one is GPU 1 ("other-device")] -> [late on "0", GPUMUTEX_TIMEOUT=0].
    Expected: late must not pass big, which is older and shares GPU 0:
    it gives up (GPU 0 is free, but big is ahead)."""
    h = jobs.start(HOLDER, jobs.job_env(lockdir, journal, devices="1",
                                        job="h"), ready=True, hold=True)
    assert h.ready()
    big = jobs.start(HOLDER, jobs.job_env(lockdir, journal, devices="0,1",
                                          want=2, job="big"), waiting=True)
    assert big.waited()
    nxt = write_marks(lockdir, {})
    if shared == "same-device":
        write_marks(lockdir, {0: nxt + 0x1000})
    else:
        # GPU 0's mark says "big is over" (too high, but below late's own
        # number: alone, that is the documented order-only attack); GPU 1's
        # is above late's number, which says the marks are damaged.
        write_marks(lockdir, {0: nxt, 1: nxt + 0x1000})
    late_devs = "0" if shared == "same-device" else "0,1"
    late = jobs.start(HOLDER, jobs.job_env(lockdir, journal,
                                           devices=late_devs, job="late",
                                           timeout=0), stderr=open(os.devnull, "w"))
    rc = late.wait()
    h.release()
    assert h.wait() == 0
    assert big.wait() == 0
    assert rc != 0, "a job passed an older live waiter sharing its GPU"
    ev = J.parse(journal)
    J.check_exclusive(ev)
