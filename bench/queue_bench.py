"""Queue benchmarks of `make bench`: what an arriving job costs as the
queue grows, and the makespan of many short jobs against flock(1).

Both are side by side in one run. An arriving job is a real CUDA-style
program (build/demo/fakejob on the fake driver) with libgpumutex.so
preloaded, arriving behind D queued jobs and giving up after a short
GPUMUTEX_TIMEOUT: its CPU time (rusage) and its system calls (strace -c,
where strace is installed) cover the whole arrival, the waiting line
included. The makespan compares N jobs on 4 fake GPUs queued by gpumutex
with the same jobs queued by flock(1) over 4 lock files (a static
round-robin), and by task-spooler where `tsp` is installed."""

import os
import resource
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
import jobs  # noqa: E402

LIB = os.path.join(BUILD, "libgpumutex.so")
FAKEJOB = os.path.join(BUILD, "demo", "fakejob")
HOLDER = os.path.join(BUILD, "tests", "lease-holder")


def fake_env(tmp, lockdir, devices, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUMUTEX_", "CUDA_", "FAKECUDA_", "LD_"))}
    env.update(LD_LIBRARY_PATH=os.path.join(BUILD, "tests", "fakecuda"),
               FAKECUDA_NUM_DEVICES="4",
               FAKECUDA_JOURNAL=os.path.join(tmp, "fake.journal"),
               GPUMUTEX_LOCK_DIR=lockdir, GPUMUTEX_VISIBLE_DEVICES=devices,
               GPUMUTEX_RECHECK_MS="0")
    env.update(extra)
    return env


def arrival(tmp, depth, quiet):
    """CPU seconds and system calls of one job arriving behind `depth`
    waiting jobs (plus the holder) on one GPU."""
    lockdir = os.path.join(tmp, f"arrive-{depth}-{quiet}")
    journal = os.path.join(tmp, f"arrive-{depth}-{quiet}.journal")
    env = jobs.job_env(lockdir, journal, devices="0")
    holder = jobs.start(HOLDER, env, ready=True, hold=True)
    assert holder.ready()
    waiters = []
    try:
        for _ in range(depth):
            w = jobs.start(HOLDER, env, waiting=True)
            assert w.waited()
            waiters.append(w)
        job_env = fake_env(tmp, lockdir, "0", LD_PRELOAD=LIB,
                           GPUMUTEX_TIMEOUT="0.2",
                           GPUMUTEX_QUIET="1" if quiet else "0")
        cpu = []
        for _ in range(9):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = subprocess.run([FAKEJOB, "0"], env=job_env,
                               stderr=subprocess.DEVNULL)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            assert r.returncode == 1  # gave up: GPUMUTEX_TIMEOUT
            cpu.append(after.ru_utime - before.ru_utime
                       + after.ru_stime - before.ru_stime)
        calls = None
        if shutil.which("strace"):
            out = os.path.join(tmp, "strace.out")
            subprocess.run(["strace", "-f", "-c", "-U", "calls,name", "-o",
                            out, FAKEJOB, "0"], env=job_env,
                           stderr=subprocess.DEVNULL)
            with open(out) as f:
                total = [ln.split() for ln in f
                         if ln.split()[-1:] == ["total"]]
            calls = int(total[0][0]) if total else None
        return sorted(cpu)[len(cpu) // 2], calls
    finally:
        holder.release()
        for w in [holder] + waiters:
            w.wait()


def makespan_gpumutex(tmp, n, work_ms):
    lockdir = os.path.join(tmp, "mk-gpumutex")
    env = fake_env(tmp, lockdir, "0,1,2,3", LD_PRELOAD=LIB)
    t0 = time.monotonic()
    procs = [subprocess.Popen([FAKEJOB, str(work_ms)], env=env,
                              stderr=subprocess.DEVNULL) for _ in range(n)]
    codes = [p.wait() for p in procs]
    assert codes == [0] * n, codes
    return time.monotonic() - t0


def makespan_flock(tmp, n, work_ms):
    d = os.path.join(tmp, "mk-flock")
    os.makedirs(d, exist_ok=True)
    t0 = time.monotonic()
    procs = []
    for i in range(n):
        env = fake_env(tmp, d, "", CUDA_VISIBLE_DEVICES=str(i % 4))
        procs.append(subprocess.Popen(
            ["flock", os.path.join(d, f"gpu{i % 4}"), FAKEJOB, str(work_ms)],
            env=env, stderr=subprocess.DEVNULL))
    codes = [p.wait() for p in procs]
    assert codes == [0] * n, codes
    return time.monotonic() - t0


def makespan_tsp(tmp, n, work_ms):
    """task-spooler with 4 slots (one per fake GPU; its GPU mode needs
    NVML, which the fake driver does not offer)."""
    sock = os.path.join(tmp, "tsp.sock")
    env = fake_env(tmp, tmp, "", TS_SOCKET=sock, TS_SLOTS="4",
                   TS_MAXFINISHED="1000")
    env.pop("GPUMUTEX_VISIBLE_DEVICES")
    subprocess.run(["tsp", "-S", "4"], env=env, check=True,
                   capture_output=True)
    t0 = time.monotonic()
    for _ in range(n):
        subprocess.run(["tsp", FAKEJOB, str(work_ms)], env=env, check=True,
                       capture_output=True)
    subprocess.run(["tsp", "-w"], env=env, capture_output=True)
    while subprocess.run(["tsp"], env=env, capture_output=True,
                         text=True).stdout.count("running"):
        subprocess.run(["tsp", "-w"], env=env, capture_output=True)
    wall = time.monotonic() - t0
    subprocess.run(["tsp", "-K"], env=env, capture_output=True)
    return wall


def run(tmp, row):
    if not (os.path.exists(FAKEJOB) and os.path.exists(LIB)):
        print("  (queue benchmarks skipped: build/demo/fakejob or the "
              "library is absent)")
        return
    for quiet in (False, True):
        figures = []
        for depth in (10, 100, 1000):
            cpu, calls = arrival(tmp, depth, quiet)
            figures.append((depth, cpu, calls))
        desc = ", ".join(
            f"{d} queued: {c * 1e3:.1f} ms" + (f" / {k} calls" if k else "")
            for d, c, k in figures)
        ratio = figures[-1][1] / figures[0][1]
        row(f"arriving job's CPU{' / system calls' if figures[0][2] else ''}"
            f" by queue depth{' (GPUMUTEX_QUIET=1)' if quiet else ''}",
            desc, f"(CPU 1000 vs 10 queued: {ratio:.2f}x)")
    n, work = 400, 20
    g = makespan_gpumutex(tmp, n, work)
    f = makespan_flock(tmp, n, work)
    row(f"makespan, {n} jobs of {work} ms on 4 GPUs: gpumutex vs flock(1) "
        f"round-robin", f"{g:.2f} s vs {f:.2f} s", f"(ratio {g / f:.2f})")
    if shutil.which("tsp"):
        t = makespan_tsp(tmp, n, work)
        row(f"makespan, {n} jobs of {work} ms: task-spooler, 4 slots",
            f"{t:.2f} s", f"(gpumutex / task-spooler {g / t:.2f})")
