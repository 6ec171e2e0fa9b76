"""The never-slower sweep IN ONE PROCESS (run.py --sweep-mode inproc): at
every point (op, size), one process under `gpu-offload run` at the
default level times the same numpy work alternately with the offloader
paused (gpu_offload_pause: every wrapper calls the CPU library straight
away) and active, so that the ratio carries none of the state a process
is born with (page placement, the CPUs and NUMA node it runs on), which
on a 16-vCPU VM differed by 50% from one process to the next and hid the
5% to be judged in the pair mode (sweep.py).

A point (work.py --inproc R): warm-up calls, active, until the GPU
started or --warm-s passed (the ski-rental rule and the start behind
it, as the warm pairs' warm-up); the count of calls a rep (about
--rep-s of paused calls); then R rounds of one paused and one active rep
in ABBA order. ratio = median(active) / median(paused), the rounds'
ratios its spread (verdict.judge_inproc). A round whose active rep
started the GPU is left out (kept in the total), and with it the other
round of its ABBA pair (rounds 0-1, 2-3, ...) where at least two rounds
are left: a round alone would leave the order unbalanced (the drift
below).

What the paused side still pays beyond the CPU library alone: the
wrapper's entry on every call (a PLT jump, a TLS load, the gate word, the
site cache). The point's bound = calls a rep (the summary's counts:
paused over the paused calls made; nested calls per call of the work from
all the process's calls when nothing was offloaded, else all of them
charged to the paused side) x the cost of a paused call (measured here by
build/bench/offload_small, paused against no library, the worst case per
wrapper call; else by build/bench/entry_cost on numpy's bundled
OpenBLAS; an assumed ENTRY_NS_ASSUMED where neither runs) over the
paused rep's time. The verdict is on ratio x (1 + bound).

Not covered: a fresh process's cold start (the first calls, the GPU
start of a short program), which the pair mode's fresh points and the
`short` section cover.

Rounds come from the budget: a point gets R_MAX rounds when that fits
its share (what is left over the points left), fewer down to R_MIN (2
where a CPU call takes over 2 s, 1 over 8 s), and is skipped (named)
when even those do not fit what is left or its CPU call is predicted
over --max-call-s. Always an even number of rounds but for 1: only then
is the ABBA order whole (paused and active in as many first as second
places), so that a drift over the point (the machine warming, another
job starting) falls on both sides alike; with an odd R the medians'
ratio carries one rep's drift (paused first in one round more), in
active's favour or against it."""
import json
import os

import harness as H
import verdict as V
from sweep import (MIXED, OPS, FULL, QUICK, SMOKE, WORK, _order, _predict, setup_cost,
                   verdict_text)

R_MIN, R_MAX = 4, 16
ENTRY_NS_ASSUMED = 10.0
ENTRY_NS_MIN = 1.0
# offload_small's cases and the wrapper calls each makes (docs/offload.md:
# dpotrs 2 nested, dgesv about 16 through reference LAPACK).
SMALL_CALLS = {"ddot_8_ns": 1, "dgemv_4_ns": 1, "dcopy_16_ns": 1, "dgemm_4x4_ns": 1,
               "dgeqrf_query_ns": 1, "dpotrs_4_ns": 3, "dgesv_4_ns": 17}


class Point:
    def __init__(self, op, n):
        self.op, self.n, self.kind = op, n, "inproc"
        self.paused, self.active, self.first = [], [], []
        self.exclude, self.errors = [], []
        self.count = self.per_call = self.cost_s = None
        self.rounds, self.res, self.summary = 0, {}, None
        self.bound, self.calls_per_rep, self.skipped, self.cmd = None, None, None, ""

    def key(self):
        return "%s %s inproc" % (self.op, "-" if self.op == "mixed" else self.n)

    def spec(self):
        return "%s:%d" % (self.op, self.n)

    def judge(self):
        return V.judge_inproc(self.paused, self.active, self.bound or 0.0,
                              exclude=self.exclude)


def plan(c):
    """mixed, then the sizes up to --fresh-max, then the larger ones, each
    group every other size first (sweep._order): the cheap points first,
    and a large size predicted from the one below it."""
    sizes = sorted(c.sweep_sizes or (QUICK if c.quick else SMOKE if c.smoke else FULL))
    order = _order([n for n in sizes if n <= c.fresh_max]) + \
        _order([n for n in sizes if n > c.fresh_max])
    return [Point("mixed", 0)] + [Point(op, n) for n in order for op in OPS]


def even_rounds(r):
    """r rounded up to an even number (ABBA whole, module docstring), but
    1 stays 1."""
    return r if r <= 1 else r + (r & 1)


