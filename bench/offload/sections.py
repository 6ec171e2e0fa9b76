"""The sections of the gpu-offload benchmark (run.py): the context they
share (how to run the workload in each mode) and the sections machine,
small, short, headline, nvblas and verify; sweep, mutex and suites are in
sweep.py and suites.py."""
import glob
import json
import os
import platform
import subprocess

import harness as H
import verdict as V
from sweep import sec_sweep  # noqa: F401  (run.py calls sections by name)
from suites import sec_mutex, sec_suites  # noqa: F401
from threads import sec_threads  # noqa: F401
from resident import sec_resident  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work.py")

# The headline set: (op, n full, n quick, required ratio CPU/offloaded).
HEADLINE = [("dgemm", 8192, 128, 20.0), ("sgemm", 8192, 128, 10.0),
            ("solve", 4096, 128, 10.0), ("eigh", 4096, 128, 10.0),
            ("svd", 4096, 128, 1.0)]
# The rows whose time inside the offloaded call the table shows.
BREAKDOWN = ("dgemm", "solve", "eigh")


class Ctx:
    """What every section needs: paths, mode, budget, results, report."""

    def env(self, mode, extra=None):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("GPU_OFFLOAD", "GPUMUTEX", "NVBLAS"))
             and k not in ("LD_PRELOAD", "CUDA_VISIBLE_DEVICES")}
        # The same thread count for every contender.
        e["OPENBLAS_NUM_THREADS"] = e["OMP_NUM_THREADS"] = self.threads
        if mode == "forced":
            e["GPU_OFFLOAD_FORCE"] = "gpu"
        if mode == "nvblas":
            e["LD_PRELOAD"] = self.nvblas["lib"]
            e["NVBLAS_CONFIG_FILE"] = self.nvblas["conf"]
        e.update(extra or {})
        return e

    def prefix(self, mode, trace=None):
        """argv before the program: nothing, or `gpu-offload run ...`."""
        if mode in ("cpu", "nvblas"):
            return []
        p = [self.cli, "run", "--summary", "--backend", self.backend]
        if self.profile:
            p += ["--profile", self.profile]
        if mode == "verify":
            p.append("--verify")
        if trace:
            p += ["--trace", trace]
        return p + ["--"]

    def work(self, mode, ops, args=(), timeout=600, extra=None, trace=None):
        """Run work.py once; its JSON, the summary, what else stderr said."""
        argv = self.prefix(mode, trace) + [self.py, WORK, "--ops", ops] + list(args)
        env = self.env(mode, extra)
        rc, out, err, wall = H.run(argv, env, self.budget.cap(timeout))
        js = {}
        for ln in reversed(out.splitlines()):
            if ln.startswith("{"):
                js = json.loads(ln)
                break
        return {"rc": rc, "json": js, "summary": H.summaries(err),
                "other": H.other_lines(err)[:20], "wall": wall,
                "cmd": H.cmdline(argv, env, self.keys(mode, extra))}

    def keys(self, mode, extra=None):
        k = ["OPENBLAS_NUM_THREADS"]
        if mode == "forced":
            k.append("GPU_OFFLOAD_FORCE")
        if mode == "nvblas":
            k += ["LD_PRELOAD", "NVBLAS_CONFIG_FILE"]
        return k + sorted(extra or {})

    def n(self, full, quick):
        """A problem size: the full one, the quick one, or at most 1024
        in a smoke run."""
        return quick if self.quick else min(full, 1024) if self.smoke else full

    def note(self, text):
        self.md.append("\n" + text + "\n")

    def save(self):
        with open(os.path.join(self.out, "results.json"), "w") as f:
            json.dump(self.res, f, indent=1, default=str)
        with open(os.path.join(self.out, "report.md"), "w") as f:
            f.write("\n".join(self.md) + "\n")

    def short(self, path):
        """A path as the report shows it: relative to the repository."""
        return os.path.relpath(path, self.repo) if path.startswith(self.repo) else path


def times(r):
    """The timed calls of a warm run's only result, or []."""
    res = r["json"].get("results") or [{}]
    return res[0].get("times", [])


