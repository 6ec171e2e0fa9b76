"""The in-process never-slower sweep of the gpu-offload benchmark
(run.py --sweep-mode inproc, bench/offload/inproc.py): its planner on a
model of the H200 within one device call's 550 s, and the whole mode end
to end in quick mode (the CPU test backend: the method's workings, not
speeds)."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ofront as F  # noqa: E402

REPO = str(F.REPO)
sys.path.insert(0, os.path.join(REPO, "bench", "offload"))
import harness as H  # noqa: E402
from benchstub import HarnessStub  # noqa: E402

pytestmark = pytest.mark.skipif(not F.HAVE_NUMPY, reason="needs python3-numpy")


def test_inproc_sweep_plan_keeps_to_the_h200_budget(monkeypatch, tmp_path):
    """The in-process sweep (--sweep-mode inproc) against the same model
    of the H200 on a fake clock, each point's process simulated from its
    argv (harness.run): within 550 s (one device call) it measures or
    names every point, gives each measured point at least 3 rounds (1
    where a CPU call takes over 8 s) and the small ones 16, in ABBA
    order; where nothing is offloaded the ratio stays near 1 and the
    verdict is in-process; the entry bound comes from the summary's
    counts."""
    import json as J
    import random
    import time as T
    import inproc as I
    clock = [0.0]
    monkeypatch.setattr(T, "monotonic", lambda: clock[0])
    rnd = random.Random(5)
    coef = {"dgemm": (2.9e-12, 0), "solve": (8e-12, 3.9e-8), "eigh": (3.5e-11, 2.5e-8),
            "cholesky": (2.9e-12, 2.4e-8)}
    gpu = {"dgemm": 0.06, "solve": 0.6, "eigh": 0.3, "cholesky": 0.9}

    def t_call(active, op, n):
        t = 5e-4 if op == "mixed" else coef[op][0] * n ** 3 + coef[op][1] * n ** 2 + 2e-6
        return t * (gpu[op] if active and op != "mixed" and n >= 2048 else 1.0)

    seen = []

    def tops(op, n):
        """Wrapper calls a numpy call: one gemm; numpy's linearization
        (a ?copy a column, in and out) and the LAPACK call."""
        return 1 if op == "dgemm" else 300 if op == "mixed" else 3 * n + 1

    def fake_run(argv, env, timeout, cwd=None):
        a = argv[argv.index("--ops") + 1]
        op, n = a.split(":")[0], int(a.split(":")[1])
        rounds = int(argv[argv.index("--inproc") + 1])
        rep_s = float(argv[argv.index("--rep-s") + 1])
        warm_s = float(argv[argv.index("--warm-s") + 1])
        t0 = clock[0]
        clock[0] += 0.3 + 4 * n * n * 8 / 1e9              # start, inputs
        on_gpu = op != "mixed" and n >= 2048
        # warm-up: until the GPU started (its first call), or warm_s
        warm, tw = 0, 0.0
        while True:
            warm += 1
            dt = t_call(True, op, n) + (0.45 if on_gpu and warm == 1 else 0.0)
            tw += dt
            if on_gpu or tw >= warm_s:
                break
        clock[0] += tw
        calib = 0
        if "--count" in argv:
            count = int(argv[argv.index("--count") + 1])
        else:
            calib = max(1, int(rep_s / 4 / t_call(False, op, n)) + 1)
            clock[0] += calib * t_call(False, op, n)
            count = max(1, int(round(rep_s / t_call(False, op, n))))
        res = {"switch": True, "count": count, "warm_calls": warm, "warm_s": tw,
               "gpu_after_warm": on_gpu, "calib_calls": calib, "paused": [], "active": [],
               "first": [], "gpu_round": None}
        for r in range(rounds):
            order = ("paused", "active") if r % 2 == 0 else ("active", "paused")
            for side in order:
                t = count * t_call(side == "active", op, n) * rnd.uniform(0.98, 1.02)
                clock[0] += t
                res[side].append(t)
            res["first"].append(order[0])
        res["paused_calls"] = calib + rounds * count
        res["active_calls"] = warm + rounds * count
        top = tops(op, n)
        summ = ("gpu-offload: summary: %d calls seen, 0 decided, %d offloaded (GPU 0.000 s, "
                "start-up %.3f s), predicted time saved 0.000 s; reasons: paused=%d small=%d\n" % (
                    top * (res["paused_calls"] + res["active_calls"]),
                    res["active_calls"] if on_gpu else 0, 0.45 if on_gpu else 0.0,
                    top * res["paused_calls"], top * res["active_calls"]))
        seen.append((op, n, rounds, count, "--count" in argv))
        out = J.dumps({"results": [{"op": op, "n": n, "inproc": res}]}) + "\n"
        return 0, out, summ, clock[0] - t0

    monkeypatch.setattr(H, "run", fake_run)

    class Ctx(HarnessStub):
        PREFIX = ("gpu-offload", "run", "--")
        quick = smoke = False
        sweep_sizes = None
        fresh_max, max_call_s, turn_gap_s, py = 1024, 30.0, 0.2, "python3"
        sweep_mode, sweep_rounds, sweep_rep_s = "inproc", None, None
        build, lib = str(tmp_path), "lib"          # no offload_small: assumed

        def note(self, t):
            self.md.append(t)

    import sweep as W
    c = Ctx()
    c.res, c.md = {}, []
    c.budget = H.Budget(550)
    c.budget.section(550)
    W.sec_sweep(c)
    sw = c.res["sweep"]
    assert sw["mode"] == "inproc" and clock[0] <= 550, clock[0]
    assert sw["entry_ns"] == I.ENTRY_NS_ASSUMED and "assumed" in sw["entry_how"]
    planned = {p.key() for p in I.plan(c)}
    measured = {"%s %s inproc" % (p["op"], "-" if p["op"] == "mixed" else p["n"])
                for p in sw["points"]}
    named = {s.split(" (")[0] for s in sw["skipped"]}
    assert planned == measured | named and not measured & named, (planned, measured, named)
    assert "solve 16384 inproc" in named and "eigh 16384 inproc" in named, sw["skipped"]
    assert {"mixed - inproc", "dgemm 16 inproc", "dgemm 4096 inproc", "eigh 4096 inproc",
            "cholesky 8192 inproc", "dgemm 16384 inproc"} <= measured, measured
    for p in sw["points"]:
        j = p["judge"]
        assert j["mode"] == "inproc" and not p["errors"], p
        assert j["k"] >= (3 if p["per_call"] <= 2 else 1), p
        assert p["first"] == [("paused", "active")[i % 2] for i in range(p["rounds"])]
        if p["n"] <= 512:
            assert p["rounds"] == I.R_MAX, p
        if not p["gpu_used"]:
            assert 0.97 < j["ratio"] < 1.03, p
        else:
            assert j["ratio"] < 1.0, p
        # the bound: the wrapper calls a numpy call, 10 ns each (assumed)
        assert p["calls_per_rep"] == pytest.approx(tops(p["op"], p["n"]) * p["count"])
        assert j["bound"] == pytest.approx(
            1e-8 * p["calls_per_rep"] / H.med(p["paused"])), p
        assert j["bounded"] == pytest.approx(j["ratio"] * (1 + j["bound"]))
        assert j["verdict"] == ("ok" if j["bounded"] <= 1.05 else "slower"), p
        if p["n"] >= 128:
            assert j["bound"] < 0.01, p
    # the count from the smaller sizes where they predict it
    assert all(given for op, n, _, _, given in seen if n > 16 and op != "mixed")
    md = "".join(c.md)
    assert "in one process" in md and "ratio x bound" in md


def test_inproc_sweep_end_to_end_in_quick_mode(tmp_path):
    """run.py --sweep-mode inproc on the test backend (quick, sizes 16 and
    48): one process a point under `gpu-offload run`, the switch found in
    it, ABBA rounds of paused and active reps, the summary's paused calls
    divided out into the entry bound, verdicts in-process."""
    subprocess.run(["make", "-C", REPO, "-s", "all"], check=True, stdout=subprocess.DEVNULL)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPU_OFFLOAD", "GPUMUTEX")) and k != "LD_PRELOAD"}
    p = subprocess.run([F.PY, os.path.join(REPO, "bench", "offload", "run.py"), "--quick",
                        "--out", str(tmp_path), "--python", F.PY, "--sections", "sweep",
                        "--sweep-mode", "inproc", "--sweep-sizes", "16,48"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads((tmp_path / "results.json").read_text())
    assert "errors" not in res and res["sweep_mode"] == "inproc", res.get("errors")
    sw = res["sweep"]
    assert sw["mode"] == "inproc" and not sw["skipped"] and sw["entry_ns"] >= 1.0, sw
    assert {(q["op"], q["n"]) for q in sw["points"]} == \
        {("mixed", 0)} | {(op, n) for op in ("dgemm", "solve", "eigh", "cholesky") for n in (16, 48)}
    for q in sw["points"]:
        assert not q["errors"] and q["rounds"] == 4, q
        assert len(q["paused"]) == len(q["active"]) == 4, q
        assert q["first"] == ["paused", "active", "paused", "active"], q
        assert q["summary"]["reasons"].get("paused", 0) > 0, q
        assert q["calls_per_rep"] >= q["count"] and q["bound"] > 0, q
        assert q["judge"]["mode"] == "inproc" and q["judge"]["verdict"] in ("ok", "slower")
    md = (tmp_path / "report.md").read_text()
    assert "in one process" in md and "entry bound" in md


def _drift_ratio(monkeypatch, rounds, d=1e-4):
    """work.py --inproc's own loop on a fake clock where both sides are
    the same calls and every call costs 1 + d x the time so far (a
    linear drift of about 0.1% a rep): judge_inproc's ratio."""
    import time as T
    import verdict as V
    import work as W
    clock = [0.0]

    def call(op, x):
        clock[0] += 1.0 + d * clock[0]

    monkeypatch.setattr(W, "call", call)
    monkeypatch.setattr(W, "maps", lambda: {})
    monkeypatch.setattr(W, "_switch", lambda: None)
    monkeypatch.setattr(T, "perf_counter", lambda: clock[0])
    r = W.inproc("dgemm", None, rounds, 0.05, 0.0, count=10)
    return V.judge_inproc(r["paused"], r["active"])["ratio"]


