"""The never-slower sweep of the gpu-offload benchmark (run.py): at every
size, the time under `gpu-offload run` (default level) against numpy's
own, judged on many PAIRED repetitions (verdict.judge). This is the pair
mode (--sweep-mode pairs, the default); --sweep-mode inproc compares
within one process instead (inproc.py).

Two kinds of point, each a sequence of pairs (one CPU measurement and
one offloaded measurement of the same work, taken one right after the
other, their order alternating from pair to pair), so that the machine's
drift (clock, memory, other load) cancels in each pair's ratio:

- fresh (n <= --fresh-max, and the mixed workload): a pair is two FRESH
  processes, a plain one and one under the offloader, each doing the
  same count of calls in one loop timed inside the process (numpy's
  import and the inputs excluded). A fresh process is a short program,
  so what is measured includes the ski-rental rule's decision whether to
  start the GPU at all; a GPU start is part of the pair. The count is
  what fits in 0.15 s on the CPU (the first CPU process finds it: its
  loop is the first pair's CPU side).
- warm (n >= 256 or --warm-min, and the mixed workload): the steady state of a
  long-lived program. Two long-lived processes, a plain one and one under
  the offloader (`work.py --serve`), hold their inputs and are driven
  alternately over their pipes: a turn is the same number of calls in
  each (at least 0.2 s on the CPU), one process computing while the
  other waits on its pipe. After warm-up turns (the offloaded one's until
  its GPU started, for at most 1 s, or as many turns as an earlier
  session needed), the timed turns are the pairs. A pair in which the GPU started (the start-up is paid once, in
  that call) is left out of the steady-state statistics and kept in the
  total ratio beside it.

Repetitions come from the budget: a first pass gives every point K1
pairs (3, enough for a clear verdict; 2 above twice --fresh-max; 1 where
a CPU call takes over 8 s), in an order that covers the range first
(small points, then large ones every other size first); a second pass spends what is left on the points whose
verdict is unclear (fewer than 3 pairs unless all lie far from 1.05, an
interquartile range that straddles 1.05, or min-of-K disagreeing with
the median), those with the fewest pairs first and among them the
nearest to the limit, then on points with fewer than K_WANT pairs, in
batches (a fresh point 2 more pairs, a warm one a new session of 3). A point is
skipped, and named, when its predicted CPU call (n^3 from the largest
measured size below it) exceeds --max-call-s, or its predicted cost what
is left."""
import os

import harness as H
import verdict as V

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work.py")

OPS = ["dgemm", "solve", "eigh", "cholesky"]
FULL = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
QUICK = [16, 48]
SMOKE = [64, 256, 2048]
MIXED = "64/200/8 gemm, solve and inv 32, cholesky 48, eigh 24, svd 16, qr 32, a gemv"
K_WANT = {"fresh": 9, "warm": 5}
# No point gets more pairs than this (an unclear one stays unclear then).
K_MAX = {"fresh": 15, "warm": 9}


class Point:
    """One (op, n, kind) of the sweep and its pairs so far."""

    def __init__(self, op, n, kind):
        self.op, self.n, self.kind = op, n, kind
        self.cpu, self.off, self.exclude = [], [], []
        self.first = []            # which side of each pair ran first
        self.count = None          # fresh: calls per process; warm: per turn
        self.per_call = None       # CPU seconds per call
        self.pair_s = None         # measured seconds per pair (processes included)
        self.setup_s = None        # warm: start, inputs and warm-up
        self.gpu = {"procs": 0, "started": 0, "offloaded": 0, "calls": 0,
                    "start_turn": None, "reasons": {}}
        self.errors, self.cmd, self.skipped = [], "", None
        self.start_turns = None    # warm: offloaded turns until the GPU start

    def key(self):
        return "%s %s %s" % (self.op, "-" if self.op == "mixed" else self.n, self.kind)

    def spec(self):
        return "%s:%d" % (self.op, self.n)

    def judge(self):
        return V.judge(self.cpu, self.off, exclude=self.exclude)

    def gpu_used(self):
        return self.gpu["started"] > 0 or self.gpu["offloaded"] > 0


def _add_reasons(p, summary):
    for k, v in summary["reasons"].items():
        p.gpu["reasons"][k] = p.gpu["reasons"].get(k, 0) + v


# ---- fresh points -----------------------------------------------------------

def _loop(c, mode, p, how):
    r = c.work(mode, p.spec(), how, max(20, c.budget.left()))
    res = (r["json"].get("results") or [{}])[0]
    return r, res.get("loop_s"), res.get("count")


