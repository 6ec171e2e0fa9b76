#!/usr/bin/env python3
"""gpumutex demo: six jobs of different sizes contend for two GPUs.

Each job takes its lease through the lease core (tests/lease/lease-holder),
holds its GPUs for a moment of "work", and lets go. The demo prints each
event as it happens, then a timeline of who held which GPU when.

Run it with `make demo`."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
import journal as J  # noqa: E402

HOLDER = os.path.join(REPO, "build", "tests", "lease-holder")
JOBS = [  # (name, GPUs wanted, work ticks of ~1 ms)
    ("train-a", 1, 300), ("sweep-b", 2, 200), ("eval-c", 1, 150),
    ("train-d", 1, 250), ("bench-e", 2, 150), ("probe-f", 1, 100),
]


def main():
    tmp = tempfile.mkdtemp(prefix="gpumutex-demo-")
    journal = os.path.join(tmp, "journal")
    lockdir = os.path.join(tmp, "locks")
    open(journal, "w").close()
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUMUTEX_")}
    base.update(GPUMUTEX_VISIBLE_DEVICES="0,1", GPUMUTEX_LOCK_DIR=lockdir,
                GM_JOURNAL=journal)
    print("gpumutex demo: 6 jobs, 2 GPUs (GPUMUTEX_VISIBLE_DEVICES=0,1)\n")
    t0 = time.monotonic_ns()
    procs = {}
    for name, want, ticks in JOBS:
        env = dict(base, GPUMUTEX_NUM_DEVICES=str(want), GPUMUTEX_JOB=name)
        procs[name] = subprocess.Popen(
            [HOLDER, "--ticks", str(ticks), "--tick-us", "2000"], env=env)
        print(f"  start   {name:8} wants {want} GPU{'s' if want > 1 else ''}")
    seen = 0
    names = {}
    while True:
        done = all(p.poll() is not None for p in procs.values())
        events = J.parse(journal)
        for e in events[seen:]:
            names.setdefault(e["pid"], e["job"])
            ms = (e.t - t0) / 1e6
            if e["ev"] == "wait":
                print(f"{ms:7.0f} ms  {e['job']:8} waits in line "
                      f"({e['ahead']} ahead)")
            elif e["ev"] == "grant":
                print(f"{ms:7.0f} ms  {e['job']:8} granted GPU {e['devs']}")
            elif e["ev"] == "end":
                print(f"{ms:7.0f} ms  {e['job']:8} releases GPU {e['dev']}")
        seen = len(events)
        if done:
            break
        time.sleep(0.02)  # display refresh only
    bad = [n for n, p in procs.items() if p.returncode != 0]
    ev = J.parse(journal)
    J.check_exclusive(ev)
    letter = {n: "ABCDEF"[i] for i, (n, _, _) in enumerate(JOBS)}
    print("\nTimeline (each column is 50 ms, '.' = idle):")
    end = max(e.t for e in ev)
    for dev in (0, 1):
        row = []
        for k in range(0, int((end - t0) / 50e6) + 1):
            t = t0 + k * 50e6 + 25e6
            who = "."
            for (d, owner), pts in J.holdings(ev).items():
                if d == dev and pts[0][0] <= t <= pts[-1][0]:
                    who = letter[pts[0][1]["job"]]
            row.append(who)
        print(f"  GPU {dev} |{''.join(row)}|")
    print("  legend: " + ", ".join(f"{letter[n]}={n}" for n, _, _ in JOBS))
    print("\nNo two jobs ever held one GPU at once (checked from the journal).")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
