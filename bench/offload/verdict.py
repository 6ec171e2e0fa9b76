"""The verdicts of the gpu-offload benchmark (run.py) as pure functions:
the paired-ratio judge of the never-slower sweep, the budget's shares,
the test suites' worker plan and the reading of a pytest run that may
have been cut short. No processes, no clocks: tests/offload/
test_bench_offload.py feeds them synthetic inputs."""
import re

LIMIT = 1.05
# Fewer pairs than this make a clear verdict only far from the limit:
# all of them below FAR[0] or above FAR[1] times it.
MIN_CLEAR = 3
FAR = (0.75, 1.33)


def quantile(xs, q):
    """The q-quantile of xs (0 <= q <= 1), linear between order
    statistics (numpy's default); None for no data."""
    s = sorted(xs)
    if not s:
        return None
    h = (len(s) - 1) * q
    i = int(h)
    return s[i] if i + 1 >= len(s) else s[i] + (h - i) * (s[i + 1] - s[i])


def judge(cpu, off, limit=LIMIT, exclude=()):
    """The verdict on one sweep point from PAIRED measurements: cpu[i] and
    off[i] timed the same work (same calls, same process count), one
    right after the other, so slow drift of the machine (clock, other
    load, memory) cancels in their ratio. Pairs whose index is in
    `exclude` (a GPU start inside the pair) are left out of the
    steady-state statistics but kept in `total`.

    The statistic is the median of the paired ratios off/cpu; the spread
    is their quartiles and extremes; min(off)/min(cpu) (each side's
    best, the classic min-of-K) is a second estimate. The verdict is
    "ok" when the median is within `limit`, else "slower"; it is CLEAR
    when there are at least MIN_CLEAR pairs, the interquartile range lies
    on one side of the limit and min-of-K agrees with the median, or when
    every ratio and min-of-K lie far from it (FAR). An unclear point is
    the one more pairs would help (the sweep adds them first)."""
    ok_pair = [(i, c, o) for i, (c, o) in enumerate(zip(cpu, off))
               if c and o and c > 0 and o > 0]
    if not ok_pair:
        return {"k": 0, "verdict": "error", "clear": False, "mode": "pairs"}
    pairs = [(c, o) for _, c, o in ok_pair]
    keep = [(c, o) for i, c, o in ok_pair if i not in set(exclude)] or pairs
    r = [o / c for c, o in keep]
    med, q1, q3 = quantile(r, 0.5), quantile(r, 0.25), quantile(r, 0.75)
    minmin = min(o for _, o in keep) / min(c for c, _ in keep)
    ok = med <= limit
    clear = (len(r) >= MIN_CLEAR and (q3 <= limit if ok else q1 > limit)
             and (minmin <= limit) == ok)
    # Far from the limit, fewer pairs do: every ratio and min-of-K beyond
    # FAR of it (a dgemm 16384 at 0.08x needs no third pair).
    lo_far, hi_far = limit * FAR[0], limit * FAR[1]
    clear = clear or all(x <= lo_far for x in r + [minmin]) or all(x >= hi_far for x in r + [minmin])
    return {"k": len(r), "excluded": len(pairs) - len(keep), "ratios": r,
            "median": med, "q1": q1, "q3": q3, "lo": min(r), "hi": max(r),
            "minmin": minmin,
            "total": sum(o for _, o in pairs) / sum(c for c, _ in pairs),
            "verdict": "ok" if ok else "slower", "clear": clear, "mode": "pairs"}


