"""The agents benchmark's smoke run on the fake driver (bench/agents/).

Checks the benchmark's plumbing, not timings: every mode ran and finished
experiments, the GPU phases it read from the fake driver's journal never
overlapped under a queue or under gpumutex (they did with no arbitration
and several agents, or the overlap count would be blind), and each
gpumutex hand-off's parts were found in the event log and add up to its
gap.
"""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENTS = os.path.join(REPO, "bench", "agents", "agents.py")
LIB = os.path.join(REPO, "build", "libgpumutex.so")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    # The fake driver is a test program: `make check` builds it only
    # through the tests that need it, this one included.
    subprocess.run(["make", "-C", REPO, "-s", "ship", "fakecuda"], check=True)
    out = tmp_path_factory.mktemp("agents")
    r = subprocess.run(
        [sys.executable, AGENTS, "--fake", "--window", "4", "--think", "0.2",
         "--prep", "0.1", "--gpu", "0.5", "--post", "0.1", "--agents", "3",
         "--out", str(out), "--lib", f"new={LIB}", "--lib", f"again={LIB}"],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    with open(out / "agents.json") as f:
        return json.load(f), (out / "agents.md").read_text()


def test_every_mode_ran(smoke):
    res, md = smoke
    labels = [r["label"] for r in res["results"]]
    assert labels == ["one agent", "no arbitration", "flock queue",
                      "gpumutex new", "gpumutex again"]
    for r in res["results"]:
        assert r["finished"] >= 1, r["label"]
        assert r["label"] in md


def test_overlaps_counted_only_where_nothing_arbitrates(smoke):
    res, _ = smoke
    by = {r["label"]: r for r in res["results"]}
    assert by["no arbitration"]["overlaps"] >= 1
    for label in ("flock queue", "gpumutex new", "gpumutex again"):
        assert by[label]["overlaps"] == 0, label


def test_gpumutex_handoffs_split_from_the_event_log(smoke):
    res, _ = smoke
    for r in res["results"]:
        if r["mode"] != "gpumutex":
            continue
        split = [h for h in r["handoffs"] if "holder_to_release" in h]
        assert split, r["label"]
        for h in split:
            parts = (h["holder_to_release"] + h["release_to_grant"]
                     + h["grant_to_first_kernel"])
            assert abs(parts - h["gap"]) < 1e-3