def sh(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def sec_machine(c):
    m = {"host": platform.node(), "kernel": platform.release(),
         "python": c.py, "cores": os.cpu_count(), "threads": c.threads}
    for ln in open("/proc/cpuinfo"):
        if ln.startswith("model name"):
            m["cpu"] = ln.split(":", 1)[1].strip()
            break
    m["gpu"] = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                   "--format=csv,noheader"]) if c.gpu else "none"
    m["versions"] = sh([c.py, "-c",
                        "import numpy, sys\n"
                        "v = {'python': sys.version.split()[0], 'numpy': numpy.__version__}\n"
                        "for mod in ('scipy', 'torch'):\n"
                        "    try:\n"
                        "        v[mod] = __import__(mod).__version__\n"
                        "    except Exception:\n"
                        "        pass\n"
                        "try:\n"
                        "    cfg = numpy.show_config(mode='dicts')\n"
                        "    v['numpy_blas'] = cfg['Build Dependencies']['blas']['name']\n"
                        "except Exception:\n"
                        "    pass\n"
                        "print(' '.join('%s %s' % kv for kv in v.items()))"])
    # A copy without .git (the device's) would answer for a repository
    # above it: only this tree's own commit, else BENCH_COMMIT.
    top = sh(["git", "-C", c.repo, "rev-parse", "--show-toplevel"])
    m["commit"] = (sh(["git", "-C", c.repo, "rev-parse", "--short", "HEAD"])
                   if top and os.path.realpath(top) == os.path.realpath(c.repo)
                   else os.environ.get("BENCH_COMMIT", "unknown (a copy without .git; BENCH_COMMIT names it)"))
    m["backend"] = c.short(c.backend)
    if not c.profile and not c.no_calibrate:
        c.profile = os.path.join(c.out, "profile")
        argv = [c.cli, "calibrate", "--output", c.profile, "--backend", c.backend]
        if c.quick:
            argv += ["--max-size", "64", "--reps", "2"]
        argv += os.environ.get("BENCH_CALIBRATE_ARGS", "").split()
        rc, out, err, wall = H.run(argv, c.env("cpu"), c.calibrate_s or max(10, c.budget.left()))
        m["calibrate"] = {"cmd": H.cmdline(argv), "rc": rc, "s": round(wall, 1),
                          "said": (out + err).strip().splitlines()[-5:]}
        if rc != 0 or not os.path.exists(c.profile):
            c.profile = None
    if c.profile:
        with open(c.profile) as f:
            head = [ln.strip() for ln in f][:5]
        m["profile"] = {"path": c.short(c.profile), "head": head}
    find_nvblas(c, m)
    c.res["machine"] = m
    c.md.append("# gpu-offload on %s (%s mode)\n" % (
        m["gpu"].split(",")[0] if c.gpu else "a machine without a GPU",
        "quick: test backend, tiny sizes, no figures" if c.quick else
        "smoke: small sizes, no figures" if c.smoke else "full"))
    rows = [("started", c.res["started"]), ("commit", m["commit"]),
            ("CPU", "%s, %s cores, %s BLAS threads for every contender" %
             (m.get("cpu", "?"), m["cores"], c.threads)),
            ("GPU", m["gpu"]), ("versions", m["versions"]),
            ("backend", m["backend"]),
            ("profile", "%s (%s)" % (m["profile"]["path"], "; ".join(m["profile"]["head"][1:3]))
             if c.profile else "none: the default level keeps every call on the CPU"),
            ("NVBLAS", c.nvblas["what"])]
    if "calibrate" in m:
        rows.append(("calibration", "`%s`: exit %s in %.0f s" % (
            m["calibrate"]["cmd"], m["calibrate"]["rc"], m["calibrate"]["s"])))
    c.md.append(H.table(["", ""], rows))
    c.md.append("\nTimes are medians of %d timed calls after one warm-up call "
                "unless a table says otherwise; ratio = CPU time / offloaded time "
                "(> 1: the offloader is faster)." % c.reps)