def test_inproc_rounds_cancel_a_linear_drift(monkeypatch, tmp_path):
    """Every number of rounds the planner gives a point (quick and full,
    budgets from ample to tight, --sweep-rounds odd too) but 1 is even,
    and with it the ABBA order cancels a linear drift: both sides the
    same calls, the ratio 1 to 1e-5 (an odd R left one rep's drift, 0.1%
    here, in the ratio: 0.999 with 3 or 15 rounds)."""
    import time as T
    import inproc as I
    import sweep as W
    clock = [0.0]
    monkeypatch.setattr(T, "monotonic", lambda: clock[0])
    chosen = set()

    def fake_run(argv, env, timeout, cwd=None):
        chosen.add(int(argv[argv.index("--inproc") + 1]))
        return 1, "", "", 0.0

    monkeypatch.setattr(H, "run", fake_run)
    for quick, total, rounds in ((True, 550, None), (False, 550, None), (False, 120, None),
                                 (False, 40, None), (True, 550, 7), (False, 550, 15)):
        class Ctx(HarnessStub):
            PREFIX = ("gpu-offload", "run", "--")
            smoke = False
            sweep_sizes = [16, 48, 512, 4096]
            fresh_max, max_call_s, turn_gap_s, py = 1024, 30.0, 0.2, "python3"
            sweep_mode, sweep_rep_s = "inproc", None
            build, lib = str(tmp_path), "lib"

            def note(self, t):
                pass

        c = Ctx()
        c.quick, c.sweep_rounds, c.res = quick, rounds, {}
        c.budget = H.Budget(total)
        c.budget.section(total)
        W.sec_sweep(c)
    assert chosen and I.R_MAX in chosen, chosen
    for r in sorted(chosen):
        if r == 1:
            continue
        assert r % 2 == 0, chosen
        assert abs(_drift_ratio(monkeypatch, r) - 1) < 1e-5, (r, chosen)


