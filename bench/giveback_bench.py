#!/usr/bin/env python3
"""How long a job waits for a GPU that an offloading program holds
(docs/offload.md, "Under gpumutex"): the policy driver
(tests/offload/policy-driver) starts the GPU under a lease and keeps
offloading; a lease-holder then queues for the GPU. Reported: from the
holder's `wait` to its `grant` in the journal, median and maximum over
runs, with the default GPU_OFFLOAD_WATCH_MS / GPU_OFFLOAD_YIELD_MS and
with short ones. The documented bound is two watch periods plus the
yield time (1.5 s by default).

Usage: bench/giveback_bench.py [RUNS]   (needs `make all fakecuda`)"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "tests", "offload"))
import jobs  # noqa: E402
import journal as J  # noqa: E402
from policylib import BIG, HOLDER, Driver, env  # noqa: E402


class P:
    """pathlib-ish enough for policylib.env."""
    def __init__(self, d):
        self.d = d

    def __truediv__(self, name):
        import pathlib
        return pathlib.Path(self.d) / name


def one(watch, yield_ms):
    with tempfile.TemporaryDirectory() as d:
        extra = {}
        if watch is not None:
            extra = dict(GPU_OFFLOAD_WATCH_MS=str(watch),
                         GPU_OFFLOAD_YIELD_MS=str(yield_ms))
        e = env(P(d), **extra)
        drv = Driver(e)
        assert drv.call(20)["starts"] == 1
        h = jobs.start(HOLDER, jobs.job_env(e["GPUMUTEX_LOCK_DIR"],
                                            e["GM_JOURNAL"], devices="0"),
                       ready=True, hold=True)
        # the program keeps offloading while the job waits
        t = threading.Thread(target=drv.send, args=("until-stop " + BIG,))
        t.start()
        assert h.ready()
        t.join()
        h.wait()
        drv.finish()
        ev = J.parse(e["GM_JOURNAL"])
        w = [x.t for x in ev if x["ev"] == "wait" and x["pid"] == str(h.pid)]
        g = [x.t for x in ev if x["ev"] == "grant" and x["pid"] == str(h.pid)]
        return (g[0] - w[0]) / 1e9


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    subprocess.run(["make", "-C", REPO, "-s", "all", "fakecuda"], check=True)
    print("| settings | runs | median wait | max wait |")
    print("|---|---|---|---|")
    for watch, yms, name in ((None, None, "defaults (250 ms, 1000 ms)"),
                             (10, 20, "WATCH_MS=10 YIELD_MS=20")):
        xs = [one(watch, yms) for _ in range(runs)]
        print(f"| {name} | {runs} | {statistics.median(xs):.3f} s | "
              f"{max(xs):.3f} s |", flush=True)


if __name__ == "__main__":
    main()
