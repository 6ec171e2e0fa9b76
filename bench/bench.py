#!/usr/bin/env python3
"""gpumutex benchmarks (`make bench`). Every figure is a ratio or a
difference measured side by side in one run, reported as medians.

Prints a Markdown table; docs/benchmarks.md keeps the figures of record.
Sections that need something absent (the preload library, a GPU) say so
and are skipped."""

import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
sys.path.insert(0, os.path.join(REPO, "bench"))
import journal as J  # noqa: E402

ROWS = []


def row(name, value, note=""):
    ROWS.append((name, value, note))
    print(f"  {name}: {value} {note}", flush=True)


def bench_handoff(tmp):
    out = subprocess.run([os.path.join(BUILD, "bench", "handoff"), "200",
                          os.path.join(tmp, "handoff")],
                         capture_output=True, text=True, check=True).stdout
    v = dict(line.split() for line in out.splitlines())
    row("lease hand-off, holder exits -> next waiter granted (median)",
        f"{float(v['handoff_gpumutex_exit_median_us']):.0f} us",
        f"(p90 {float(v['handoff_gpumutex_exit_p90_us']):.0f} us)")
    row("raw flock hand-off, holder exits -> blocked waiter returns (median)",
        f"{float(v['handoff_flock_exit_median_us']):.0f} us",
        f"(p90 {float(v['handoff_flock_exit_p90_us']):.0f} us)")
    row("hand-off ratio gpumutex / raw flock", v["handoff_ratio_median"],
        "(target <= 1.5)")
    row("uncontended acquire (free device, median)",
        f"{float(v['acquire_uncontended_median_us']):.0f} us")


def run_jobs(n, devices, ticks, lockdir, journal, concurrent, private=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMUTEX_")}
    env.update(GPUMUTEX_VISIBLE_DEVICES=devices, GPUMUTEX_LOCK_DIR=lockdir,
               GM_JOURNAL=journal, GPUMUTEX_RECHECK_MS="0")
    argv = [os.path.join(BUILD, "tests", "lease-holder"), "--ticks",
            str(ticks), "--tick-us", "2000"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    if concurrent:
        # private: each job its own lock directory, so none ever waits.
        procs = [subprocess.Popen(argv, env=dict(env, GPUMUTEX_LOCK_DIR=
                                                 f"{lockdir}-{i}")
                                  if private else env) for i in range(n)]
        codes = [p.wait() for p in procs]
    else:
        codes = [subprocess.run(argv, env=env).returncode for _ in range(n)]
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert codes == [0] * n, codes
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def bench_scale(tmp):
    n, ndev = 256, 8
    devices = ",".join(str(i) for i in range(ndev))
    journal = os.path.join(tmp, "scale.journal")
    wall, cpu = run_jobs(n, devices, 20, os.path.join(tmp, "scale"), journal,
                         True)
    ev = J.parse(journal)
    J.check_exclusive(ev)
    J.check_grant_order(ev)
    holds = []
    for (dev, owner), pts in J.holdings(ev).items():
        holds.append((pts[-1][0] - pts[0][0]) / 1e9)
    ideal = sum(holds) / ndev
    row(f"scale: {n} jobs on {ndev} devices, wall time", f"{wall:.2f} s",
        f"(sum of holds / {ndev} = {ideal:.2f} s; overhead "
        f"{wall - ideal:.2f} s, {(wall - ideal) / n * 1e3:.1f} ms per job)")
    # The same jobs started together, but each in a lock directory of its
    # own, so that none waits: the CPU a job costs at the same concurrency
    # when it never waits. Waiting should add little to it.
    wall1, cpu1 = run_jobs(n, devices, 20, os.path.join(tmp, "priv"),
                           os.path.join(tmp, "priv.journal"), True, True)
    row("CPU per job, 256 jobs started together: contending for 8 devices "
        "vs never waiting (own lock dirs)",
        f"{cpu / n * 1e3:.2f} ms vs {cpu1 / n * 1e3:.2f} ms",
        f"(ratio {cpu / cpu1:.2f}; waiters sleep in poll)")


def main():
    tmp = tempfile.mkdtemp(prefix="gm-bench-")
    print(f"gpumutex benchmarks on {platform.node()} ({os.cpu_count()} CPUs, "
          f"{platform.platform()}), {time.strftime('%Y-%m-%d %H:%M')}")
    try:
        bench_handoff(tmp)
        import evlog_bench
        evlog_bench.run(tmp, row)
        bench_scale(tmp)
        import queue_bench
        queue_bench.run(tmp, row)
        extra = os.path.join(REPO, "bench", "preload_bench.py")
        if os.path.exists(os.path.join(BUILD, "libgpumutex.so")) and \
                os.path.exists(extra):
            sys.path.insert(0, os.path.dirname(extra))
            import preload_bench
            preload_bench.run(tmp, row)
        else:
            print("  (preload benchmarks skipped: build/libgpumutex.so absent)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| measurement | value | note |\n| --- | --- | --- |")
    for name, value, note in ROWS:
        print(f"| {name} | {value} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