def fresh_batch(c, p, k, secs):
    """k more pairs of fresh processes. The first CPU process finds the
    count (as many calls as fit in `secs`): its loop of exactly that
    many calls is the first pair's CPU side."""
    for _ in range(k):
        if c.budget.left() <= 0:
            return
        order = ("cpu", "default") if len(p.cpu) % 2 == 0 else ("default", "cpu")
        got, wall = {}, 0.0
        for mode in order:
            how = ["--count", str(p.count)] if p.count else ["--seconds", str(secs)]
            r, t, count = _loop(c, mode, p, how)
            wall += r["wall"]
            if not p.count:
                if not count or not t:
                    p.errors.append("cpu run: exit %s %s" % (r["rc"], r["other"][:2]))
                    return
                p.count, p.per_call = count, t / count
            got[mode] = t
            if mode == "default":
                p.cmd = r["cmd"]
                s = r["summary"]
                p.gpu["procs"] += 1
                p.gpu["started"] += s["startup_s"] > 0 or s["offloaded"] > 0
                p.gpu["offloaded"] += s["offloaded"]
                p.gpu["calls"] += p.count
                _add_reasons(p, s)
            if t is None:
                p.errors.append("%s run: exit %s %s" % (mode, r["rc"], r["other"][:2]))
        if got.get("cpu") and got.get("default"):
            p.first.append(order[0])
            p.cpu.append(got["cpu"])
            p.off.append(got["default"])
        p.pair_s = wall if p.pair_s is None else (p.pair_s + wall) / 2


def fresh_cost(p, k, secs):
    return k * (p.pair_s or 2 * (0.5 + secs))


# ---- warm points ------------------------------------------------------------

def _serve(c, mode, p):
    argv = c.prefix(mode) + [c.py, WORK, "--ops", p.spec(), "--serve"]
    env = c.env(mode)
    if mode == "default":
        p.cmd = H.cmdline(argv, env, c.keys(mode))
    return H.Proc(argv, env)


def _turn(c, proc, calls, timeout):
    if not proc.send(str(calls)):
        return None
    return proc.next_json(c.budget.cap(timeout))


def warm_batch(c, p, k, turn_s, pred, warm_s):
    """One session of two long-lived processes: warm-up, then k pairs of
    turns in alternation."""
    import time
    t0 = time.monotonic()
    off_turns = 0
    procs = {m: _serve(c, m, p) for m in ("cpu", "default")}
    limit = max(30.0, 10 * (pred or 1.0))
    try:
        for m, pr in procs.items():
            js = pr.next_json(c.budget.cap(60 + setup_cost(p.n)))
            if not js or not js.get("ready"):
                p.errors.append("%s: no ready line" % m)
                return
        if p.count is None:
            p.count = max(1, int(round(turn_s / pred))) if pred else 1
        # Warm-up: a turn each (the CPU's skipped for calls over 2 s); the
        # offloaded process's until its GPU started, for at most warm_s
        # (at least one turn), or as many turns as an earlier session
        # needed until its start.
        if not pred or pred * p.count <= 2:
            if _turn(c, procs["cpu"], p.count, limit) is None:
                p.errors.append("cpu: warm-up turn failed")
                return
        gpu, tw = False, time.monotonic()
        # No warm-up turn for the offloaded one either when a turn takes
        # over 5 s on the CPU (a GPU start is then a small part of its
        # pair, which is left out when there are others).
        while not (pred and pred * p.count > 5 and not p.start_turns):
            js = _turn(c, procs["default"], p.count, limit)
            off_turns += 1
            if js is None:
                p.errors.append("offloaded: warm-up turn failed")
                return
            gpu = js["gpu"]
            if gpu:
                p.start_turns = p.start_turns or off_turns
                break
            if time.monotonic() - tw >= warm_s and off_turns >= (p.start_turns or 0):
                break
        setup = time.monotonic() - t0
        t1 = time.monotonic()
        # Before each turn a pause: after a call OpenBLAS's idle threads
        # spin (2^28 cycles by default: 0.1-0.2 s) before they sleep,
        # and would take the cores from the start of the other process's
        # turn. Turns of 2 s and more do without it (the effect is then a
        # few percent at most, and the same for both sides, which
        # alternate).
        gap = c.turn_gap_s if (pred or 0) * p.count < 2 else 0.0
        done = 0
        for _ in range(k):
            if c.budget.left() <= 0:
                break
            order = ("cpu", "default") if len(p.cpu) % 2 == 0 else ("default", "cpu")
            got = {}
            for m in order:
                if gap:
                    time.sleep(gap)
                js = _turn(c, procs[m], p.count, limit)
                off_turns += m == "default"
                if js is None:
                    p.errors.append("%s: turn failed" % m)
                    return
                got[m] = js
            if got["default"]["gpu"] and not gpu:
                p.exclude.append(len(p.cpu))
                p.gpu["start_turn"] = len(p.cpu)
                p.start_turns = p.start_turns or off_turns
            gpu = got["default"]["gpu"]
            p.first.append(order[0])
            p.cpu.append(got["cpu"]["t"])
            p.off.append(got["default"]["t"])
            done += 1
            if p.per_call is None:
                p.per_call = got["cpu"]["t"] / p.count
        if done:
            ps = (time.monotonic() - t1) / done
            p.pair_s = ps if p.pair_s is None else (p.pair_s + ps) / 2
        p.setup_s = setup
    finally:
        for pr in procs.values():
            pr.close_stdin()
        res = {m: pr.wait(c.budget.cap(30 + 2 * (pred or 1))) for m, pr in procs.items()}
        s = H.summaries(res["default"][2])
        p.gpu["procs"] += 1
        p.gpu["started"] += s["startup_s"] > 0 or s["offloaded"] > 0
        p.gpu["offloaded"] += s["offloaded"]
        p.gpu["calls"] += off_turns * (p.count or 0)
        _add_reasons(p, s)
        for m, (rc, _, err, _) in res.items():
            if rc != 0:
                p.errors.append("%s: exit %s %s" % (m, rc, H.other_lines(err)[:2]))