def fewest_rounds(pred):
    """The fewest rounds a point gets: R_MIN, but 2 where a CPU call takes
    over 2 s and 1 over 8 s (as the pair mode's 1 pair there): such a
    point's verdict is clear only far from the limit (verdict.FAR), where
    a GPU's large win lies."""
    return 1 if (pred or 0) > 8 else 2 if (pred or 0) > 2 else R_MIN


def _best(argv, env, runs=2):
    """{case: ns} from a "case value" program, the least of `runs` runs."""
    best = {}
    for _ in range(runs):
        rc, out, _, _ = H.run(argv, env, 60)
        for ln in out.splitlines() if rc == 0 else []:
            f = ln.split()
            if len(f) == 2:
                try:
                    v = float(f[1])
                except ValueError:
                    continue
                best[f[0]] = min(v, best.get(f[0], v))
    return best


def numpy_blas(c):
    """numpy's bundled OpenBLAS (the wheels' numpy.libs), else None."""
    rc, out, _, _ = H.run([c.py, "-c", "import numpy, glob, os; d = os.path.dirname("
                           "numpy.__file__); print((glob.glob(d + '/../numpy.libs/*openblas*')"
                           " + [''])[0])"], c.env("cpu"), 60)
    return out.strip() or None if rc == 0 else None


def entry_ns(c):
    """(ns, how): the most a paused call adds per wrapper call, paused
    against no library: offload_small's cases (linked to the system's
    BLAS/LAPACK, nested calls included) where it is built, else
    entry_cost's (on numpy's bundled OpenBLAS, or the system's BLAS),
    else assumed (ENTRY_NS_ASSUMED); at least ENTRY_NS_MIN (a difference
    of a few ns is at the edge of what a loop resolves)."""
    e = c.env("cpu")
    paused = dict(e, LD_PRELOAD=c.lib, BENCH_OFFLOAD_PAUSE="1")
    small = os.path.join(c.build, "bench", "offload_small")
    cost = os.path.join(c.build, "bench", "entry_cost")
    blas = None
    if os.path.exists(small):
        argv, how = [small, "200000"], "offload_small"
    elif os.path.exists(cost):
        blas = numpy_blas(c) or next((p for p in ("/usr/lib/x86_64-linux-gnu/libblas.so.3",
                                                  "/usr/lib64/libblas.so.3")
                                      if os.path.exists(p)), None)
        argv, how = [cost, blas or "", "1000000"], "entry_cost on %s" % blas
    else:
        argv = None
    if argv is None or (argv[0] == cost and not blas):
        return ENTRY_NS_ASSUMED, "assumed (no build/bench/offload_small nor a BLAS for entry_cost)"
    a, b = _best(argv, e), _best(argv, paused)
    worst = None
    for k in a:
        if k in b and k in SMALL_CALLS:
            d = (b[k] - a[k]) / SMALL_CALLS[k]
            worst = d if worst is None else max(worst, d)
    if worst is None:
        return ENTRY_NS_ASSUMED, "assumed (%s gave no figures)" % how
    return max(ENTRY_NS_MIN, worst), "measured: %s, paused against no library, the worst " \
        "case per wrapper call %.1f ns, at least %.0f" % (how, worst, ENTRY_NS_MIN)


def left_out(gpu_round, rounds):
    """The rounds left out for a GPU start in round `gpu_round` (None:
    none): that round, and its ABBA partner (gpu_round ^ 1) where the
    pair is whole and at least two rounds remain, so that the rounds
    judged keep paused first in as many as active."""
    if gpu_round is None:
        return []
    pair = gpu_round ^ 1
    if pair < rounds and rounds - 2 >= 2:
        return sorted([gpu_round, pair])
    return [gpu_round]


def calls_per_rep(res, summary):
    """Wrapper calls a rep of the paused side makes (module docstring), or
    None where the summary cannot say: none printed (the process's stderr
    cut short, the summary not asked for) or one without paused calls
    while the work made some (another process's, or counts lost). Never 0
    for want of a summary: that is a bound of 0, which would judge the
    point on its ratio alone."""
    inv_p, inv_a = res.get("paused_calls") or 0, res.get("active_calls") or 0
    if not inv_p or not summary or not summary.get("processes"):
        return None
    rs = summary.get("reasons", {})
    if res.get("switch") and not rs.get("paused"):
        return None
    top = rs.get("paused", 0) / inv_p
    nested = rs.get("nested", 0)
    nested = nested / (inv_p + inv_a) if summary.get("offloaded", 0) == 0 else nested / inv_p
    return (top + nested) * res["count"]