def find_nvblas(c, m):
    """libnvblas.so and an nvblas.conf naming a CPU BLAS that defines the
    standard names (NVBLAS forwards what it does not offload there)."""
    libs = []
    for pat in ("/usr/local/cuda/lib64/libnvblas.so*",
                "/usr/local/cuda/targets/*/lib/libnvblas.so*",
                "/usr/lib/x86_64-linux-gnu/libnvblas.so*"):
        libs += sorted(glob.glob(pat))
    libs += sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(c.py)),
                                          "lib", "python3*", "site-packages",
                                          "nvidia", "*", "lib", "libnvblas.so*")))
    cpu = None
    for pat in ("/usr/lib/x86_64-linux-gnu/libopenblas.so*",
                "/usr/lib/x86_64-linux-gnu/libblas.so.3",
                "/usr/lib/x86_64-linux-gnu/openblas*/libblas.so.3",
                "/usr/lib64/libopenblas.so*"):
        g = sorted(glob.glob(pat))
        if g:
            cpu = g[0]
            break
    if not cpu:
        # numpy's own OpenBLAS: it has only scipy_* names, so NVBLAS's CPU
        # fall-back would find nothing, but numpy never calls NVBLAS anyway.
        cpu = sh([c.py, "-c", "import numpy, glob, os; d = os.path.dirname(numpy.__file__); "
                  "print((glob.glob(d + '/../numpy.libs/*openblas*') + [''])[0])"]) or None
    conf = os.path.join(c.out, "nvblas.conf")
    with open(conf, "w") as f:
        f.write("NVBLAS_LOGFILE %s\nNVBLAS_CPU_BLAS_LIB %s\nNVBLAS_GPU_LIST 0\n"
                "NVBLAS_AUTOPIN_MEM_ENABLED\n" % (os.path.join(c.out, "nvblas.log"), cpu or "none"))
    if libs:
        lib = [x for x in libs if os.path.islink(x) is False] or libs
        c.nvblas = {"lib": lib[0], "conf": conf, "cpu": cpu, "real": True,
                    "what": "%s, CPU BLAS %s (%s)" % (lib[0], cpu, c.short(conf))}
    else:
        # No NVBLAS here: the system BLAS stands in so that the section's
        # code runs (quick mode); its figures mean nothing.
        c.nvblas = {"lib": cpu or "", "conf": conf, "cpu": cpu, "real": False,
                    "what": "not found; stand-in %s (the harness's code only)" % cpu}
    m["nvblas"] = c.nvblas


def sec_small(c):
    exe = os.path.join(c.build, "bench", "offload_small")
    if not os.path.exists(exe):
        c.note("## The cost of a small call\n\nskipped: build/bench/offload_small "
               "is not built (it links libblas.so.3; `make bench-offload` builds it where that exists).")
        return
    e = c.env("cpu")
    _, plain, _, _ = H.run([exe, "200000"], e, 60)
    e2 = dict(e, LD_PRELOAD=c.lib)
    _, pre, _, _ = H.run([exe, "200000"], e2, 60)
    rows = []
    for a, b in zip(plain.split("\n"), pre.split("\n")):
        if a.split() and b.split():
            x, y = float(a.split()[1]), float(b.split()[1])
            rows.append((a.split()[0], "%.1f ns" % x, "%.1f ns" % y, "+%.1f ns" % (y - x)))
    c.res["small"] = rows
    c.note("## The cost of a small call (below GPU_OFFLOAD_MIN_FLOPS)\n\n"
           "`build/bench/offload_small 200000`, without and with `LD_PRELOAD=build/libgpuoffload.so`, best of 5.\n\n" +
           H.table(["call", "without", "with", "added"], rows))


def sec_short(c):
    ops = "dgemm:64,solve:64,eigh:64,cholesky:64"
    tdir = os.path.join(c.tmp, "short-trace")
    r = c.work("default", ops, ["--warmup", "0", "--reps", "3"], 120, trace=tdir)
    rep = H.trace_report(c.cli, tdir, c.env("cpu"))
    plain = c.work("cpu", ops, ["--warmup", "0", "--reps", "3"], 120)
    # Positive control: forced, the same program starts the GPU, and the
    # probe sees the backend (and, on a GPU machine, libcuda.so.1) mapped.
    ctl = c.work("forced", ops, ["--warmup", "0", "--reps", "1"], 120)
    mp, cm = r["json"].get("maps", {}), ctl["json"].get("maps", {})
    ok = (r["rc"] == 0 and mp and not mp.get("libcuda") and not mp.get("backend")
          and r["summary"]["offloaded"] == 0 and r["summary"]["startup_s"] == 0
          and rep["starts"] == 0)
    ctl_ok = bool(cm.get("backend")) and (cm.get("libcuda") or c.quick)
    walls = short_pairs(c, ops, plain["wall"])
    j = V.judge(walls["plain"], walls["default"])
    c.res["short"] = {"ok": ok, "control_ok": ctl_ok, "run": r, "trace": rep,
                      "plain_wall": plain["wall"], "control": ctl,
                      "pairs": walls, "judge": j}
    c.note("## A short program pays no CUDA start-up\n\n`%s`\n\n" % r["cmd"] + H.table(
        ["", "short program, default level", "same, forced (control)"],
        [("libcuda.so.1 mapped at exit", mp.get("libcuda"), cm.get("libcuda")),
         ("backend mapped at exit", bool(mp.get("backend")), bool(cm.get("backend"))),
         ("summary: offloaded / start-up", "%d / %.3f s" % (r["summary"]["offloaded"], r["summary"]["startup_s"]),
          "%d / %.3f s" % (ctl["summary"]["offloaded"], ctl["summary"]["startup_s"])),
         ("trace: GPU started", rep["starts"], "-"),
         ("process wall time (plain python: %s)" % H.fmt_s(plain["wall"]), H.fmt_s(r["wall"]), H.fmt_s(ctl["wall"]))]) +
        "\n\n%s: %s\n" % ("**PASS**" if ok else "**FAIL**",
                          "no cuInit can have happened (libcuda.so.1 never loaded) and the GPU never started"
                          if ok else "see results.json short") +
        ("" if ctl_ok else "\n**The control did not map the backend: the probe proves nothing here.**\n") +
        "\n**Never slower, the whole short program**: %d process pairs, plain and at the "
        "default level one right after the other (ABBA), wall time of each process "
        "(python's start, numpy's import, the calls, the exit: what the library adds to "
        "a short program, its loading and configuration and summary included): "
        "default / plain %s: %s\n" % (j.get("k", 0), V.spread(j), V.label(j)))