def setup_cost(n):
    """Seconds to start a process and build inputs of n x n (a few
    matrices, numpy's generator at about 1 GB/s)."""
    return 1.0 + 4 * n * n * 8 / 1e9


def warm_cost(p, k, pred, ratio=1.0, warm_s=1.0, gap=0.2):
    calls = p.count or 1
    t_cpu = (pred or 1.0) * calls
    gaps = 2 * k * gap if t_cpu < 2 else 0.0
    turns_cpu = (1 if t_cpu <= 2 else 0) + k
    turns_off = (0 if t_cpu > 5 else max(1, warm_s / t_cpu, p.start_turns or 0)) + k
    return setup_cost(p.n) + turns_cpu * t_cpu + turns_off * t_cpu * min(1.2, ratio) + gaps


# ---- the plan -----------------------------------------------------------------

def _order(sizes):
    """Every other size first, the rest after: when the budget runs out,
    the sizes measured still span the range."""
    return sizes[::2] + sizes[1::2]


def _predict(pts, op, n):
    """CPU seconds per call of op at n from the largest measured size at
    or below it, scaled by n^e: e the log-log slope between the two
    largest measured sizes (numpy's solve, eigh and cholesky grow slower
    than n^3 where copies weigh), held within [2, 3]; 3 with one size.
    None when nothing is measured."""
    seen = sorted((p.n, p.per_call) for p in pts
                  if p.op == op and p.per_call and p.n <= n)
    if not seen:
        return None
    n1, t1 = seen[-1]
    below = [(m, t) for m, t in seen if m < n1]
    e = 3.0
    if below:
        import math
        n0, t0 = below[-1]
        if t0 > 0 and t1 > 0:
            e = min(3.0, max(2.0, math.log(t1 / t0) / math.log(n1 / n0)))
    return t1 * (n / n1) ** e


def _ratio(pts, op, n):
    """The offloaded/CPU total ratio of the largest warm point of op below
    n (to predict the offloaded side's cost), else 1."""
    best = None
    for p in pts:
        if p.op == op and p.kind == "warm" and p.cpu and p.n < n and (best is None or p.n > best.n):
            best = p
    return best.judge()["total"] if best else 1.0


def plan(c):
    sizes = c.sweep_sizes or (QUICK if c.quick else SMOKE if c.smoke else FULL)
    fresh_max = c.fresh_max
    warm_min = getattr(c, "warm_min", None) or (min(sizes) if c.quick else 256)
    pts = [Point("mixed", 0, "fresh"), Point("mixed", 0, "warm")]
    small = _order([n for n in sizes if n <= fresh_max])
    pts += [Point(op, n, "fresh") for n in small for op in OPS]
    pts += [Point(op, n, "warm") for n in _order([n for n in sizes if warm_min <= n <= fresh_max])
            for op in OPS]
    pts += [Point(op, n, "warm") for n in _order([n for n in sizes if n > fresh_max]) for op in OPS]
    return pts


