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

import glob
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
# An older build directory (with gpumutex-run and libgpumutex.so) to compare
# the idle gap with, in the same run; empty: no comparison.
OLD = os.environ.get("GPU_BENCH_OLD", "")
WRAPCOST = os.path.join(BUILD, "bench", "wrapcost")


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
    lockdir = os.path.join(tmp, f"locks-b2b-{mode}-{rep}")
    job = [py, TORCH_JOBS, "mm", "--seconds", str(seconds)]
    launch, exits, codes = {}, {}, {}

    def start(i):
        tag = f"{mode}{rep}-{i}"
        env = gm_env(GM_JOURNAL=journal, GM_TAG=tag)
        if mode == "gm":
            argv = gm_argv(lockdir) + job
        elif mode == "old":  # an older build's gpumutex-run (GPU_BENCH_OLD)
            argv = [os.path.join(OLD, "gpumutex-run")] + gm_argv(lockdir)[1:] + job
        else:
            argv = job
        launch[tag] = time.monotonic_ns()
        return tag, subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)

    def reap(tag, p):
        codes[tag] = p.wait()
        exits[tag] = time.monotonic_ns()

    if mode in ("gm", "old"):
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
    if mode in ("gm", "old"):
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
    res = {"gm": [], "seq": [], "old": []}
    modes = ("seq", "gm", "old") if OLD else ("seq", "gm")
    for rep in range(reps):
        for mode in modes:
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
        "gpumutex: hand-off + real cuInit, negative when the next job's "
        "cuInit returned before it waited (the lease is taken at its first "
        "context); baseline: python start, import torch, cuInit")
    row("... next job's cuInit returned -> first GPU work synchronised",
        *both("ctx"), "CUDA context + first kernel")
    row("previous job gone -> next job's first GPU work synchronised "
        "(the gap less the previous job's own exit), median",
        *both("gone_to_begin"))
    if OLD:
        row("GPU idle gap between consecutive jobs, median: this build | "
            "the older build (GPU_BENCH_OLD)", ms(med(pool("gm", "gap"))),
            ms(med(pool("old", "gap"))), "same run, interleaved; the older "
            "build takes the lease in cuInit, this one at the first context "
            "(its real cuInit runs while it waits)")
        row("... previous job gone -> next job's first GPU work: this build "
            "| the older build", ms(med(pool("gm", "gone_to_begin"))),
            ms(med(pool("old", "gone_to_begin"))))
        row("... next job's cuInit returned -> first GPU work synchronised: "
            "this build | the older build", ms(med(pool("gm", "ctx"))),
            ms(med(pool("old", "ctx"))), "this build: includes the wait")
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


# ---- 4. queries, launches, wrapper cost ------------------------------------------

