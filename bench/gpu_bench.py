#!/usr/bin/env python3
"""gpumutex benchmarks on a real NVIDIA GPU (real driver, real PyTorch).

    python3 bench/gpu_bench.py        (GPU_BENCH_REPS=3, GPU_PYTHON=python3)

Side by side in one run, medians over repeated runs:

1. Back-to-back PyTorch jobs: N jobs (import torch, about 1 s of bf16
   matmuls, exit) started together under gpumutex, against the same jobs
   run one after another with no gpumutex (the ideal sequential schedule).
   From the jobs' journal (tests/gpu/gj.py): the GPU idle gap between
   consecutive jobs (one job's last synchronised work -> the next one's
   first), split into the previous job's exit, the next job's cuInit and
   its context, and the GPU busy fraction (sum of GPU intervals / makespan,
   first launch to last exit).
2. Uncontended cuInit: a C program timing cuInit (tests/gpu/cujob.c init),
   with and without the preload, interleaved.
3. Hand-off with the real driver: a holder (cujob hold) is released while
   a waiter is queued (its waiting line seen). From the holder's last
   timestamp before it returns from main to the waiter's grant (read from
   the waiter's lease record) and to its cuInit returning, so the
   hand-off and the waiter's real cuInit are reported apart.

Prints one Markdown table. Without an NVIDIA GPU it says so, prints the
table with a `skipped` row and exits 0 (so `make bench` works anywhere).
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
RUN = os.path.join(BUILD, "gpumutex-run")
CUJOB = os.path.join(BUILD, "gpu", "cujob")
TORCH_JOBS = os.path.join(REPO, "tests", "gpu", "torch_jobs.py")
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
import journal as J  # noqa: E402

ROWS = []


def row(name, with_gm, without, note=""):
    ROWS.append((name, with_gm, without, note))
    print(f"  {name}: {with_gm} | {without} {note}", flush=True)


def table():
    print("\n| measurement | with gpumutex | without (baseline) | note |")
    print("| --- | --- | --- | --- |")
    for r in ROWS:
        print("| " + " | ".join(r) + " |")


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def ms(ns):
    return f"{ns / 1e6:.1f} ms"


def gpu_present():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln for ln in out.splitlines() if ln.startswith("GPU ")]
    return lines[0] if lines else None


def device_line():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version",
             "--format=csv,noheader"], capture_output=True, text=True,
            timeout=60).stdout.strip().splitlines()[0]
        return out
    except (OSError, subprocess.SubprocessError, IndexError):
        return "?"


def torch_python():
    probe = "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)"
    for py in (os.environ.get("GPU_PYTHON"), shutil.which("python3"),
               sys.executable):
        if py and subprocess.run([py, "-c", probe]).returncode == 0:
            return py
    return None


def build():
    """make all (the library, gpumutex-run) and tests/gpu/cujob.c."""
    subprocess.run(["make", "-s", "-C", REPO, "all"], check=True,
                   stdout=subprocess.DEVNULL)
    src = os.path.join(REPO, "tests", "gpu", "cujob.c")
    if os.path.exists(CUJOB) and os.path.getmtime(CUJOB) > os.path.getmtime(src):
        return
    os.makedirs(os.path.dirname(CUJOB), exist_ok=True)
    lib = None
    for d in ("/usr/local/cuda/lib64/stubs",
              "/usr/local/cuda/targets/x86_64-linux/lib/stubs"):
        if os.path.exists(os.path.join(d, "libcuda.so")):
            lib = ["-L" + d, "-lcuda"]
            break
    if lib is None:
        for ln in subprocess.run(["ldconfig", "-p"], capture_output=True,
                                 text=True).stdout.splitlines():
            if "libcuda.so.1 " in ln:
                lib = ["-L" + os.path.dirname(ln.split()[-1]), "-l:libcuda.so.1"]
                break
    subprocess.run(["cc", "-std=c11", "-O2", "-o", CUJOB, src] + (lib or []),
                   check=True)


def gm_env(**kw):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUMUTEX_", "CUDA_VISIBLE_DEVICES"))}
    env.update(kw)
    return env


def gm_argv(lockdir):
    return [RUN, "--visible-devices", "0", "--lock-dir", lockdir, "--quiet",
            "--"]


# ---- 1. back-to-back PyTorch jobs ---------------------------------------------

def b2b_run(py, mode, n, seconds, tmp, rep):
    journal = os.path.join(tmp, f"b2b-{mode}-{rep}.journal")
    lockdir = os.path.join(tmp, f"locks-b2b-{rep}")
    job = [py, TORCH_JOBS, "mm", "--seconds", str(seconds)]
    launch, exits, codes = {}, {}, {}

    def start(i):
        tag = f"{mode}{rep}-{i}"
        env = gm_env(GM_JOURNAL=journal, GM_TAG=tag)
        argv = (gm_argv(lockdir) + job) if mode == "gm" else job
        launch[tag] = time.monotonic_ns()
        return tag, subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)

    def reap(tag, p):
        codes[tag] = p.wait()
        exits[tag] = time.monotonic_ns()

    if mode == "gm":
        procs = [start(i) for i in range(n)]
        threads = [threading.Thread(target=reap, args=tp) for tp in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i in range(n):
            reap(*start(i))
    ev = J.parse(journal)
    if mode == "gm":
        J.check_exclusive(ev)
    jobs = []
    for tag in launch:
        mine = [e for e in ev if e.get("tag") == tag]
        b = [e for e in mine if e["ev"] == "begin"]
        e_ = [e for e in mine if e["ev"] == "end"]
        ok = [e for e in mine if e["ev"] == "result" and e.get("ok") == "1"]
        if codes[tag] != 0 or not b or not e_ or not ok:
            raise RuntimeError(f"{mode} job {tag} failed (exit {codes[tag]})")
        jobs.append(dict(tag=tag, begin=b[0].t, pre=int(b[0]["pre"]),
                         init=int(b[0]["init"]), end=max(x.t for x in e_),
                         launch=launch[tag], exit=exits[tag]))
    jobs.sort(key=lambda j: j["begin"])
    pairs = list(zip(jobs, jobs[1:]))
    makespan = max(j["exit"] for j in jobs) - min(j["launch"] for j in jobs)
    return dict(
        gap=[b["begin"] - a["end"] for a, b in pairs],
        teardown=[a["exit"] - a["end"] for a, b in pairs],
        exit_to_init=[b["init"] - a["exit"] for a, b in pairs],
        ctx=[b["begin"] - b["init"] for a, b in pairs],
        gone_to_begin=[b["begin"] - a["exit"] for a, b in pairs],
        startup=[j["begin"] - j["pre"] for j in jobs],
        busy=sum(j["end"] - j["begin"] for j in jobs) / makespan,
        makespan=makespan)


def bench_b2b(py, tmp, reps, n=6, seconds=1.0):
    res = {"gm": [], "seq": []}
    for rep in range(reps):
        for mode in ("seq", "gm"):
            res[mode].append(b2b_run(py, mode, n, seconds, tmp, rep))
            r = res[mode][-1]
            print(f"  b2b {mode} rep {rep}: gaps "
                  + " ".join(f"{g / 1e6:.0f}" for g in r["gap"])
                  + f" ms, busy {r['busy']:.3f}", flush=True)

    def pool(mode, key):
        return [x for r in res[mode] for x in r[key]]

    def both(key):
        return ms(med(pool("gm", key))), ms(med(pool("seq", key)))

    own = med(pool("seq", "startup"))
    gm_gap = med(pool("gm", "gap"))
    row(f"{n} back-to-back torch jobs (~{seconds:g} s of bf16 matmuls each): "
        "GPU idle gap between consecutive jobs, median", *both("gap"),
        f"{reps} runs x {n - 1} gaps each; baseline = the same jobs run one "
        "after another in a loop")
    row("... of which: previous job, last GPU work -> process gone",
        *both("teardown"), "interpreter and CUDA context teardown")
    row("... previous job gone -> next job's cuInit returned",
        *both("exit_to_init"),
        "gpumutex: hand-off + real cuInit; baseline: python start, "
        "import torch, cuInit")
    row("... next job's cuInit returned -> first GPU work synchronised",
        *both("ctx"), "CUDA context + first kernel")
    row("previous job gone -> next job's first GPU work synchronised "
        "(the gap less the previous job's own exit), median",
        *both("gone_to_begin"))
    row("a job's own CUDA start-up (before cuInit -> first work done, "
        "not waiting), median", "", ms(own), "measured in the baseline runs")
    row("gap under gpumutex / own CUDA start-up", f"{gm_gap / own:.2f}", "",
        "target <= 1; the gap holds the previous job's exit too")
    row("(previous job gone -> next job's first GPU work) / own CUDA "
        "start-up", f"{med(pool('gm', 'gone_to_begin')) / own:.2f}", "",
        "the part gpumutex can influence")
    row("GPU busy fraction (sum of GPU intervals / first launch to last exit), "
        "median", f"{med([r['busy'] for r in res['gm']]):.3f}",
        f"{med([r['busy'] for r in res['seq']]):.3f}")
    row(f"wall time for the {n} jobs, median",
        f"{med([r['makespan'] for r in res['gm']]) / 1e9:.2f} s",
        f"{med([r['makespan'] for r in res['seq']]) / 1e9:.2f} s")


# ---- 2. uncontended cuInit ------------------------------------------------------

def cuinit_once(preload, lockdir):
    argv = (gm_argv(lockdir) if preload else []) + [CUJOB, "init"]
    out = subprocess.run(argv, env=gm_env(), capture_output=True,
                         text=True, timeout=120)
    v = dict(f.split("=", 1) for f in out.stdout.split())
    if out.returncode or v.get("rc") != "0":
        raise RuntimeError(f"cujob init failed: {out.stdout} {out.stderr}")
    return int(v["cuinit_ns"])


def bench_cuinit(tmp, n):
    lockdir = os.path.join(tmp, "locks-init")
    gm, real = [], []
    for _ in range(n):
        gm.append(cuinit_once(True, lockdir))
        real.append(cuinit_once(False, lockdir))
    q = statistics.quantiles
    row("first cuInit of a process, uncontended (median)", ms(med(gm)),
        ms(med(real)), f"{n} runs each, interleaved; spread (p25-p75) "
        f"{ms(q(gm, n=4)[0])}-{ms(q(gm, n=4)[2])} with, "
        f"{ms(q(real, n=4)[0])}-{ms(q(real, n=4)[2])} without")
    row("cuInit through gpumutex minus the real cuInit (difference of "
        "medians)", ms(med(gm) - med(real)), "",
        "resolution: the real cuInit varies by "
        f"{ms(q(real, n=4)[2] - q(real, n=4)[0])} (p75-p25) between runs")


# ---- 3. hand-off with the real driver -------------------------------------------

def handoff_once(tmp, i):
    lockdir = os.path.join(tmp, f"locks-handoff-{i}")
    journal = os.path.join(tmp, f"handoff-{i}.journal")
    env = gm_env(GM_JOURNAL=journal, GM_TAG="holder")
    holder = subprocess.Popen(
        [RUN, "--visible-devices", "0", "--lock-dir", lockdir, "--", CUJOB,
         "hold", "0"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    assert holder.stdout.readline().strip() == "holding"
    waiter = subprocess.Popen(
        [RUN, "--visible-devices", "0", "--lock-dir", lockdir, "--", CUJOB,
         "init"], env=gm_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    line = waiter.stderr.readline()  # the waiting line: it is queued
    assert "waits for" in line, line
    holder.stdin.close()  # the holder finishes its work and returns
    holder.wait()
    gone = time.monotonic_ns()
    out, _ = waiter.communicate(timeout=120)
    v = dict(f.split("=", 1) for f in out.split())
    if holder.returncode or waiter.returncode or v.get("rc") != "0":
        raise RuntimeError(f"hand-off run failed: {out}")
    last = [e.t for e in J.parse(journal) if e["ev"] == "exit"][0]
    ret = int(v["ret_ns"])
    # The waiter's lease record says when it was granted (CLOCK_REALTIME,
    # written during the grant); cujob printed both clocks after cuInit.
    rec = [f for f in os.listdir(os.path.join(lockdir, "job"))
           if f.endswith("-" + v["job"] + ".lease")]
    with open(os.path.join(lockdir, "job", rec[0])) as f:
        start = int(dict(ln.split("=", 1) for ln in f.read().splitlines()
                         if "=" in ln)["start"])
    granted = ret - (int(v["real_ns"]) - start)
    return dict(total=ret - last, handoff=granted - last,
                reap=granted - gone, cuinit=ret - granted)


def bench_handoff(tmp, n):
    runs = [handoff_once(tmp, i) for i in range(n)]

    def m(k):
        return ms(med([r[k] for r in runs]))
    row("hand-off: holder's last timestamp (returning from main) -> queued "
        "waiter's cuInit returned (median)", m("total"), "",
        f"{n} runs, C -lcuda holder and waiter (tests/gpu/cujob.c)")
    row("... holder's last timestamp -> waiter granted (median)",
        m("handoff"), "", "the holder's exit (atexit, driver teardown, "
        "closing its descriptors), the wake-up and the grant; from the "
        "waiter's lease record")
    row("... waiter granted -> its cuInit returned (median)", m("cuinit"),
        "", "the waiter's real cuInit")
    reap = med([r["reap"] for r in runs])
    row("... waiter granted, relative to the holder being reaped (median)",
        ms(reap), "", "negative: granted before the holder's exit completed "
        "(the lease passes on when its descriptors close)" if reap < 0 else
        "granted after the holder was reaped")


def main():
    print(f"gpumutex GPU benchmarks, {time.strftime('%Y-%m-%d %H:%M')}")
    gpu = gpu_present()
    if not gpu:
        print("gpu benchmarks skipped: no NVIDIA GPU (nvidia-smi -L lists none)")
        row("GPU benchmarks", "skipped", "skipped", "no NVIDIA GPU here")
        table()
        return 0
    print(f"  device: {gpu}; {device_line()}")
    reps = int(os.environ.get("GPU_BENCH_REPS", "3"))
    tmp = tempfile.mkdtemp(prefix="gm-gpu-bench-")
    try:
        build()
        try:
            bench_cuinit(tmp, int(os.environ.get("GPU_BENCH_INIT_RUNS", "20")))
            bench_handoff(tmp, int(os.environ.get("GPU_BENCH_HANDOFFS", "10")))
        except Exception as e:  # keep going: report what failed
            row("cuInit / hand-off benchmarks", "failed", "", repr(e)[:200])
        py = torch_python()
        if py:
            try:
                bench_b2b(py, tmp, reps)
            except Exception as e:
                row("back-to-back torch jobs", "failed", "", repr(e)[:200])
        else:
            row("back-to-back torch jobs", "skipped", "skipped",
                "no python3 with torch (set GPU_PYTHON)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