def sec_sweep(c):
    if getattr(c, "sweep_mode", "pairs") == "inproc":
        from inproc import sec_sweep_inproc     # (it imports this module)
        return sec_sweep_inproc(c)
    secs = 0.02 if c.quick else 0.15
    turn_s = 0.01 if c.quick else 0.2
    warm_s = 0.0 if c.quick else 1.0
    pts = plan(c)
    measured = []

    def run_batch(p, k, first):
        if p.kind == "fresh":
            cost = fresh_cost(p, k, secs)
            pred = p.per_call
        else:
            pred = p.per_call or (_predict(measured, p.op, p.n) if p.op != "mixed" else None)
            if pred is None and p.op == "mixed":
                mf = next((q for q in measured if q.op == "mixed" and q.per_call), None)
                pred = mf.per_call if mf else None
            if first and pred is not None and pred > c.max_call_s:
                p.skipped = "CPU call predicted %.0f s > %.0f s" % (pred, c.max_call_s)
                return False
            if first and pred is not None and pred > 8:
                k = 1
            if p.count is None:
                p.count = max(1, int(round(turn_s / pred))) if pred else 1
            cost = warm_cost(p, k, pred, _ratio(measured, p.op, p.n), warm_s, c.turn_gap_s)
        # A margin: the estimate's inputs (the previous size's ratio, the
        # n^e scaling, the processes' start) are rough, and a batch that
        # runs into the deadline is killed and lost.
        cost *= 1.3
        if cost > c.budget.left():
            if first:
                p.skipped = "predicted %.0f s, %.0f s left" % (cost, c.budget.left())
            return False
        if p.kind == "fresh":
            fresh_batch(c, p, k, secs)
        else:
            warm_batch(c, p, k, turn_s, pred, warm_s)
        return True

    # Pass 1: every point, K1 pairs: enough for a clear verdict below
    # --fresh-max and in the small warm points, 2 above (1 where a CPU
    # call takes over 8 s, in run_batch).
    # --sweep-pairs K: K pairs for every fresh point in pass 1 (and up to
    # K in pass 2): a machine whose processes differ from one another by
    # more than the 5% to be judged needs many process pairs a point.
    pairs = getattr(c, "sweep_pairs", None)
    for p in pts:
        k1 = 1 if c.quick else 3 if p.kind == "fresh" or p.n <= c.fresh_max * 2 else 2
        if pairs and p.kind == "fresh":
            k1 = pairs
        if run_batch(p, k1, True):
            measured.append(p)
    # Pass 2: the unclear points first, then those with few pairs (quick
    # mode: a few batches, to run the code, not to judge).
    batches = 3 if c.quick else 10 ** 6
    while c.budget.left() > 1 and batches > 0:
        batches -= 1
        cand = []
        for p in measured:
            kmax = max(K_MAX[p.kind], pairs or 0) if p.kind == "fresh" else K_MAX[p.kind]
            kwant = max(K_WANT[p.kind], pairs or 0) if p.kind == "fresh" else K_WANT[p.kind]
            if p.errors or not p.cpu or len(p.cpu) >= kmax:
                continue
            w = V.need(p.judge(), kwant)
            if w:
                cand.append((w, -(p.pair_s or 1), p))
        cand.sort(key=lambda x: x[:2], reverse=True)
        ran = False
        for _, _, p in cand:
            if run_batch(p, 2 if p.kind == "fresh" else 3, False):
                ran = True
                break
        if not ran:
            break
    report(c, pts)


def verdict_text(bad, unclear, nf, skipped, tag, stat):
    """The lines under a sweep's table (both modes): the verdict, the
    spread where nothing ran on the GPU (nf: count, lowest, highest),
    what was skipped. tag: after the verdict (" (in-process)"); stat:
    what the spread is of ("medians", "ratios")."""
    return ("\n\n%s\n" % ("**Every measured point within %.2f%s%s.**" % (
                V.LIMIT, tag, " (unclear: %s)" % ", ".join(unclear) if unclear else "")
                if not bad else "**Over %.2f or failed%s: %s.**%s" % (
                    V.LIMIT, tag, ", ".join(bad),
                    " Unclear: %s." % ", ".join(unclear) if unclear else "")) +
            ("\nWhere nothing ran on the GPU (both sides computed on the CPU: what differs is the "
             "method's noise and the library's own cost per call) the %s of the %d points range "
             "from %.3f to %.3f.\n" % ((stat,) + tuple(nf)) if nf else "") +
            ("\nSkipped: %s.\n" % "; ".join(skipped) if skipped else ""))