def cost(p, rounds, pred, warm_s, rep_s, ratio=1.0):
    """Predicted seconds of a point: the process and its inputs, warm-up
    (at least one call), the count (found by the process where no smaller
    size predicts it), the rounds (the active side at the largest smaller
    size's ratio, at most 1.2)."""
    rep = max(rep_s, pred or rep_s)
    calib = max(rep_s / 2, pred or 0) if pred is None else 0.0
    return setup_cost(p.n) + max(warm_s, pred or 0) + calib + \
        rounds * rep * (1 + min(1.2, ratio))


def _ratio(pts, op, n):
    """The ratio of the largest measured point of op below n, else 1."""
    best = None
    for q in pts:
        if q.op == op and q.paused and q.n < n and (best is None or q.n > best.n):
            best = q
    return best.judge().get("ratio") or 1.0 if best else 1.0


def run_point(c, p, rounds, rep_s, warm_s, pred, ratio=1.0):
    argv = c.prefix("default") + [c.py, WORK, "--ops", p.spec(), "--inproc", str(rounds),
                                  "--rep-s", str(rep_s), "--warm-s", str(warm_s)]
    if pred:
        # The count from the smaller sizes: no calibration calls (a
        # large point's would cost a CPU call of its own).
        argv += ["--count", str(max(1, int(round(rep_s / pred))))]
    env = c.env("default")
    p.cmd = H.cmdline(argv, env, c.keys("default"))
    timeout = 60 + 3 * cost(p, rounds, pred, warm_s, rep_s, ratio)
    rc, out, err, wall = H.run(argv, env, c.budget.cap(timeout))
    p.cost_s = wall
    js = {}
    for ln in reversed(out.splitlines()):
        if ln.startswith("{"):
            try:
                js = json.loads(ln)
            except ValueError:
                pass
            break
    res = ((js.get("results") or [{}])[0]).get("inproc")
    p.summary = H.summaries(err)
    if rc != 0 or not res:
        p.errors.append("exit %s %s" % (rc, H.other_lines(err)[:2]))
        return
    if not res.get("switch"):
        p.errors.append("no gpu_offload_pause in the process: the library was not loaded")
    p.res = res
    p.paused, p.active, p.first = res["paused"], res["active"], res["first"]
    p.rounds, p.count = len(p.paused), res["count"]
    p.exclude = left_out(res.get("gpu_round"), p.rounds)
    if p.paused:
        p.per_call = H.med(p.paused) / p.count
    p.calls_per_rep = calls_per_rep(res, p.summary)
    if p.calls_per_rep is None and res.get("switch"):
        p.errors.append("no summary counting the paused calls: the entry bound unknown")
    if p.calls_per_rep is not None and p.paused:
        p.bound = c.entry_ns * 1e-9 * p.calls_per_rep / H.med(p.paused)


def sec_sweep_inproc(c):
    rep_s = getattr(c, "sweep_rep_s", None) or (0.01 if c.quick else 0.05)
    warm_s = 0.05 if c.quick else 1.0
    rmax = even_rounds(getattr(c, "sweep_rounds", None) or (R_MIN if c.quick else R_MAX))
    c.entry_ns, c.entry_how = entry_ns(c)
    pts = plan(c)
    measured = []
    for i, p in enumerate(pts):
        pred = _predict(measured, p.op, p.n) if p.op != "mixed" else None
        if pred is not None and pred > c.max_call_s:
            p.skipped = "CPU call predicted %.0f s > %.0f s" % (pred, c.max_call_s)
            continue
        left = c.budget.left()
        share = left / (len(pts) - i)
        ratio = _ratio(measured, p.op, p.n)
        lo = fewest_rounds(pred)
        rounds = max(rmax, lo)
        # A margin (as the pair mode's): the predictions are rough, and a
        # process that runs into the deadline is killed and lost.
        while rounds > lo and 1.3 * cost(p, rounds, pred, warm_s, rep_s, ratio) > share:
            rounds = max(lo, rounds - 2)
        need = 1.3 * cost(p, rounds, pred, warm_s, rep_s, ratio)
        if need > left:
            p.skipped = "predicted %.0f s, %.0f s left" % (need, left)
            continue
        run_point(c, p, rounds, rep_s, warm_s, pred, ratio)
        measured.append(p)
    report(c, pts, rep_s, warm_s)