def judge_inproc(paused, active, bound=0.0, limit=LIMIT, exclude=()):
    """The verdict on one point of the in-process sweep: paused[i] and
    active[i] are the same reps of one process, timed with the offloader
    paused (the CPU library's calls) and active, round i, in ABBA order,
    so that no per-process state enters their ratio. Rounds in `exclude`
    (the GPU started in that active rep) are left out but kept in
    `total`. `bound`: the relative cost of the wrapper's entry still in
    the paused side (calls a rep x the measured cost of a paused call,
    over the paused rep's time): paused can be at most that much slower
    than the CPU library with no offloader loaded.

    The statistic is ratio = median(active) / median(paused); the spread
    is the per-round ratios' quartiles and extremes. The claim is on the
    CPU WITHOUT the library, so the verdict is "ok" when ratio x (1 +
    bound) ("bounded") is within `limit`, else "slower"; CLEAR as in
    judge(): at least MIN_CLEAR rounds and the quartiles, scaled the same
    way, on one side of the limit (or every ratio far from it). "mode":
    "inproc" (judge()'s results say "pairs")."""
    ok_r = [(i, p, a) for i, (p, a) in enumerate(zip(paused, active))
            if p and a and p > 0 and a > 0]
    if not ok_r:
        return {"k": 0, "verdict": "error", "clear": False, "mode": "inproc"}
    keep = [(p, a) for i, p, a in ok_r if i not in set(exclude)] or [(p, a) for _, p, a in ok_r]
    r = [a / p for p, a in keep]
    ratio = quantile([a for _, a in keep], 0.5) / quantile([p for p, _ in keep], 0.5)
    f = 1.0 + max(0.0, bound or 0.0)
    q1, q3 = quantile(r, 0.25), quantile(r, 0.75)
    bounded = ratio * f
    ok = bounded <= limit
    clear = len(r) >= MIN_CLEAR and (q3 * f <= limit if ok else q1 > limit)
    clear = clear or all(x * f <= limit * FAR[0] for x in r) or all(x >= limit * FAR[1] for x in r)
    return {"k": len(r), "excluded": len(ok_r) - len(keep), "ratios": r,
            "median": ratio, "ratio": ratio, "bound": bound or 0.0, "bounded": bounded,
            "q1": q1, "q3": q3, "lo": min(r), "hi": max(r),
            "total": sum(a for _, _, a in ok_r) / sum(p for _, p, _ in ok_r),
            "verdict": "ok" if ok else "slower", "clear": clear, "mode": "inproc"}


def label(j):
    """The report's word for a judge() result."""
    if j.get("verdict") == "error":
        return "**error**"
    w = "ok" if j["verdict"] == "ok" else "**SLOWER**"
    return w if j["clear"] else w + " (unclear)"


def spread(j):
    """median [q1 .. q3] (min .. max) of k, as the report prints it."""
    if not j.get("k"):
        return "-"
    return "%.3f [%.3f .. %.3f] (%.3f .. %.3f) of %d%s" % (
        j["median"], j["q1"], j["q3"], j["lo"], j["hi"], j["k"],
        ", %d excl." % j["excluded"] if j.get("excluded") else "")


def noise_floor(points):
    """The medians of the points where NOTHING ran on the GPU (both sides
    computed on the CPU): how close to 1.00 the method comes by itself,
    the library's own per-call cost included.
    `points`: dicts with "judge" and "gpu_used". (n, lowest, highest) or
    None."""
    ms = [p["judge"]["median"] for p in points
          if not p.get("gpu_used") and p.get("judge", {}).get("k")]
    return (len(ms), min(ms), max(ms)) if ms else None


def need(j, k_want):
    """How much a point wants more pairs, as a sort key (larger first), or
    None: unclear verdicts first, then fewer pairs than k_want; within a
    class the point with the fewest pairs, then the one whose median is
    nearest the limit (so more pairs spread over the points that need
    them rather than piling onto one)."""
    if j.get("verdict") == "error":
        return None
    near = 1.0 / (1.0 + 100 * abs(j["median"] - LIMIT))
    if not j["clear"]:
        return (2, -j["k"], near)
    return (1, -j["k"], near) if j["k"] < k_want else None


# ---- where a numpy call's time goes ----------------------------------------

NESTED = 2      # policy.h's GPO_R_NESTED: a call inside another one