def test_inproc_point_without_a_summary_is_an_error_not_a_bound_of_0(monkeypatch):
    """A point whose process printed no summary (its stderr cut short, or
    one without the paused calls) has no entry bound: the point is an
    error, not judged on its ratio alone with a bound of 0."""
    import inproc as I
    res = {"switch": True, "count": 10, "warm_calls": 1, "warm_s": 0.01,
           "gpu_after_warm": False, "calib_calls": 2, "paused": [1.0, 1.0, 1.0, 1.0],
           "active": [1.0, 1.0, 1.0, 1.0], "first": ["paused", "active"] * 2,
           "gpu_round": None, "paused_calls": 42, "active_calls": 41}
    whole = ("gpu-offload: summary: 830 calls seen, 0 decided, 0 offloaded (GPU 0.000 s, "
             "start-up 0.000 s), predicted time saved 0.000 s; reasons: paused=420 small=410\n")
    for err, want in (("", None), ("gpu-offload: summary: cut", None),
                      (whole.replace("paused=420 ", ""), None), (whole, 100.0)):
        def fake_run(argv, env, timeout, cwd=None):
            return 0, json.dumps({"results": [{"inproc": res}]}) + "\n", err, 1.0
        monkeypatch.setattr(H, "run", fake_run)

        class Ctx(HarnessStub):
            entry_ns = 10.0
            py = "python3"
        c = Ctx()
        c.budget = H.Budget(100)
        p = I.Point("dgemm", 16)
        I.run_point(c, p, 4, 0.01, 0.01, None)
        if want is None:
            assert p.calls_per_rep is None and p.bound is None and p.errors, (err, p.errors)
        else:
            assert p.calls_per_rep == pytest.approx(want) and not p.errors, p.errors
            assert p.bound == pytest.approx(1e-9 * 10.0 * want), p.bound