def report(c, pts, rep_s, warm_s):
    order = {"mixed": -1, **{op: i for i, op in enumerate(OPS)}}
    pts = sorted(pts, key=lambda p: (order[p.op], p.n))
    rows, out, bad, unclear, skipped = [], [], [], [], []
    for p in pts:
        if p.skipped:
            skipped.append("%s (%s)" % (p.key(), p.skipped))
            continue
        j = p.judge()
        s = p.summary or {}
        gpu_used = bool(s.get("offloaded") or s.get("startup_s"))
        out.append({"op": p.op, "n": p.n, "kind": "inproc", "paused": p.paused,
                    "active": p.active, "first": p.first, "excluded": p.exclude,
                    "count": p.count, "per_call": p.per_call, "rounds": p.rounds,
                    "calls_per_rep": p.calls_per_rep, "bound": p.bound, "wall_s": p.cost_s,
                    "warm": {k: p.res.get(k) for k in ("warm_calls", "warm_s", "gpu_after_warm",
                                                       "gpu_round")},
                    "summary": s, "errors": p.errors, "cmd": p.cmd, "gpu_used": gpu_used,
                    "judge": {k: v for k, v in j.items() if k != "ratios"},
                    "ratios": j.get("ratios")})
        nm = "-" if p.op == "mixed" else p.n
        if not j.get("k"):
            rows.append((p.op, nm, "-", "-", "-", "-", "-", "-", "-",
                         "error: %s" % "; ".join(p.errors[:2] or [j.get("why", "")]),
                         "**error**"))
            bad.append(p.key())
            continue
        w = p.res
        gr = w.get("gpu_round")
        how = "%d offloaded of %d; %s" % (
            s.get("offloaded", 0), s.get("seen", 0),
            "GPU started in warm-up" if w.get("gpu_after_warm") else
            "GPU started in round %d (left out%s)" % (
                gr, " with its ABBA pair" if len(p.exclude) > 1 else "") if gr is not None else
            "GPU started" if gpu_used else "GPU not started")
        if p.errors:
            how += "; " + "; ".join(p.errors[:2])
        rows.append((p.op, nm, p.count, H.fmt_s(H.med(p.paused) / p.count),
                     H.fmt_s(H.med(p.active) / p.count), "%.3f" % j["ratio"],
                     "[%.3f .. %.3f] (%.3f .. %.3f) of %d%s" % (
                         j["q1"], j["q3"], j["lo"], j["hi"], j["k"],
                         ", %d excl." % j["excluded"] if j.get("excluded") else ""),
                     "+%.2f%% (%.0f calls)" % (100 * j["bound"], p.calls_per_rep or 0),
                     "%.3f" % j["bounded"], how,
                     V.label(j) if not p.errors else "**error**"))
        if j["verdict"] != "ok" or p.errors:
            bad.append(p.key())
        elif not j["clear"]:
            unclear.append(p.key())
    nf = V.noise_floor(out)
    c.res["sweep"] = {"mode": "inproc", "points": out, "skipped": skipped, "not_ok": bad,
                      "unclear": unclear, "limit": V.LIMIT, "noise_floor": nf,
                      "entry_ns": c.entry_ns, "entry_how": c.entry_how,
                      "rep_s": rep_s, "warm_s": warm_s}
    cmd = next((p.cmd for p in pts if p.cmd), "")
    c.note("## Never slower than the CPU (default level), in one process\n\n"
           "Mode: **in-process** (`--sweep-mode inproc`). One process a point: `%s`. It warms up "
           "active (until the GPU started, at most %g s), finds the count (a rep of about %g s "
           "of paused calls), then times R rounds of one rep paused (`gpu_offload_pause`: every "
           "call the CPU library's) and one active, in ABBA order. **ratio** = median(active) / "
           "median(paused), per call; the spread is the rounds' own ratios [quartiles] "
           "(extremes). **entry bound**: the wrapper's entry that the paused side still pays, "
           "calls a rep (the summary's counts) x %.1f ns a call (%s), over the paused rep: the "
           "paused side is at most that much slower than the CPU library with no offloader. A "
           "point is ok when ratio x (1 + bound) is <= %.2f; unclear with fewer than %d rounds "
           "or quartiles (so scaled) that straddle it. A fresh process's cold start is not in "
           "these figures: the pair mode's fresh points and the short-program section cover it. "
           "mixed: one round of %s.\n\n" % (
               cmd, warm_s, rep_s, c.entry_ns, c.entry_how, V.LIMIT, V.MIN_CLEAR, MIXED) +
           H.table(["op", "n", "numpy calls a rep", "paused", "active", "ratio",
                    "rounds: [q1 .. q3] (min .. max) of k", "entry bound (wrapper calls a rep)",
                    "ratio x bound",
                    "GPU", ""], rows) +
           verdict_text(bad, unclear, nf, skipped, " (in-process)", "ratios"))