def query_once(py, lockdir, held):
    """torch get_device_properties & co. in a fresh process under
    gpumutex-run; with `held`, while a C -lcuda job holds the GPU. Returns
    (ns the queries took, ns the process took)."""
    holder = None
    if held:
        holder = subprocess.Popen(gm_argv(lockdir) + [CUJOB, "hold", "0"],
                                  env=gm_env(GM_JOURNAL=os.devnull,
                                             GM_TAG="holder"),
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "holding"
    journal = os.path.join(lockdir + ".journal")
    t0 = time.monotonic_ns()
    r = subprocess.run(gm_argv(lockdir) + [py, TORCH_JOBS, "query", "props"],
                       env=gm_env(GM_JOURNAL=journal, GM_TAG="q"),
                       capture_output=True, text=True, timeout=120)
    wall = time.monotonic_ns() - t0
    if holder:
        holder.stdin.close()
        holder.wait()
    if r.returncode or "waits for" in r.stderr:
        raise RuntimeError(f"query run failed or waited: {r.stderr[-300:]}")
    call = [int(e["call_ns"]) for e in J.parse(journal)
            if e["ev"] == "info" and "call_ns" in e][-1]
    return call, wall


def bench_queries(py, tmp, n):
    free, held = [], []
    for i in range(n):
        free.append(query_once(py, os.path.join(tmp, f"locks-q{i}"), False))
        held.append(query_once(py, os.path.join(tmp, f"locks-qh{i}"), True))
    row("torch get_device_name/properties/capability (runtime cuInit) while "
        "another job holds the GPU | not held: the queries, median",
        ms(med([c for c, _ in held])), ms(med([c for c, _ in free])),
        f"{n} runs each, interleaved; under gpumutex-run both")
    row("... the whole process (python start, import torch, queries), median",
        ms(med([w for _, w in held])), ms(med([w for _, w in free])),
        "held | not held")


def launches_once(py, lockdir, gm):
    argv = (gm_argv(lockdir) if gm else []) + [py, TORCH_JOBS, "launches",
                                              "--n", "50000"]
    r = subprocess.run(argv, env=gm_env(GM_JOURNAL=os.devnull, GM_TAG="l"),
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise RuntimeError(f"launch loop failed: {r.stderr[-300:]}")
    return int(r.stdout.split("launch_ns=")[1].split()[0])


def bench_launches(py, tmp, n):
    gm, raw = [], []
    for i in range(n):
        gm.append(launches_once(py, os.path.join(tmp, f"locks-l{i}"), True))
        raw.append(launches_once(py, None, False))
    row("launch-heavy torch loop (50000 tiny in-place adds, one stream): "
        "time per launch, median", f"{med(gm):.0f} ns", f"{med(raw):.0f} ns",
        f"{n} runs each, interleaved; ratio {med(gm) / med(raw):.4f} "
        "(target within 1%)")


def bench_wrapcost(n):
    src = os.path.join(REPO, "bench", "wrapcost.c")
    os.makedirs(os.path.dirname(WRAPCOST), exist_ok=True)
    subprocess.run(["cc", "-std=c11", "-O2", "-o", WRAPCOST, src, "-ldl"],
                   check=True)
    lib = os.path.join(BUILD, "libgpumutex.so")
    lockdir = tempfile.mkdtemp(prefix="gm-wrapcost-")
    res = {True: [], False: []}
    for _ in range(n):
        for pre in (False, True):
            env = gm_env()
            if pre:
                env.update(LD_PRELOAD=lib, GPUMUTEX_VISIBLE_DEVICES="0",
                           GPUMUTEX_LOCK_DIR=lockdir)
            r = subprocess.run([WRAPCOST, "20000000"], env=env,
                               capture_output=True, text=True, timeout=120)
            if r.returncode:
                raise RuntimeError(f"wrapcost failed: {r.stderr}")
            v = dict(f.split("=") for f in r.stdout.split())
            res[pre].append((float(v["work_ns"]), float(v["query_ns"])))
    shutil.rmtree(lockdir, ignore_errors=True)
    w = [a for a, _ in res[True]]
    w0 = [a for a, _ in res[False]]
    row("one wrapped driver call (cuCtxGetApiVersion, lease held), median",
        f"{med(w):.2f} ns", f"{med(w0):.2f} ns",
        f"{n} runs x 20M calls each, interleaved; wrapper = difference "
        f"{med(w) - med(w0):.2f} ns")
    q = [b for _, b in res[True]]
    q0 = [b for _, b in res[False]]
    row("one pure query (cuDeviceGetCount, handed out unwrapped), median",
        f"{med(q):.2f} ns", f"{med(q0):.2f} ns", "no wrapper: the same function")


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
    # The waiter queues at its first device call (cujob first: cuInit,
    # then the primary context), where the lease is taken.
    waiter = subprocess.Popen(
        [RUN, "--visible-devices", "0", "--lock-dir", lockdir, "--", CUJOB,
         "first"], env=gm_env(), stdout=subprocess.PIPE,
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
    rec = glob.glob(os.path.join(lockdir, "job", "*", v["job"] + ".lease"))
    with open(rec[0]) as f:
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
        "waiter's first device call returned (median)", m("total"), "",
        f"{n} runs, C -lcuda holder and waiter (tests/gpu/cujob.c)")
    row("... holder's last timestamp -> waiter granted (median)",
        m("handoff"), "", "the holder's exit (atexit, driver teardown, "
        "closing its descriptors), the wake-up and the grant; from the "
        "waiter's lease record")
    row("... waiter granted -> its first device call returned (median)",
        m("cuinit"), "", "the waiter's primary context (its real cuInit "
        "ran before it queued)")
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
        try:
            bench_wrapcost(int(os.environ.get("GPU_BENCH_WRAP_RUNS", "5")))
        except Exception as e:
            row("wrapper cost", "failed", "", repr(e)[:200])
        py = torch_python()
        if py:
            try:
                bench_queries(py, tmp, int(os.environ.get("GPU_BENCH_QUERIES", "3")))
            except Exception as e:
                row("queries", "failed", "", repr(e)[:200])
            try:
                bench_launches(py, tmp, int(os.environ.get("GPU_BENCH_LAUNCHES", "3")))
            except Exception as e:
                row("launches", "failed", "", repr(e)[:200])
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