def test_judge_inproc_with_every_round_left_out_judges_nothing():
    """One round whose active rep started the GPU (left out, as the
    report says): no verdict on it, rather than the left-out round judged
    as if kept (a GPU start's cost, or its absence, in the ratio)."""
    import verdict as V
    j = V.judge_inproc([1.0], [0.5], 0.0, exclude=[0])
    assert j["verdict"] == "error" and j["k"] == 0 and j["excluded"] == 1, j
    j = V.judge_inproc([1.0, 1.0], [3.0, 1.0], 0.0, exclude=[0])
    assert j["verdict"] == "ok" and j["k"] == 1 and j["ratio"] == 1.0, j


def test_inproc_gpu_round_left_out_with_its_abba_pair(monkeypatch):
    """The GPU started in round 2's active rep of 6 (a cost the paused
    side never pays: that rep 40% slower here): the point leaves out that
    round and with it round 3, its ABBA partner, so that the 4 rounds
    judged still cancel a linear drift (ratio 1 to 1e-5; round 2 alone
    left out, as before, kept 0.1% of drift in the ratio)."""
    import time as T
    import inproc as I
    import verdict as V
    import work as W
    clock, n, count, d = [0.0], [0], 10, 1e-4
    state = {"mapped": False}

    def call(op, x):
        # call 1: the warm-up; then rep k is calls 2 + (k-1) count ..
        # 1 + k count; rep 6 is round 2's active one (paused first in
        # even rounds)
        n[0] += 1
        clock[0] += 1.0 + d * clock[0]
        if n[0] == 1 + 6 * count:
            clock[0] += 0.4 * count
            state["mapped"] = True

    monkeypatch.setattr(W, "call", call)
    monkeypatch.setattr(W, "maps", lambda: {"backend": ["b"]} if state["mapped"] else {})
    monkeypatch.setattr(W, "_switch", lambda: None)
    monkeypatch.setattr(T, "perf_counter", lambda: clock[0])
    r = W.inproc("dgemm", None, 6, 0.05, 0.0, count=count)
    assert r["gpu_round"] == 2, r
    ex = I.left_out(r["gpu_round"], 6)
    assert ex == [2, 3]
    j = V.judge_inproc(r["paused"], r["active"], exclude=ex)
    assert j["k"] == 4 and abs(j["ratio"] - 1) < 1e-5, j
    alone = V.judge_inproc(r["paused"], r["active"], exclude=[2])
    assert abs(alone["ratio"] - 1) > 5e-4, alone
    assert I.left_out(0, 2) == [0] and I.left_out(None, 4) == [] and I.left_out(4, 5) == [4]
