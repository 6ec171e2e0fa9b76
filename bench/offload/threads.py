"""The benchmark's threads section (run.py `threads`): programs that call
BLAS from many threads at once, plain and under `gpu-offload run` at the
default level, side by side: 16 and 64 Python threads of small dgemm at
sizes around the size threshold and around the model's crossover (from
the profile in use), scikit-learn's KMeans and a joblib-parallel
workload. Each point is process pairs in alternating order (ABAB...),
each process timing its workload after a warm-up (threadwork.py);
verdict: the median of the paired ratios offloaded / plain at most 1.05."""
import json
import os

import harness as H

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "threadwork.py")
LIMIT = 1.05
THREADS = (16, 64)


def _curve(line):
    return [tuple(float(v) for v in p.split(":")) for p in line.split()[2:]]


def _speed(curve, w):
    """The profile curve's speed at w (log-log interpolation, flat
    outside), as the model (src/offload/model.c) computes it."""
    import math
    if w <= curve[0][0] or len(curve) == 1:
        return curve[0][1]
    if w >= curve[-1][0]:
        return curve[-1][1]
    for (w0, s0), (w1, s1) in zip(curve, curve[1:]):
        if w <= w1:
            t = (math.log(w) - math.log(w0)) / (math.log(w1) - math.log(w0))
            return math.exp(math.log(s0) + t * (math.log(s1) - math.log(s0)))
    return curve[-1][1]


def crossover(profile, speedup=1.3):
    """The smallest square dgemm side the model sends to the GPU at the
    default level (5: 1.3x), uncorrected; None without a profile."""
    if not profile or not os.path.exists(profile):
        return None
    cpu = gpu = None
    h2d = d2h = (0.0, 1e30)
    for ln in open(profile):
        f = ln.split()
        if len(f) > 2 and f[0] == "cpu" and f[1] == "dgemm":
            cpu = _curve(ln)
        elif len(f) > 2 and f[0] == "gpu" and f[1] == "dgemm":
            gpu = _curve(ln)
        elif len(f) == 3 and f[0] in ("h2d", "d2h"):
            v = (float(f[1]), float(f[2]))
            h2d, d2h = (v, d2h) if f[0] == "h2d" else (h2d, v)
    if not cpu or not gpu:
        return None
    n = 16
    while n <= 16384:
        w, b = 2.0 * n ** 3, 8.0 * n * n
        tc = w / _speed(cpu, w)
        tg = (w / _speed(gpu, w) + h2d[0] + 3 * b / h2d[1] + d2h[0] + b / d2h[1])
        if tc >= speedup * tg:
            return n
        n = int(n * 1.25) + 1
    return None


def points(c):
    """(label, worker args, threads) for every point of the section."""
    pts = []
    if c.quick:
        return [("gemm 256x128x64, 16 threads", ["gemm", "16", "20", "256", "128", "64"], 16)]
    x = crossover(c.profile)
    sizes = [("256x128x64 (4.2 Mflop: above the threshold)", (256, 128, 64), 400),
             ("80x80x80 (1.02 Mflop: at the threshold)", (80, 80, 80), 400)]
    if x:
        for f, tag in ((0.5, "half the crossover"), (1.0, "the crossover"),
                       (2.0, "twice the crossover")):
            n = max(16, int(x * f))
            calls = max(2, int(400 * (256 * 128 * 64) / (n ** 3)))
            sizes.append(("%dx%dx%d (%s, n=%d)" % (n, n, n, tag, x), (n, n, n), min(calls, 400)))
    for t in THREADS:
        for label, (m, k, n), calls in sizes:
            calls_t = max(2, calls * 16 // t)
            pts.append(("gemm %s, %d threads x %d calls" % (label, t, calls_t),
                        ["gemm", str(t), str(calls_t), str(m), str(k), str(n)], t))
        pts.append(("scikit-learn KMeans 20000x50, %d threads" % t, ["kmeans", str(t)], t))
        pts.append(("joblib, %d threads, solve 128 + gemm 256x128x64" % t, ["joblib", str(t)], t))
    return pts


def one(c, mode, args, threads):
    env = c.env(mode)
    if args[0] == "kmeans":
        env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(threads)
    argv = c.prefix(mode) + [c.py, WORKER] + args
    rc, out, err, wall = H.run(argv, env, c.budget.cap(300))
    js = {}
    for ln in reversed(out.splitlines()):
        if ln.startswith("{"):
            js = json.loads(ln)
            break
    return {"rc": rc, "js": js, "summary": H.summaries(err), "wall": wall,
            "err": H.other_lines(err)[:5]}


def sec_threads(c):
    pairs = 1 if c.quick else 3
    rows, res = [], []
    for label, args, threads in points(c):
        if c.budget.left() < 5:
            rows.append((label, "-", "-", "-", "skipped: the section's budget was spent"))
            continue
        plain, off, ratios, skip, summ = [], [], [], None, None
        for i in range(pairs):
            order = ("cpu", "default") if i % 2 == 0 else ("default", "cpu")
            got = {}
            for m in order:
                r = one(c, m, args, threads)
                if r["js"].get("skip"):
                    skip = r["js"]["skip"]
                    break
                got[m] = r["js"].get("s") if r["rc"] == 0 else None
                if m == "default":
                    summ = r["summary"]
            if skip:
                break
            plain.append(got.get("cpu"))
            off.append(got.get("default"))
            if got.get("cpu") and got.get("default"):
                ratios.append(got["default"] / got["cpu"])
        if skip:
            rows.append((label, "-", "-", "-", "skipped: " + skip))
            res.append({"point": label, "skip": skip})
            continue
        ratios.sort()
        med = ratios[len(ratios) // 2] if ratios else None
        ok = med is not None and med <= LIMIT
        reasons = ", ".join("%s=%d" % kv for kv in sorted((summ or {}).get("reasons", {}).items()))
        rows.append((label, H.fmt_s(sorted(x for x in plain if x)[len(plain) // 2]) if any(plain) else "-",
                     H.fmt_s(sorted(x for x in off if x)[len(off) // 2]) if any(off) else "-",
                     "%.3fx" % med if med else "-",
                     ("ok" if ok else "**SLOWER**") + (" (%s)" % reasons if reasons else "")))
        res.append({"point": label, "args": args, "plain": plain, "offload": off,
                    "ratios": ratios, "median": med, "ok": ok, "summary": summ})
    c.res["threads"] = {"limit": LIMIT, "crossover_n": crossover(c.profile), "points": res}
    c.note("## Many threads calling BLAS\n\nEach point: %d process pairs, plain and under "
           "`gpu-offload run` at the default level in alternating order, each process "
           "timing its workload after a warm-up (bench/offload/threadwork.py); ratio = "
           "median of the paired ratios offloaded / plain, at most %.2fx. The model's "
           "dgemm crossover at the default level, from the profile: n = %s.\n\n" % (
               pairs, LIMIT, crossover(c.profile)) +
           H.table(["workload", "plain", "offloaded", "ratio", "verdict (reasons)"], rows))