def breakdown(spans, recs):
    """Per numpy call (spans: [(start_ns, end_ns)] of its timed calls, on
    the trace's clock), from the trace's call records (harness.read_traces):
    the whole call, the time inside the calls that ran on the GPU (and
    their copies), inside the top-level BLAS/LAPACK calls that ran on the
    CPU and were timed (calls below the size threshold, like numpy's
    linearization ?copy calls, are recorded untimed: their time is in the
    rest), the rest (numpy and Python themselves), and how many calls of
    each op ran on the CPU. Nested calls are inside their parent's time
    and count once, there. Medians over the spans; None without spans."""
    per = []
    for a, b in spans:
        d = {"whole": (b - a) / 1e9, "gpu": 0.0, "copy": 0.0, "cpu_blas": 0.0,
             "gpu_calls": 0, "cpu_calls": 0, "ops": {}}
        for r in recs:
            if not a <= r["t_ns"] < b or r["reason"] == NESTED:
                continue
            if r["device"] == 1:
                d["gpu"] += r["dur_s"]
                d["copy"] += r["copy_s"]
                d["gpu_calls"] += 1
                d["ops"][r["op"]] = "gpu"
            else:
                d["cpu_blas"] += r["dur_s"]
                d["cpu_calls"] += 1
                d["ops"].setdefault(r["op"], "cpu")
                d.setdefault("cpu_by_op", {})
                d["cpu_by_op"][r["op"]] = d["cpu_by_op"].get(r["op"], 0) + 1
        d["rest"] = d["whole"] - d["gpu"] - d["cpu_blas"]
        per.append(d)
    if not per:
        return None
    out = {k: quantile([d[k] for d in per], 0.5)
           for k in ("whole", "gpu", "copy", "cpu_blas", "rest", "gpu_calls", "cpu_calls")}
    out["calls"] = len(per)
    out["gpu_ops"] = sorted({o for d in per for o, w in d["ops"].items() if w == "gpu"})
    out["cpu_ops"] = sorted({o for d in per for o, w in d["ops"].items() if w == "cpu"})
    out["cpu_by_op"] = per[-1].get("cpu_by_op", {})
    return out


# ---- the time budget's shares ----------------------------------------------

def plan_sections(selected, shares, total, fixed=None):
    """Seconds for each selected section: a fixed number where `fixed`
    gives one, the rest of `total` shared in proportion to `shares` among
    the others (so that a run of a few sections gives them the whole
    budget, not only their share of a full run). Returns [(name, s)] in
    the order of `selected`. Time a section leaves unused still rolls
    over to the next (harness.Budget)."""
    fixed = {k: v for k, v in (fixed or {}).items() if k in selected}
    rest = max(0.0, total - sum(fixed.values()))
    free = [s for s in selected if s not in fixed]
    w = sum(shares.get(s, 0.0) for s in free)
    out = []
    for s in selected:
        if s in fixed:
            out.append((s, float(fixed[s])))
        else:
            out.append((s, rest * shares.get(s, 0.0) / w if w else rest / len(free)))
    return out


def parse_kv(text, conv=float):
    """'a=1,b=2' -> {'a': 1.0, 'b': 2.0}; ValueError for a malformed item."""
    out = {}
    for item in filter(None, (x.strip() for x in (text or "").split(","))):
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise ValueError("expected NAME=VALUE, got %r" % item)
        out[k.strip()] = conv(v)
    return out


# ---- the test suites: who gets how many workers ----------------------------

# Relative worker weights per (suite, mode). Forced runs wait on the GPU for
# most of their time (every call, however small, goes there), so they get
# the most workers; numpy.linalg forced made 185 163 GPU calls in its
# first 45 tests. scipy.linalg has 20x numpy.linalg's tests, so its CPU
# runs get two. Unknown suites weigh as numpy.linalg.
WEIGHTS = {("numpy.linalg", "plain"): 1, ("numpy.linalg", "default"): 2,
           ("numpy.linalg", "forced"): 6, ("scipy.linalg", "plain"): 2,
           ("scipy.linalg", "default"): 2, ("scipy.linalg", "forced"): 3}