# Process pairs of the short program (each a few hundred ms): enough that
# the median pair resolves a few percent (a process's start varies).
SHORT_PAIRS = (3, 16)


def short_pairs(c, ops, one):
    """Wall times of the short program in process pairs, plain ("cpu") and
    at the default level, ABBA order (the plain one first in even pairs),
    as many as SHORT_PAIRS allows and the budget keeps (each pair about
    twice `one`, the plain process's wall time)."""
    want = SHORT_PAIRS[0] if c.quick else SHORT_PAIRS[1]
    walls = {"plain": [], "default": []}
    for i in range(want):
        if c.budget.left() < 4 * max(one or 0, 0.1):
            break
        order = ("cpu", "default") if i % 2 == 0 else ("default", "cpu")
        got = {}
        for m in order:
            w = c.work(m, ops, ["--warmup", "0", "--reps", "3"], 120)
            got[m] = w["wall"] if w["rc"] == 0 else None
        walls["plain"].append(got["cpu"])
        walls["default"].append(got["default"])
    return walls


def warm(c, mode, op, n, reps, warmup=1, timeout=None, pre=None, trace=None):
    """One process: `warmup` calls, then `reps` timed ones (after, with
    `pre`, calls until the GPU started, at most pre = (calls, seconds))."""
    args = ["--warmup", str(warmup), "--reps", str(reps)]
    if pre:
        args += ["--until-gpu", str(pre[0]), "--until-gpu-s", str(pre[1])]
    r = c.work(mode, "%s:%d" % (op, n), args, timeout or max(30, c.budget.left()), trace=trace)
    res = (r["json"].get("results") or [{}])[0]
    s = r["summary"]
    return {"t": H.med(times(r)), "times": times(r), "rc": r["rc"],
            "offloaded": s["offloaded"], "reasons": s["reasons"],
            "gpu_s": s["gpu_s"], "startup_s": s["startup_s"],
            "gpu_per_call": s["gpu_s"] / s["offloaded"] if s["offloaded"] else None,
            "pre": res.get("pre"), "spans": res.get("spans", []),
            "other": r["other"], "cmd": r["cmd"]}


# At the default level: calls (at most, and seconds) before the GPU start.
PRE = (12, 20.0)


def _pre_text(p):
    """'3 (3.1 s), then started' for the default level's first calls."""
    pre = p.get("pre")
    if not pre:
        return "-"
    if pre["started"]:
        k = pre["calls_before"]
        return "%d (%s)" % (k, H.fmt_s(sum(pre["times"][:k]))) if k else "0: started in the first call"
    return "**not started** in %d calls (%s)" % (len(pre["times"]), H.fmt_s(sum(pre["times"])))


def _inside(bd, whole):
    """'85.0 ms of 667 ms (13%)': the time inside the offloaded call(s)
    (the traced run's, verdict.breakdown) against the whole numpy call
    (the untraced forced run's median)."""
    b = bd and bd["breakdown"]
    if not b or not whole:
        return "-"
    return "%s of %s (%.0f%%)" % (H.fmt_s(b["gpu"]), H.fmt_s(whole), 100 * b["gpu"] / whole)


