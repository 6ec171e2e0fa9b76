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
                        "--suites", "numpy.linalg"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def test_quick_mode_writes_every_section(quick):
    res = json.loads((quick / "results.json").read_text())
    md = (quick / "report.md").read_text()
    assert res["mode"] == "quick" and "errors" not in res, res.get("errors")
    for key in ("machine", "short", "headline", "nvblas", "verify", "mutex",
                "sweep", "suites"):
        assert key in res, key
    for title in ("A short program pays no CUDA start-up", "Headline set",
                  "Verify mode", "gpumutex interplay", "Never slower",
                  "NumPy's and SciPy's own tests"):
        assert title in md, title
    # The parts whose outcome does not depend on speed hold here too.
    assert res["short"]["ok"] and res["short"]["control_ok"], res["short"]
    assert res["verify"]["ok"], res["verify"]
    assert [h["op"] for h in res["headline"]] == ["dgemm", "sgemm", "solve", "eigh", "svd"]
    assert all(h["runs"]["cpu"]["t"] for h in res["headline"])
    m = res["mutex"]
    assert m["held"]["ok"] and m["free"]["ok"], m
    assert m["busy"]["wait_s"] is not None and m["idle"]["wait_s"] is not None, m
    pts = res["sweep"]["points"]
    assert {p["op"] for p in pts} >= {"mixed", "dgemm", "solve", "eigh", "cholesky"}
    assert {p.get("kind") for p in pts} == {"fresh", "warm"}, pts
    suites = {(s["module"], s["mode"]): s for s in res["suites"]}
    assert set(suites) == {("numpy.linalg", m) for m in ("plain", "forced", "default")}
    for s in suites.values():
        assert s["rc"] == 0 and s["counts"]["passed"] > 0, s
    # forced sent calls to the (test) GPU; the trace says so.
    assert suites[("numpy.linalg", "forced")]["trace"]["gpu_calls"] > 0


def test_parsers():
    err = ("gpu-offload: summary: 10 calls seen, 4 decided, 3 offloaded (GPU 0.500 s, "
           "start-up 0.250 s), predicted time saved 1.000 s; reasons: small=6 verify=1\n"
           "gpu-offload: summary: 1 calls seen, 1 decided, 1 offloaded (GPU 0.100 s, "
           "start-up 0.000 s), predicted time saved -0.100 s; reasons:\nother\n")
    s = H.summaries(err)
    assert (s["processes"], s["seen"], s["offloaded"], s["reasons"]) == (2, 11, 4, {"small": 6, "verify": 1})
    assert H.other_lines(err) == ["other"]
    c = H.pytest_counts("..F.s\nFAILED a.py::t - x\n1 failed, 3 passed, 1 skipped in 0.5s\n", False)
    assert (c["passed"], c["failed"], c["skipped"], c["failures"]) == (3, 1, 1, ["a.py::t"])
    c = H.pytest_counts("..F.s [ 10%]\n", True)
    assert c["partial"] and c["passed"] == 3 and c["failed"] == 1