MODE_WEIGHT = {"plain": 1, "default": 2, "forced": 6}


def plan_workers(runs, cores, override=None):
    """pytest-xdist workers (-n) per run so that all the runs, started
    together, use `cores` workers in all: each run at least 1, the rest
    by WEIGHTS (largest remainders), `override` {(suite, mode): n} fixed.
    Returns {run: n}."""
    override = {k: v for k, v in (override or {}).items() if k in runs}
    out = dict(override)
    free = [r for r in runs if r not in override]
    left = max(len(free), cores - sum(override.values()))
    if not free:
        return out
    w = {r: WEIGHTS.get(r, MODE_WEIGHT.get(r[1], 1)) for r in free}
    # One each, the rest in proportion to the weights beyond that one
    # (largest remainders), so that the total is exactly `left`.
    extra = left - len(free)
    wx = {r: max(0, w[r] - 1) for r in free}
    tot = float(sum(wx.values())) or float(len(free))
    exact = {r: extra * (wx[r] if sum(wx.values()) else 1) / tot for r in free}
    for r in free:
        out[r] = 1 + int(exact[r])
    spare = left - sum(out[r] for r in free)
    for r in sorted(free, key=lambda r: exact[r] - int(exact[r]), reverse=True)[:spare]:
        out[r] += 1
    return out


# ---- a pytest run, finished or cut -----------------------------------------

# `pytest -v` prints one line per test as it ends: without xdist
# "path::test PASSED [ 10%]", with xdist "[gw3] [ 10%] PASSED path::test".
_XDIST_LINE = re.compile(r"^\[gw\d+\]\s+\[\s*\d+%\]\s+([A-Z]+)\s+(\S+)")
_PLAIN_LINE = re.compile(r"^(\S+::\S*)\s+([A-Z]+)\b")
_OUTCOME = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error",
            "SKIPPED": "skipped", "XFAIL": "xfailed", "XPASS": "xpassed"}
_FINAL = re.compile(r"^=+ (.*\d+ [a-z]+.*) in [\d.]+s(?: \([\d:]+\))? =+$")
_ITEMS = re.compile(r"(?:collected|\d+ workers?) \[?(\d+) items?(?:.* (\d+) selected)?")
_WORDS = {"errors": "error", "warnings": "warning"}


def pytest_outcomes(out, cut):
    """The counts of a `pytest -v -rfE` run from its output: the final
    line's when the run finished; when it was cut (killed at the time
    limit: `cut` True) or has no final line, the per-test lines seen so
    far, with "partial": True. Also the failures' and errors' names (the
    final summary's, else the per-test lines') and the items collected
    ("items", when pytest said)."""
    c = {}
    names = set()
    seen = {}
    final = None
    items = None
    for ln in out.splitlines():
        s = ln.strip()
        m = _XDIST_LINE.match(s)
        if m:
            word, node = m.group(1), m.group(2)
        else:
            m = _PLAIN_LINE.match(s)
            word, node = (m.group(2), m.group(1)) if m else (None, None)
        if word in _OUTCOME:
            seen[_OUTCOME[word]] = seen.get(_OUTCOME[word], 0) + 1
            if word in ("FAILED", "ERROR"):
                names.add(node)
            continue
        if s.startswith(("FAILED ", "ERROR ")) and len(s.split()) > 1:
            names.add(s.split()[1])
            continue
        m = _FINAL.match(s)
        if m:
            final = m.group(1)
            continue
        m = _ITEMS.search(s)
        if m and items is None:
            items = int(m.group(2) or m.group(1))
    if final and not cut:
        for part in final.split(","):
            f = part.split()
            if len(f) == 2 and f[0].isdigit():
                c[_WORDS.get(f[1], f[1])] = int(f[0])
    else:
        c.update(seen)
        c["partial"] = True
    c["failures"] = sorted(names)
    if items is not None:
        c["items"] = items
    c["done"] = sum(seen.get(k, 0) for k in ("passed", "failed", "skipped",
                                                 "xfailed", "xpassed"))
    return c