def traced_breakdown(c, op, n):
    """A forced run with a trace, its timed calls' time split by the
    trace's records (verdict.breakdown); its own process, so that the
    trace's cost (every small call recorded) stays out of the figures."""
    tdir = os.path.join(c.tmp, "breakdown-%s" % op)
    r = warm(c, "forced", op, n, 2, trace=tdir)
    b = V.breakdown([tuple(x) for x in r["spans"]], H.read_traces(tdir))
    return {"run": r, "breakdown": b}


def sec_headline(c):
    rows, out, brows = [], [], []
    for op, nf, nq, need in HEADLINE:
        n = c.n(nf, nq)
        if c.budget.left() <= 0:
            rows.append((op, n) + ("skipped: out of time",) * 8)
            continue
        # svd's CPU call takes 8 s: its first call's extra costs (page
        # faults of the workspace) are a fraction of a percent of it.
        p = {"cpu": warm(c, "cpu", op, n, c.reps, warmup=0 if op == "svd" and not c.quick else 1),
             "default": warm(c, "default", op, n, c.reps, pre=PRE),
             "forced": warm(c, "forced", op, n, c.reps)}
        if op in ("dgemm", "sgemm") and c.nvblas["lib"]:
            p["nvblas"] = warm(c, "nvblas", op, n, c.reps)
        bd = traced_breakdown(c, op, n) if op in BREAKDOWN else None
        cpu = p["cpu"]["t"]
        ratio = {m: (cpu / v["t"] if cpu and v["t"] else None) for m, v in p.items()}
        best = ratio["default"]
        started = (p["default"]["pre"] or {}).get("started")
        rows.append((op, n, H.fmt_s(cpu),
                     "%s (%s)%s" % (H.fmt_s(p["default"]["t"]), H.fmt_x(ratio["default"]),
                                    "" if started else " **CPU: not started**"),
                     _pre_text(p["default"]),
                     "%s (%s)" % (H.fmt_s(p["forced"]["t"]), H.fmt_x(ratio["forced"])),
                     _inside(bd, p["forced"]["t"]) if bd else "",
                     "%s (%s)" % (H.fmt_s(p["nvblas"]["t"]), H.fmt_x(ratio["nvblas"])) if "nvblas" in p else "n/a",
                     ">= %gx" % need if need > 1 else "> 1x",
                     ("ok" if best and (best >= need if need > 1 else best > 1) else "**MISSED**")))
        out.append({"op": op, "n": n, "required": need, "ratio": ratio, "runs": p,
                    "breakdown": bd})
        if bd and bd["breakdown"]:
            b, whole = bd["breakdown"], p["forced"]["t"]
            bd["whole_untraced"] = whole
            brows.append((op, n, H.fmt_s(whole), "%s (copies %s; %d calls: %s)" % (
                H.fmt_s(b["gpu"]), H.fmt_s(b["copy"]), b["gpu_calls"], ", ".join(b["gpu_ops"]) or "-"),
                "%s (%.0f%%)" % (H.fmt_s(whole - b["gpu"]), 100 * (whole - b["gpu"]) / whole) if whole else "-",
                ", ".join("%d %s" % (k, o) for o, k in sorted(b["cpu_by_op"].items(), key=lambda x: -x[1])[:4]) or "none",
                H.fmt_s(b["whole"])))
    c.res["headline"] = out
    cmd = out[0]["runs"]["default"]["cmd"] if out else ""
    c.note("## Headline set\n\nOffloaded: `%s` (OP:N per row; forced adds "
           "GPU_OFFLOAD_FORCE=gpu and runs `--warmup 1 --reps %d`; NVBLAS: `LD_PRELOAD=libnvblas.so "
           "NVBLAS_CONFIG_FILE=nvblas.conf python3 bench/offload/work.py ...`; CPU: the same python3 "
           "without either). solve has an n x n right-hand side; svd is numpy's (gesdd, full matrices).\n\n"
           "**Default level, steady state**: the ski-rental rule keeps a program's first calls on the "
           "CPU by design (the GPU's start-up is paid only once the predicted savings reached the level's "
           "multiple of it), so the process first calls until the GPU has started (`--until-gpu %d`, at "
           "most %.0f s), then one warm-up and %d timed calls: the default-level time is the median of "
           "those, after the start; the column beside it says how many calls ran on the CPU before the "
           "start (and their time): the price of the rule, paid once per process. **In the GPU call**: "
           "from the breakdown below.\n\n" % (cmd, c.reps, PRE[0], PRE[1], c.reps) +
           H.table(["op", "n", "CPU (numpy)", "default level, steady state (ratio)",
                    "default: calls on the CPU before the GPU start", "forced (ratio)",
                    "forced: in the GPU call / whole call", "NVBLAS (ratio)", "required", ""], rows) +
           "\n\n**Where a forced call's time goes**: the whole numpy call is the forced run's above "
           "(median); the time inside the calls that ran on the GPU (the backend's whole call, copies "
           "included) comes from one more forced process per row with `--trace` (its own, so that "
           "recording every small call stays out of the figures above), 1 warm-up and 2 timed calls, "
           "each timed call's span split by the trace's records (median of the 2). Outside them: numpy's "
           "own work around the LAPACK/BLAS call, chiefly its linearization (one strided ?copy per "
           "column of every matrix into Fortran order, and back: calls below the size threshold, which "
           "stay on the CPU and which the trace records without timing them), allocating and first "
           "touching the result, and the wrapper's bookkeeping.\n\n" +
           H.table(["op", "n", "whole numpy call (forced)", "in GPU calls", "outside them",
                    "CPU-side BLAS/LAPACK calls in one numpy call", "whole, traced run"], brows))
    offl = [(o["op"], o["runs"]["default"]["offloaded"], o["runs"]["default"]["reasons"]) for o in out]
    c.note("Calls offloaded at the default level (all calls of the process), with the reasons of the others: " +
           "; ".join("%s %d %s" % (op, k, ",".join("%s=%d" % kv for kv in r.items())) for op, k, r in offl))


