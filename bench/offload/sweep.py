"""The never-slower sweep of the gpu-offload benchmark (run.py): at every
size, the time under `gpu-offload run` (default level) over numpy's own.

Small sizes run in FRESH processes, each a short program doing one loop of
calls, so that what is measured includes the ski-rental rule's decision
whether to start the GPU at all: one CPU process first finds how many
calls fit in a fixed time, then processes under the offloader and plain
ones alternate with exactly that many calls (the loop timed inside the
process, numpy's import excluded). Large sizes run warm: one process per
size and contender, a warm-up call, then timed calls. A point whose CPU
time, predicted from the previous size of the same operation (n^3), does
not fit what is left of the budget or exceeds --max-call-s is skipped and
the report says so. Every other size is measured first, the rest after,
so that a budget that runs out leaves the range covered, only sparser."""
import harness as H

OPS = ["dgemm", "solve", "eigh", "cholesky"]
FULL = [16, 32, 64, 128, 256, 512, 768, 1024, 2048, 3000, 4096,
        6144, 8192, 12288, 16384]
QUICK = [16, 48]
LIMIT = 1.05


def _loop(c, mode, op, n, how):
    r = c.work(mode, "%s:%d" % (op, n), how, max(20, c.budget.left()))
    res = (r["json"].get("results") or [{}])[0]
    return r, res.get("loop_s"), res.get("count")


def fresh(c, op, n, secs, reps):
    r0, t0, count = _loop(c, "cpu", op, n, ["--seconds", str(secs)])
    if not count:
        return {"error": "cpu run: exit %s %s" % (r0["rc"], r0["other"][:2])}
    cpu, off, started, cmd, reasons = [t0], [], 0, "", {}
    for i in range(reps):
        r, t, _ = _loop(c, "default", op, n, ["--count", str(count)])
        cmd = r["cmd"]
        if t is not None:
            off.append(t)
        started += r["summary"]["startup_s"] > 0 or r["summary"]["offloaded"] > 0
        for k, v in r["summary"]["reasons"].items():
            reasons[k] = reasons.get(k, 0) + v
        if i < reps - 1:
            _, t, _ = _loop(c, "cpu", op, n, ["--count", str(count)])
            if t is not None:
                cpu.append(t)
    return {"kind": "fresh", "count": count, "cpu": cpu, "off": off,
            "started": started, "procs": reps, "reasons": reasons, "cmd": cmd,
            "per_call": H.med(cpu) / count}


def warm_point(c, op, n, pred):
    slow = pred is not None and pred > 5
    cpu = c.work("cpu", "%s:%d" % (op, n),
                 ["--warmup", "0" if pred and pred > 2 else "1",
                  "--reps", "1" if slow else str(c.reps)], max(20, c.budget.left()))
    off = c.work("default", "%s:%d" % (op, n),
                 ["--warmup", "1", "--reps", "1" if slow else str(c.reps)],
                 max(20, c.budget.left()))
    tc = H.med((cpu["json"].get("results") or [{}])[0].get("times", []))
    to = H.med((off["json"].get("results") or [{}])[0].get("times", []))
    if tc is None or to is None:
        return {"error": "exit %s/%s %s" % (cpu["rc"], off["rc"], (cpu["other"] + off["other"])[:2])}
    return {"kind": "warm", "cpu": [tc], "off": [to], "per_call": tc,
            "offloaded": off["summary"]["offloaded"], "reasons": off["summary"]["reasons"],
            "cmd": off["cmd"], "reps": 1 if slow else c.reps}


def _order(sizes):
    """Every other size first, the rest after: when the budget runs out,
    the sizes measured still span the range."""
    return sizes[::2] + sizes[1::2]


def _predict(seen, n):
    """CPU seconds per call at n from the largest measured size below it
    (n^3), or None."""
    below = [m for m in seen if m < n]
    if not below:
        return None
    m = max(below)
    return seen[m] * (n / m) ** 3


def _warm_cost(c, n, pred):
    calls = (0 if pred > 2 else 1) + (1 if pred > 5 else c.reps)
    # the CPU's calls, the offloaded process (its start and a few calls),
    # each process building its inputs
    return pred * calls + 3 + 2 * (1 + n * n / 4e7)


def sec_sweep(c):
    sizes = QUICK if c.quick else [64, 2048] if c.smoke else FULL
    secs = 0.02 if c.quick else 0.1
    freps = 1 if c.quick else min(c.reps, 2)
    seen = {op: {} for op in OPS}      # op -> n -> CPU seconds per call
    pts, skipped = [], []
    mixed = fresh(c, "mixed", 0, secs, freps)
    pts.append(("mixed", "-", mixed))
    for n in _order(sizes):
        for op in OPS:
            pred = _predict(seen[op], n)
            if n <= c.fresh_max:
                cost = (2 * freps) * (0.5 + secs)
            else:
                cost = _warm_cost(c, n, pred if pred is not None else 1.0)
            if pred is not None and pred > c.max_call_s:
                skipped.append("%s %d (CPU call predicted %.0f s > %.0f s)" % (op, n, pred, c.max_call_s))
                continue
            if cost > c.budget.left():
                skipped.append("%s %d (predicted %.0f s, %.0f s left)" % (op, n, cost, c.budget.left()))
                continue
            p = fresh(c, op, n, secs, freps) if n <= c.fresh_max else warm_point(c, op, n, pred)
            pts.append((op, n, p))
            if "per_call" in p:
                seen[op][n] = p["per_call"]
    pts.sort(key=lambda x: (OPS.index(x[0]) if x[0] in OPS else -1,
                            x[1] if isinstance(x[1], int) else 0))
    rows, bad = [], []
    for op, n, p in pts:
        if "error" in p:
            rows.append((op, n, "-", "-", "-", "error: %s" % p["error"], ""))
            bad.append("%s %s" % (op, n))
            continue
        tc, to = H.med(p["cpu"]), H.med(p["off"])
        q = to / tc if tc and to else None
        ok = q is not None and q <= LIMIT
        if not ok:
            bad.append("%s %s" % (op, n))
        how = ("fresh x%d, %d calls, GPU started in %d" % (p["procs"], p["count"], p["started"])
               if p["kind"] == "fresh" else "warm, %d offloaded" % p["offloaded"])
        unit = p["count"] if p["kind"] == "fresh" else 1
        rows.append((op, n, H.fmt_s(tc / unit), H.fmt_s(to / unit),
                     "%.3f" % q if q else "-", how, "ok" if ok else "**SLOWER**"))
        p["ratio"] = q
    c.res["sweep"] = {"points": [{"op": op, "n": n, **p} for op, n, p in pts],
                      "skipped": skipped, "not_ok": bad, "limit": LIMIT}
    cmd = next((p["cmd"] for _, _, p in pts if p.get("cmd")), "")
    c.note("## Never slower than the CPU (default level)\n\nOffloaded: `%s` (fresh: `--seconds %g` "
           "on the CPU finds the count, then `--count C`; warm: `--warmup 1 --reps R`). Time per call; "
           "offloaded / CPU must be <= %.2f. mixed: one round of %s.\n\n" % (
               cmd, secs, LIMIT, "64/200/8 gemm, solve and inv 32, cholesky 48, eigh 24, svd 16, qr 32, a gemv") +
           H.table(["op", "n", "CPU", "offloaded", "off/CPU", "how", ""], rows) +
           "\n\n%s\n" % ("**All measured points within %.2f.**" % LIMIT if not bad else
                         "**Over %.2f or failed: %s.**" % (LIMIT, ", ".join(bad))) +
           ("\nSkipped: %s.\n" % "; ".join(skipped) if skipped else ""))