def report(c, pts):
    order = {"mixed": -1, **{op: i for i, op in enumerate(OPS)}}
    pts = sorted(pts, key=lambda p: (order[p.op], p.n, p.kind))
    rows, out, bad, unclear, skipped = [], [], [], [], []
    for p in pts:
        if p.skipped:
            skipped.append("%s (%s)" % (p.key(), p.skipped))
            continue
        j = p.judge()
        d = {"op": p.op, "n": p.n, "kind": p.kind, "cpu": p.cpu, "off": p.off,
             "excluded": p.exclude, "first": p.first, "count": p.count, "per_call": p.per_call,
             "pair_s": p.pair_s, "setup_s": p.setup_s, "gpu": p.gpu, "errors": p.errors,
             "cmd": p.cmd, "judge": {k: v for k, v in j.items() if k != "ratios"},
             "ratios": j.get("ratios"), "gpu_used": p.gpu_used()}
        out.append(d)
        if not j.get("k"):
            rows.append((p.op, "-" if p.op == "mixed" else p.n, p.kind, "-", "-", "-", "-",
                         "-", "error: %s" % "; ".join(p.errors[:2]), "**error**"))
            bad.append(p.key())
            continue
        unit = p.count or 1
        tc, to = H.med(p.cpu) / unit, H.med(p.off) / unit
        if p.kind == "fresh":
            how = "%d calls a process; GPU started in %d of %d" % (
                p.count, p.gpu["started"], p.gpu["procs"])
        else:
            st = p.gpu["start_turn"]
            how = "%d a turn; %d of %d calls offloaded; %s" % (
                p.count, p.gpu["offloaded"], p.gpu["calls"],
                "GPU started in warm-up" if p.gpu_used() and st is None else
                "GPU started in pair %d%s" % (st, " (left out)" if j.get("excluded") else
                                              " (kept: the only pair)")
                if st is not None else "GPU not started")
        if p.errors:
            how += "; %d errors" % len(p.errors)
        rows.append((p.op, "-" if p.op == "mixed" else p.n, p.kind, H.fmt_s(tc), H.fmt_s(to),
                     V.spread(j), "%.3f" % j["minmin"], "%.3f" % j["total"], how, V.label(j)))
        if j["verdict"] != "ok":
            bad.append(p.key())
        elif not j["clear"]:
            unclear.append(p.key())
    nf = V.noise_floor(out)
    c.res["sweep"] = {"points": out, "skipped": skipped, "not_ok": bad, "unclear": unclear,
                      "limit": V.LIMIT, "noise_floor": nf}
    cmd = next((p.cmd for p in pts if p.kind == "fresh" and p.cmd), "")
    wcmd = next((p.cmd for p in pts if p.kind == "warm" and p.cmd), "")
    c.note("## Never slower than the CPU (default level)\n\n"
           "Fresh points: `%s` (a pair: this and the same without `gpu-offload run`, the count found by "
           "`--seconds %g` on the CPU). Warm points: `%s` and the same without `gpu-offload run`, "
           "driven alternately (`work.py --serve`: a turn of `count` calls in one, then the other). "
           "Times are per call (medians); **off/CPU** is the median of the paired ratios [quartiles] "
           "(extremes) of k pairs; min-of-K is min(offloaded) / min(CPU); total is the sum over all "
           "pairs, GPU starts included. A point is ok when the median is <= %.2f, and (unclear) when "
           "there are fewer than %d pairs (unless all of them and min-of-K lie below %.2f or above %.2f), "
           "its quartiles straddle %.2f or min-of-K disagrees. Warm turns under 2 s start %.1f s after the "
           "other's (its idle BLAS threads spin that long). mixed: one round of %s.\n\n" % (
               cmd, 0.02 if c.quick else 0.15, wcmd, V.LIMIT, V.MIN_CLEAR, V.LIMIT * V.FAR[0],
               V.LIMIT * V.FAR[1], V.LIMIT, c.turn_gap_s, MIXED) +
           H.table(["op", "n", "kind", "CPU", "offloaded", "off/CPU: median [q1 .. q3] (min .. max) of k",
                    "min-of-K", "total", "GPU", ""], rows) +
           verdict_text(bad, unclear, nf, skipped, "", "medians"))