def sec_nvblas(c):
    if not c.nvblas["lib"]:
        c.note("## NVBLAS\n\nskipped: no NVBLAS and no stand-in")
        return
    n = c.n(8192, 96)
    r = {m: warm(c, m, "dgemm32", n, c.reps) for m in ("nvblas", "cpu")}
    nv = warm(c, "nvblas", "dgemm", n, c.reps)
    c.res["nvblas"] = {"direct": r, "numpy": nv, "lib": c.nvblas}
    c.note("## NVBLAS: where it applies\n\nNVBLAS replaces the standard Fortran names (`dgemm_`), which "
           "numpy's bundled OpenBLAS never calls (it calls `scipy_dgemm_64_`). The same dgemm n=%d called "
           "through `dgemm_` by ctypes (`work.py --ops dgemm32:N`, 32-bit integers), with NVBLAS preloaded, "
           "against numpy's `A @ B` under NVBLAS. %s\n\n" % (n, "" if c.nvblas["real"] else
                                                             "**Stand-in, not NVBLAS: no figures.**") +
           H.table(["call", "time", "note"],
                   [("dgemm_ via ctypes, NVBLAS preloaded", H.fmt_s(r["nvblas"]["t"]),
                     "exit %s %s" % (r["nvblas"]["rc"], "; ".join(r["nvblas"]["other"][:2]))),
                    ("dgemm_ via ctypes, no preload (%s)" % ("the system BLAS" if r["cpu"]["rc"] == 0 else "none defined"),
                     H.fmt_s(r["cpu"]["t"]), "exit %s" % r["cpu"]["rc"]),
                    ("numpy A @ B, NVBLAS preloaded", H.fmt_s(nv["t"]), "no offload: see the headline's CPU time")]))


def sec_verify(c):
    ops = ",".join("%s:%d" % (op, c.n(nf, nq)) for op, nf, nq, _ in HEADLINE)
    r = c.work("verify", ops, ["--warmup", "0", "--reps", "1"], max(30, c.budget.left()))
    mism = [ln for ln in r["other"] if "verify:" in ln]
    # Verify mode's double runs are counted under the reason `verify`.
    checked = r["summary"]["offloaded"] + r["summary"]["reasons"].get("verify", 0)
    ok = r["rc"] == 0 and not mism and checked > 0
    c.res["verify"] = {"ok": ok, "checked": checked, "run": r, "mismatches": mism}
    c.note("## Verify mode over the headline set\n\n`%s`\n\n" % r["cmd"] +
           "exit %s; %d calls run on both devices (the summary's reason `verify`); "
           "%d mismatch lines; %s\n" % (r["rc"], checked, len(mism),
                                        "**PASS**" if ok else "**FAIL**") +
           "".join("\n    %s" % ln for ln in r["other"][:10]))
