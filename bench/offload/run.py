#!/usr/bin/env python3
"""gpu-offload on a real GPU: every figure of issue 16 (items 5, 6, 7) in
one run, side by side with numpy's own BLAS at the same thread count.

    python3 bench/offload/run.py [--out DIR] [--budget S] [--quick]
                                 [--profile P] [--backend P] [--python PY]
                                 [--sections a,b,...] [--section-s a=S,...]
                                 [--reps R] [--suites numpy.linalg,scipy.linalg]
                                 [--suite-workers SUITE/MODE=N,...]
                                 [--sweep-sizes N,...] [--fresh-max N] [--warm-min N]
                                 [--sweep-pairs K] [--sweep-mode pairs|inproc]
                                 [--sweep-rounds R] [--sweep-rep-s S]
                                 [--max-call-s S]

Sections (in this order; --sections picks some). Each selected section is
planned a number of seconds: --section-s fixes some, the rest of --budget
is shared among the others in proportion to SHARE (so a run of a few
sections gives them the whole budget); a section also gets what the
earlier ones left unused, never runs past the overall budget (every
process's time limit is capped by it), and says what it skipped:
  machine   the machine, versions, the profile in use (calibrating into
            DIR/profile when none is given)
  small     ns added to a small call (build/bench/offload_small), if built
  short     a short program (a few small calls) pays no CUDA start-up:
            libcuda.so.1 and the backend unmapped at exit, the summary's
            start-up 0 and the trace's 0 starts; forced, the same program
            does map them (the probe's positive control); then the
            whole short program's wall time in up to 16 process pairs,
            plain and at the default level (never slower, cold)
  headline  dgemm/sgemm 8192, solve 4096 (n x n right-hand side), eigh and
            svd 4096: CPU, under `gpu-offload run` at the default level
            (steady state after the GPU start, and the calls before it)
            and forced, NVBLAS (gemm); median of R after one warm-up; for
            dgemm, solve, eigh the time inside the GPU calls (a traced run)
  nvblas    NVBLAS's own dgemm_ called directly (where it does apply)
  verify    `gpu-offload run --verify` over the headline set
  mutex     gpumutex interplay: a torch holder keeps gpu-offload on the
            CPU; a free GPU is used; a torch waiter's wait against a busy
            and an idle offloader, with the documented bound
  threads   many threads calling BLAS (threads.py): 16 and 64 Python
            threads of small dgemm around the threshold and the model's
            crossover, scikit-learn KMeans, joblib; plain vs default level
            in process pairs, each point at most 1.05x
  resident  operands kept on the GPU (resident.py): 100 products A @ x_k
            (A 8192 x 8192), a dense CG loop on 8192, scikit-learn Ridge
            over 20 alphas and randomized PCA: the CPU, the default level
            with residency off and on, side by side, results compared
  sweep     never slower: gemm, solve, eigh, cholesky, mixed; 16 .. 16384;
            paired, alternating repetitions judged on the median of the
            paired ratios (sweep.py, verdict.judge): fresh process pairs up
            to --fresh-max, warm pairs (two long-lived processes) from 256;
            --sweep-mode inproc: one process a point, the offloader paused
            and active in turn (inproc.py, verdict.judge_inproc)
  suites    numpy.linalg and scipy.linalg's own tests: plain, forced (every
            GPU-capable call offloaded), default level, all at once with
            xdist workers shared out over the cores, one time limit
Writes DIR/report.md and DIR/results.json (default DIR: $OUT, else
build/bench-offload). --quick: the CPU test backend and tiny sizes (what
`make check` runs; the harness, not the speeds). Without an NVIDIA GPU the
quick mode is chosen. Exit status 0 when the report was written.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
import sections as S  # noqa: E402
import verdict as V  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, "build")
ALL = ["machine", "small", "short", "headline", "nvblas", "verify", "mutex",
       "threads", "resident", "sweep", "suites"]
# Relative shares of the budget among the selected sections.
SHARE = {"machine": 0.10, "small": 0.01, "short": 0.02, "headline": 0.22,
         "nvblas": 0.03, "verify": 0.06, "mutex": 0.06, "threads": 0.10,
         "resident": 0.10,
         "sweep": 0.20, "suites": 0.20}


def has_gpu():
    if os.path.exists("/dev/nvidia0") and not shutil.which("nvidia-smi"):
        return True
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(ln.startswith("GPU ") for ln in r.stdout.splitlines())


def find_python(explicit):
    cands = [explicit] if explicit else [os.environ.get("BENCH_PYTHON"),
                                         shutil.which("python3"), "/usr/bin/python3"]
    for c in cands:
        if c and subprocess.run([c, "-c", "import numpy"],
                                capture_output=True).returncode == 0:
            return c
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(BUILD, "bench-offload"))
    ap.add_argument("--budget", type=float)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="the real backend at small sizes (does it run here?)")
    ap.add_argument("--profile")
    ap.add_argument("--calibrate-s", type=float,
                    help="time limit of the calibration (default: the machine section's share)")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="without --profile: no profile rather than calibrating")
    ap.add_argument("--backend")
    ap.add_argument("--python")
    ap.add_argument("--sections", default=",".join(ALL))
    ap.add_argument("--section-s", default="",
                    help="seconds planned for some sections: sweep=300,headline=120")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--suites", default="numpy.linalg,scipy.linalg",
                    help="the test suites of the suites section (pytest --pyargs)")
    ap.add_argument("--suite-workers", default="",
                    help="xdist workers of some suite runs: numpy.linalg/forced=8,...")
    ap.add_argument("--sweep-sizes", help="the sweep's sizes (default 16,32,...,16384)")
    ap.add_argument("--fresh-max", type=int)
    ap.add_argument("--sweep-pairs", type=int,
                    help="process pairs for every fresh point of the sweep (default 3, up to 15 "
                    "more where unclear)")
    ap.add_argument("--sweep-mode", choices=("pairs", "inproc"), default="pairs",
                    help="the sweep's method: process pairs (default), or in one process a "
                    "point, paused against active (gpu_offload_pause)")
    ap.add_argument("--sweep-rounds", type=int,
                    help="inproc: the most rounds a point (default 16; quick 4; an odd "
                    "number is rounded up: ABBA whole)")
    ap.add_argument("--sweep-rep-s", type=float,
                    help="inproc: seconds of paused calls a rep (default 0.05; quick 0.01)")
    ap.add_argument("--warm-min", type=int,
                    help="the smallest size of the sweep's warm points (default 256): below, "
                    "only fresh process pairs")
    ap.add_argument("--turn-gap-s", type=float,
                    help="the sweep's pause before a warm turn shorter than 2 s, so that the "
                    "other process's spinning BLAS threads are asleep (default 0.2; quick 0)")
    ap.add_argument("--max-call-s", type=float, default=30.0,
                    help="skip a sweep point whose CPU call is predicted longer")
    a = ap.parse_args()
    want = [x for x in a.sections.split(",") if x]
    try:
        fixed = V.parse_kv(a.section_s)
        workers = {tuple(k.split("/", 1)): v for k, v in V.parse_kv(a.suite_workers, int).items()}
        sizes = [int(x) for x in a.sweep_sizes.split(",")] if a.sweep_sizes else None
    except ValueError as e:
        ap.error(str(e))
    bad = [x for x in want + list(fixed) if x not in ALL]
    if bad or any(len(k) != 2 for k in workers):
        ap.error("unknown section %s (sections: %s) or a worker key not SUITE/MODE" %
                 (", ".join(bad), ",".join(ALL)))
    gpu = has_gpu()
    quick = a.quick or not gpu
    os.makedirs(a.out, exist_ok=True)
    c = S.Ctx()
    c.repo, c.build, c.out, c.quick, c.gpu = REPO, BUILD, os.path.abspath(a.out), quick, gpu
    c.smoke = a.smoke and not quick
    c.no_calibrate = a.no_calibrate
    c.calibrate_s = a.calibrate_s
    c.tmp = tempfile.mkdtemp(prefix="bench-offload-")
    c.budget = H.Budget(a.budget or (60 if quick else 420))
    c.reps = a.reps or (1 if quick else 3)
    c.fresh_max = a.fresh_max or (16 if quick else 64 if c.smoke else 1024)
    c.max_call_s = a.max_call_s
    c.warm_min = a.warm_min
    c.sweep_pairs = a.sweep_pairs
    c.sweep_mode = a.sweep_mode
    c.sweep_rounds, c.sweep_rep_s = a.sweep_rounds, a.sweep_rep_s
    c.turn_gap_s = a.turn_gap_s if a.turn_gap_s is not None else 0.0 if quick else 0.2
    c.suite_mods = [m for m in a.suites.split(",") if m]
    c.suite_workers = workers
    c.sweep_sizes = sizes
    c.py = find_python(a.python)
    c.cli = os.path.join(BUILD, "gpu-offload")
    c.lib = os.path.join(BUILD, "libgpuoffload.so")
    cuda_be = os.path.join(BUILD, "libgpuoffload-cuda.so")
    test_be = os.path.join(BUILD, "libgpuoffload-test.so")
    c.backend = os.path.abspath(a.backend) if a.backend else (
        cuda_be if not quick and os.path.exists(cuda_be) else test_be)
    c.profile = a.profile or os.environ.get("GPU_OFFLOAD_PROFILE")
    # Absolute: the suites run in a temporary directory.
    c.profile = os.path.abspath(c.profile) if c.profile else None
    if not c.profile and not quick:
        # The profile an earlier `gpu-offload calibrate` wrote here.
        home = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        p = os.path.join(home, "gpu-offload", "profile")
        c.profile = p if os.path.exists(p) else None
    c.threads = str(len(os.sched_getaffinity(0)))
    c.res = {"mode": "quick" if quick else "smoke" if c.smoke else "full", "gpu": gpu,
             "backend": c.backend, "threads": int(c.threads),
             "budget_s": c.budget.total, "reps": c.reps, "sweep_mode": c.sweep_mode,
             "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    c.md = []
    missing = [p for p in (c.cli, c.lib, c.backend) if not os.path.exists(p)]
    if missing or not c.py:
        print("bench-offload: missing %s (make -s all first)" %
              (", ".join(missing) or "a python3 with numpy"), file=sys.stderr)
        return 1
    if not quick and c.backend == test_be:
        c.note("**No CUDA backend (build/libgpuoffload-cuda.so) in this build: "
               "the GPU figures below are the CPU test backend's.**")
    plan = V.plan_sections([x for x in ALL if x in want], SHARE, c.budget.total, fixed)
    c.res["plan_s"] = {k: round(v, 1) for k, v in plan}
    for name, secs in plan:
        c.budget.section(secs)
        t = time.monotonic()
        if name != "machine" and c.budget.overall() < 5:
            c.note("## %s\n\nskipped: the budget (%.0f s) was spent." % (name, c.budget.total))
            c.res.setdefault("skipped_sections", []).append(name)
            continue
        try:
            getattr(S, "sec_" + name)(c)
        except Exception as e:      # a broken section must not lose the rest
            import traceback
            c.res.setdefault("errors", {})[name] = traceback.format_exc()
            c.md.append("\n**Section %s failed: %s** (traceback in results.json)\n" % (name, e))
        c.res.setdefault("section_s", {})[name] = round(time.monotonic() - t, 2)
        c.save()
    c.res["total_s"] = round(time.monotonic() - c.budget.t0, 1)
    c.md.append("\nSeconds per section: " + ", ".join(
        "%s %.0f" % kv for kv in c.res.get("section_s", {}).items()) +
        "; total %.0f of a budget of %.0f.\n" % (c.res["total_s"], c.budget.total))
    c.save()
    shutil.rmtree(c.tmp, ignore_errors=True)
    print("bench-offload: %s and %s" % (os.path.join(c.out, "report.md"),
                                         os.path.join(c.out, "results.json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
