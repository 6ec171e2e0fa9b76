"""The gpu-offload benchmark harness (bench/offload/run.py) in its quick
mode: the CPU test backend and tiny sizes, so that every section runs and
writes its part of the report here too (it checks the report, not speeds:
those belong to the GPU machine's run)."""
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
import verdict as V  # noqa: E402

pytestmark = pytest.mark.skipif(not F.HAVE_NUMPY, reason="needs python3-numpy")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    subprocess.run(["make", "-C", REPO, "-s", "all"], check=True,
                   stdout=subprocess.DEVNULL)
    out = tmp_path_factory.mktemp("bench")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPU_OFFLOAD", "GPUMUTEX")) and k != "LD_PRELOAD"}
    p = subprocess.run([F.PY, os.path.join(REPO, "bench", "offload", "run.py"),
                        "--quick", "--out", str(out), "--python", F.PY,
                        "--suites", "numpy.linalg",
                        # Far above what the quick run takes (25 s here):
                        # the default 60 s cut the headline short on a
                        # loaded machine, and the test checks the report,
                        # not speed.
                        "--budget", "240"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def test_quick_mode_writes_every_section(quick):
    res = json.loads((quick / "results.json").read_text())
    md = (quick / "report.md").read_text()
    assert res["mode"] == "quick" and "errors" not in res, res.get("errors")
    for key in ("machine", "short", "headline", "nvblas", "verify", "mutex",
                "threads", "sweep", "suites"):
        assert key in res, key
    for title in ("A short program pays no CUDA start-up", "Headline set",
                  "Verify mode", "gpumutex interplay", "Many threads calling BLAS",
                  "Never slower", "NumPy's and SciPy's own tests"):
        assert title in md, title
    # The threads section's point ran both ways and was judged.
    tp = res["threads"]["points"]
    assert tp and all(p.get("skip") or (p["ratios"] and p["median"]) for p in tp), tp
    # The parts whose outcome does not depend on speed hold here too.
    assert res["short"]["ok"] and res["short"]["control_ok"], res["short"]
    # The short program timed in process pairs: every pair measured, and
    # judged (speed is the GPU machine's question; here that it ran).
    sp = res["short"]["pairs"]
    assert len(sp["plain"]) == len(sp["default"]) >= 3, sp
    assert all(w and w > 0 for w in sp["plain"] + sp["default"]), sp
    assert res["short"]["judge"]["k"] == len(sp["plain"]), res["short"]["judge"]
    assert "Never slower, the whole short program" in md
    assert res["verify"]["ok"], res["verify"]
    assert [h["op"] for h in res["headline"]] == ["dgemm", "sgemm", "solve", "eigh", "svd"]
    assert all(h["runs"]["cpu"]["t"] for h in res["headline"])
    m = res["mutex"]
    assert m["held"]["ok"] and m["free"]["ok"], m
    assert m["busy"]["wait_s"] is not None and m["idle"]["wait_s"] is not None, m
    pts = res["sweep"]["points"]
    assert {p["op"] for p in pts} >= {"mixed", "dgemm", "solve", "eigh", "cholesky"}
    assert {p.get("kind") for p in pts} == {"fresh", "warm"}, pts
    for p in pts:
        # Every point is pairs: as many CPU as offloaded measurements,
        # judged on their ratios.
        assert len(p["cpu"]) == len(p["off"]) == p["judge"]["k"] + p["judge"].get("excluded", 0) > 0, p
        assert p["judge"]["verdict"] in ("ok", "slower"), p
        # Which side goes first alternates from pair to pair.
        assert p["first"] == [("cpu", "default")[i % 2] for i in range(len(p["cpu"]))], p
    warm = [p for p in pts if p["kind"] == "warm"]
    assert all(p["count"] >= 1 and not p["errors"] for p in warm), warm
    assert "off/CPU: median" in md
    suites = {(s["module"], s["mode"]): s for s in res["suites"]}
    assert set(suites) == {("numpy.linalg", m) for m in ("plain", "forced", "default")}
    for s in suites.values():
        assert s["rc"] == 0 and not s["cut"] and s["counts"]["passed"] > 0, s
        assert "partial" not in s["counts"], s
    # forced sent calls to the (test) GPU; the trace says so.
    assert suites[("numpy.linalg", "forced")]["trace"]["gpu_calls"] > 0
    # The default level's headline runs first call until the GPU starts.
    for h in res["headline"]:
        assert h["runs"]["default"]["pre"] is not None, h
    assert res["plan_s"] and abs(sum(res["plan_s"].values()) - res["budget_s"]) < 1


def test_parsers():
    err = ("gpu-offload: summary: 10 calls seen, 4 decided, 3 offloaded (GPU 0.500 s, "
           "start-up 0.250 s), predicted time saved 1.000 s; reasons: small=6 verify=1\n"
           "gpu-offload: summary: 1 calls seen, 1 decided, 1 offloaded (GPU 0.100 s, "
           "start-up 0.000 s), predicted time saved -0.100 s; reasons:\nother\n")
    s = H.summaries(err)
    assert (s["processes"], s["seen"], s["offloaded"], s["reasons"]) == (2, 11, 4, {"small": 6, "verify": 1})
    assert H.other_lines(err) == ["other"]


# ---- the verdicts (bench/offload/verdict.py), synthetic inputs ----------------

def drift(k, spread=0.3):
    """CPU times of k pairs on a machine whose speed drifts by +-spread
    from pair to pair (the fresh processes' noise of the H200 run)."""
    return [1.0 + spread * ((i * 7) % 5 - 2) / 2 for i in range(k)]


def test_judge_nothing_offloaded_is_near_one():
    cpu = drift(9)
    # Each offloaded measurement 1% either side of its pair's CPU one.
    off = [c * (1.01 if i % 2 else 0.99) for i, c in enumerate(cpu)]
    j = V.judge(cpu, off)
    assert j["k"] == 9 and abs(j["median"] - 1.0) < 0.011
    assert j["verdict"] == "ok" and j["clear"], j
    # The unpaired comparison of two measurements, as the sweep did
    # before, would have seen anything from 0.57x to 1.7x here.
    assert max(cpu) / min(cpu) > 1.7


def test_judge_sees_a_real_slowdown_through_the_noise():
    cpu = drift(7)
    off = [c * (1.08 + (0.01 if i % 3 else -0.01)) for i, c in enumerate(cpu)]
    j = V.judge(cpu, off)
    assert j["verdict"] == "slower" and j["clear"], j
    assert 1.06 < j["median"] < 1.10
    assert V.label(j) == "**SLOWER**"


def test_judge_leaves_out_the_pair_with_the_gpu_start():
    cpu = [1.0] * 5
    off = [0.5, 3.0, 0.5, 0.5, 0.5]       # pair 1: the start-up was paid in it
    j = V.judge(cpu, off, exclude=[1])
    assert j["k"] == 4 and j["excluded"] == 1 and j["median"] == 0.5 and j["clear"]
    assert j["total"] == sum(off) / sum(cpu)     # the start counted here
    # The index is the pair's, also after a pair without a measurement.
    j = V.judge([None] + cpu, [1.0] + off, exclude=[2])
    assert j["k"] == 4 and j["median"] == 0.5


def test_judge_unclear_cases():
    # Too few pairs near the limit.
    j = V.judge([1.0, 1.0], [1.0, 1.0])
    assert j["verdict"] == "ok" and not j["clear"]
    assert V.label(j) == "ok (unclear)"
    # Quartiles straddling the limit.
    j = V.judge([1.0] * 6, [0.98, 1.0, 1.03, 1.07, 1.09, 1.1])
    assert not j["clear"], j
    # min-of-K disagrees with the median: one lucky CPU measurement.
    j = V.judge([1.0, 1.0, 1.0, 0.5], [1.0, 1.0, 1.0, 1.0])
    assert j["median"] == 1.0 and j["minmin"] == 2.0 and not j["clear"]
    # Nothing measured.
    assert V.judge([], [])["verdict"] == "error"
    assert V.judge([None, 1.0], [1.0, None])["k"] == 0


def test_need_and_noise_floor():
    unclear = V.judge([1.0] * 4, [1.03, 1.04, 1.06, 1.07])
    unclear_few = V.judge([1.0] * 2, [1.0] * 2)
    unclear_few_near = V.judge([1.0] * 2, [1.04] * 2)
    clear_few = V.judge([1.0] * 3, [1.0] * 3)
    clear_many = V.judge([1.0] * 9, [1.0] * 9)
    assert (V.need(unclear_few_near, 9) > V.need(unclear_few, 9) > V.need(unclear, 9)
            > V.need(clear_few, 9))
    assert V.need(clear_many, 9) is None and V.need(V.judge([], []), 9) is None
    # Far from the limit one pair is clear: no more wanted beyond k_want.
    far = V.judge([13.0], [1.0])
    assert far["clear"] and far["verdict"] == "ok" and V.need(far, 1) is None
    assert V.judge([1.0], [1.5])["clear"] and not V.judge([1.0], [1.2])["clear"]
    pts = [{"judge": clear_many, "gpu_used": False},
           {"judge": V.judge([1.0] * 3, [0.97] * 3), "gpu_used": False},
           {"judge": V.judge([1.0] * 3, [0.1] * 3), "gpu_used": True}]
    n, lo, hi = V.noise_floor(pts)
    assert (n, round(lo, 3), hi) == (2, 0.97, 1.0)
    assert V.noise_floor([]) is None
    assert V.spread(clear_many).startswith("1.000 [1.000 .. 1.000]")


def test_quantile():
    assert V.quantile([3, 1, 2, 4], 0.5) == 2.5
    assert V.quantile([1, 2, 3, 4, 5], 0.25) == 2
    assert V.quantile([7], 0.75) == 7 and V.quantile([], 0.5) is None


def test_plan_sections_gives_the_selected_sections_the_whole_budget():
    share = {"machine": 0.1, "headline": 0.2, "sweep": 0.2, "suites": 0.25}
    # Before: a run of only the suites got 25% of its budget.
    plan = dict(V.plan_sections(["machine", "suites"], share, 350))
    assert plan == pytest.approx({"machine": 100.0, "suites": 250.0})
    plan = V.plan_sections(["machine", "headline", "sweep"], share, 500, {"sweep": 300})
    assert [k for k, _ in plan] == ["machine", "headline", "sweep"]
    assert [v for _, v in plan] == pytest.approx([200 / 3, 400 / 3, 300.0])
    # A fixed section not selected does not count.
    assert dict(V.plan_sections(["suites"], share, 100, {"sweep": 50})) == {"suites": 100}
    assert V.parse_kv("sweep=300, headline=1.5") == {"sweep": 300.0, "headline": 1.5}
    with pytest.raises(ValueError):
        V.parse_kv("sweep")


def test_plan_workers():
    runs = [(m, mode) for m in ("numpy.linalg", "scipy.linalg")
            for mode in ("plain", "forced", "default")]
    w = V.plan_workers(runs, 16)
    assert sum(w.values()) == 16 and min(w.values()) >= 1
    assert w[("numpy.linalg", "forced")] == max(w.values())
    assert w[("scipy.linalg", "forced")] > w[("scipy.linalg", "plain")]
    w = V.plan_workers(runs, 16, {("numpy.linalg", "forced"): 8})
    assert w[("numpy.linalg", "forced")] == 8 and sum(w.values()) == 16
    # Fewer cores than runs: one each.
    assert set(V.plan_workers(runs, 2).values()) == {1}
    # Another suite: weighed by its mode.
    w = V.plan_workers([("x", "plain"), ("x", "forced")], 7)
    assert w == {("x", "plain"): 1, ("x", "forced"): 6}


XDIST_CUT = """\
============================= test session starts ==============================
created: 4/4 workers
4 workers [486 items]

[gw0] [  0%] PASSED numpy/linalg/tests/test_linalg.py::TestSolve::test_sq_cases
[gw1] [  0%] FAILED numpy/linalg/tests/test_linalg.py::test_blas64_geqrf_lwork_smoketest
[gw2] [  1%] SKIPPED numpy/linalg/tests/test_linalg.py::TestX::test_big
[gw3] [  1%] XFAIL numpy/linalg/tests/test_linalg.py::TestY::test_z
[gw0] [  1%] PASSED numpy/linalg/tests/test_linalg.py::TestSolve::test_types[float64]
[gw1] [  2%] ERROR numpy/linalg/tests/test_regression.py::test_w
[gw2] [  2%] PASSED numpy/linalg/tes"""

PLAIN_DONE = """\
collecting ... collected 417 items / 407 deselected / 10 selected

tests/test_linalg.py::TestSolve::test_sq_cases PASSED                    [ 10%]
tests/test_linalg.py::TestSolve::test_types[float32] FAILED              [ 20%]
tests/test_linalg.py::TestSolve::test_x XFAIL (a reason)                 [ 30%]

=================================== FAILURES ===================================
FAILED tests/test_linalg.py::TestSolve::test_types[float32] - AssertionError
=========== 1 failed, 8 passed, 1 xfailed, 407 deselected in 1.99s ============
"""


def test_pytest_outcomes_of_a_cut_run():
    c = V.pytest_outcomes(XDIST_CUT, True)
    # The last line was cut in the middle of its name: its outcome counts.
    assert c["partial"] and c["items"] == 486 and c["done"] == 6
    assert (c["passed"], c["failed"], c["skipped"], c["xfailed"], c["error"]) == (3, 1, 1, 1, 1)
    assert c["failures"] == ["numpy/linalg/tests/test_linalg.py::test_blas64_geqrf_lwork_smoketest",
                             "numpy/linalg/tests/test_regression.py::test_w"]
    # A run that ended without its final line (it crashed) is partial too.
    assert V.pytest_outcomes(XDIST_CUT, False)["partial"]


def test_pytest_outcomes_of_a_finished_run():
    c = V.pytest_outcomes(PLAIN_DONE, False)
    assert "partial" not in c and c["items"] == 10
    assert (c["passed"], c["failed"], c["xfailed"], c["deselected"]) == (8, 1, 1, 407)
    assert c["failures"] == ["tests/test_linalg.py::TestSolve::test_types[float32]"]
    # Cut just after the final line was printed: still what was seen.
    c = V.pytest_outcomes(PLAIN_DONE, True)
    assert c["partial"] and (c["passed"], c["failed"], c["xfailed"]) == (1, 1, 1)


def test_breakdown_from_trace_records(tmp_path):
    """A trace file written by hand in the layout of src/offload/trace.h:
    read back, and two numpy calls' spans split by its records."""
    import struct
    head = b"GPOTRACE" + struct.pack("<IIIiqI", 1, 320, 0x01020304, 42, 0, 5)
    head += bytes(64 - len(head))

    def rec(t_ms, dur_ms, kind, dev, reason, op, copy_ms=0.0):
        b = bytearray(320)
        struct.pack_into("<qqBBBc", b, 0, int(t_ms * 1e6), int(dur_ms * 1e6), kind, dev, dev, b"d")
        struct.pack_into("<H", b, 26, reason)
        b[40:40 + len(op)] = op.encode()
        struct.pack_into("<dd", b, 128, copy_ms / 2e3, copy_ms / 2e3)
        return bytes(b)
    recs = [rec(5, 1, 0, 0, 1, "copy"),            # before the first span
            rec(10, 2, 0, 0, 1, "copy"), rec(13, 6, 0, 1, 5, "gesv", 4),
            rec(14, 1, 0, 0, V.NESTED, "gemm"),    # inside gesv: not counted
            rec(15, 0, 1, 0, 0, ""),               # an event, not a call
            rec(20, 3, 0, 0, 1, "copy"),
            rec(110, 2, 0, 0, 1, "copy"), rec(113, 8, 0, 1, 5, "gesv", 5),
            rec(125, 2, 0, 0, 1, "copy")]
    (tmp_path / "gpo-42.trace").write_bytes(head + b"".join(recs))
    (tmp_path / "gpo-43.trace").write_bytes(b"not a trace")
    got = H.read_traces(str(tmp_path))
    assert len(got) == 8 and got[2]["op"] == "dgesv" and got[2]["device"] == 1
    assert got[2]["dur_s"] == pytest.approx(0.006) and got[2]["copy_s"] == pytest.approx(0.004)
    ms = 1000000
    b = V.breakdown([(9 * ms, 29 * ms), (109 * ms, 133 * ms)], got)
    assert b["calls"] == 2 and b["gpu_ops"] == ["dgesv"] and b["cpu_ops"] == ["dcopy"]
    # Medians of (20 ms, 24 ms) whole, (6, 8) GPU, (4, 5) copies, (5, 4) CPU BLAS.
    assert b["whole"] == pytest.approx(0.022) and b["gpu"] == pytest.approx(0.007)
    assert b["copy"] == pytest.approx(0.0045) and b["cpu_blas"] == pytest.approx(0.0045)
    assert b["rest"] == pytest.approx(0.022 - 0.007 - 0.0045)
    assert V.breakdown([], got) is None


def test_sweep_predicts_the_cpu_call_from_the_measured_sizes():
    import sweep as W

    def pt(n, t, op="eigh"):
        p = W.Point(op, n, "warm")
        p.per_call = t
        return p
    # One size: n^3.
    assert W._predict([pt(1024, 0.1)], "eigh", 4096) == pytest.approx(6.4)
    # Two: their slope (here 2.5), held within [2, 3].
    two = [pt(1024, 0.1), pt(2048, 0.1 * 2 ** 2.5), pt(4096, 99.0, "solve")]
    assert W._predict(two, "eigh", 8192) == pytest.approx(0.1 * 8 ** 2.5)
    assert W._predict([pt(1024, 1.0), pt(2048, 1.0)], "eigh", 4096) == pytest.approx(4.0)
    assert W._predict(two, "cholesky", 64) is None
    # Sizes are covered range first.
    assert W._order([16, 32, 64, 128, 256]) == [16, 64, 256, 32, 128]


def test_a_relative_profile_reaches_the_suites(tmp_path):
    """The suites run in a temporary directory: a --profile relative to
    the caller's directory must still be found there (before, the forced
    and default runs said 'machine profile cannot open' and kept every
    call on the CPU)."""
    subprocess.run(["make", "-C", REPO, "-s", "all"], check=True, stdout=subprocess.DEVNULL)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPU_OFFLOAD", "GPUMUTEX")) and k != "LD_PRELOAD"}
    p = subprocess.run([F.PY, os.path.join("bench", "offload", "run.py"), "--quick",
                        "--out", str(tmp_path), "--python", F.PY, "--sections", "suites",
                        "--suites", "numpy.linalg", "--profile", "docs/profile-h200.txt"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads((tmp_path / "results.json").read_text())
    assert len(res["suites"]) == 3 and "errors" not in res, res.get("errors")
    for s in res["suites"]:
        assert s["rc"] == 0, s
        assert not s["said"], s
        if s["mode"] != "plain":
            assert os.path.join(REPO, "docs", "profile-h200.txt") in s["cmd"], s["cmd"]


def test_sweep_plan_keeps_to_its_budget(monkeypatch):
    """The sweep's planner against a model of the H200 (numpy's CPU times
    of 2026-12-01, the GPU a fixed fraction above 2048, 5% noise), on a
    fake clock: it ends within its budget, measures or names every point
    (skipped ones with the reason), and where nothing is offloaded the
    paired medians stay near 1."""
    import random
    import time as T
    import sweep as W
    clock = [0.0]
    monkeypatch.setattr(T, "monotonic", lambda: clock[0])
    monkeypatch.setattr(T, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    rnd = random.Random(16)
    coef = {"dgemm": (2.9e-12, 0), "solve": (8e-12, 3.9e-8), "eigh": (3.5e-11, 2.5e-8),
            "cholesky": (2.9e-12, 2.4e-8)}
    gpu = {"dgemm": 0.06, "solve": 0.6, "eigh": 0.3, "cholesky": 0.9}

    def t_call(mode, op, n):
        t = 5e-4 if op == "mixed" else coef[op][0] * n ** 3 + coef[op][1] * n ** 2 + 2e-6
        return t * (gpu[op] if mode != "cpu" and op != "mixed" and n >= 2048 else 1.0)

    def start(n):
        return 0.3 + 4 * n * n * 8 / 1e9

    class Ctx(HarnessStub):
        quick = smoke = False
        sweep_sizes = None
        fresh_max, max_call_s, turn_gap_s, py = 1024, 30.0, 0.2, "python3"
        res, md = {}, []

        def note(self, t):
            self.md.append(t)

        def work(self, mode, spec, args, timeout, extra=None, trace=None):
            op, n = spec.split(":")
            t = t_call(mode, op, int(n))
            if "--seconds" in args:
                count = int(float(args[args.index("--seconds") + 1]) / t) + 1
            else:
                count = int(args[args.index("--count") + 1])
            loop = count * t * rnd.uniform(0.95, 1.05)
            clock[0] += start(int(n)) + loop
            return {"rc": 0, "json": {"results": [{"loop_s": loop, "count": count}]},
                    "wall": start(int(n)) + loop, "other": [], "cmd": "x",
                    "summary": {"offloaded": 0, "startup_s": 0.0, "reasons": {}, "seen": count}}

    class Served:
        def __init__(self, mode, spec):
            op, n = spec.split(":")
            self.mode, self.op, self.n, self.ready, self.calls = mode, op, int(n), False, 0

        def next_json(self, timeout):
            if not self.ready:
                self.ready = True
                clock[0] += start(self.n) / 2
                return {"ready": True, "gpu": False}
            return self.last

        def send(self, line):
            k = int(line)
            on_gpu = self.mode != "cpu" and self.op != "mixed" and self.n >= 2048
            t = t_call(self.mode, self.op, self.n) * k * rnd.uniform(0.95, 1.05)
            t += 0.45 if on_gpu and self.calls == 0 else 0.0     # the start-up
            self.calls += k
            clock[0] += t
            self.last = {"t": t, "gpu": on_gpu}
            return True

        def close_stdin(self):
            pass

        def wait(self, timeout):
            return 0, "", "", 0.0

    monkeypatch.setattr(W, "_serve", lambda c, mode, p: Served(mode, p.spec()))
    for budget in (250, 450, 330):
        clock[0] = 0.0
        c = Ctx()
        c.res, c.md = {}, []
        c.budget = H.Budget(budget)
        c.budget.section(budget)
        W.sec_sweep(c)
        sw = c.res["sweep"]
        assert clock[0] <= budget, (budget, clock[0])
        planned = {p.key() for p in W.plan(c)}
        measured = {"%s %s %s" % (p["op"], "-" if p["op"] == "mixed" else p["n"], p["kind"])
                    for p in sw["points"]}
        named = {s.split(" (")[0] for s in sw["skipped"]}
        assert planned == measured | named and not measured & named, (planned, measured, named)
        assert "solve 16384 warm" in named and "eigh 16384 warm" in named
        for p in sw["points"]:
            assert p["judge"]["k"] >= 1 and not p["errors"], p
            if p["kind"] == "fresh":
                assert p["judge"]["k"] >= 3 and 0.9 < p["judge"]["median"] < 1.11, p
        assert "dgemm 16 fresh" in measured and "mixed - warm" in measured
    # With 330 s (what call 1 leaves the sweep) every size up to 8192 is in.
    assert {"dgemm 8192 warm", "eigh 8192 warm", "solve 8192 warm", "dgemm 16384 warm"} <= measured
    # --sweep-pairs 12 over the small sizes: every fresh point gets 12 pairs
    # (without it 3, and at most 9 in pass 2 for a clear one), in budget.
    clock[0] = 0.0
    c = Ctx()
    c.res, c.md = {}, []
    c.sweep_sizes, c.sweep_pairs = [16, 32, 64], 12
    c.budget = H.Budget(300)
    c.budget.section(300)
    W.sec_sweep(c)
    assert clock[0] <= 300, clock[0]
    fresh = [p for p in c.res["sweep"]["points"] if p["kind"] == "fresh"]
    assert len(fresh) == 13 and all(p["judge"]["k"] >= 12 for p in fresh), fresh

