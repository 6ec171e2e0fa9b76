"""The offloader's probe programs of bench/offload that the H200 runs use
(docs/benchmarks.md, "Next on the H200"), on the development machine:
that each measures what it says (the summary's counts show which side
ran where), not how fast."""
import re
import subprocess

import pytest

import ofront as F

STUB = F.BUILD / "bench" / "libdecidestub.so"
DECIDE = F.BUILD / "bench" / "decide_cost"


def _make(*goals):
    subprocess.run(["make", "-C", str(F.REPO), "-s"] + list(goals), check=True,
                   stdout=subprocess.DEVNULL)


def test_decide_cost_times_full_decisions_against_paused_calls(tmp_path):
    """decide_cost's active rounds are decided by the policy in full
    (reason model-cpu, with the H200 profile), its paused rounds go
    straight to the CPU library (reason paused), as many calls each; and
    without the library every round is plain."""
    _make("offload", str(DECIDE.relative_to(F.REPO)))
    e = F.env(tmp_path, "", GPU_OFFLOAD_LIBRARY=STUB, GPU_OFFLOAD_SUMMARY=1,
              GPU_OFFLOAD_PROFILE=F.REPO / "docs" / "profile-h200.txt")
    p = subprocess.run([str(DECIDE), "128", "1000", "4"], env=e,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    sides = re.findall(r"^(\w+) n=128: [\d.]+ ns a call$", p.stdout, re.M)
    assert sides == ["active", "paused", "active", "paused"], p.stdout
    assert re.search(r"reasons:.* model-cpu=2000( |$)", p.stderr), p.stderr
    assert re.search(r"reasons:.* paused=2000( |$)", p.stderr), p.stderr
    p = subprocess.run([str(DECIDE), "128", "100", "2"], env=F.env(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.count("plain n=128") == 2, p.stdout


@F.needs_lapack
def test_dare_probe_switches_between_the_devices_in_one_process(tmp_path):
    """dare_probe.py forced to the (test) GPU: the switch is found, the
    four ways and the two long-double residuals are printed, then the
    bisection, the callees' backward errors and the two perturbation
    runs (20 each here), and the summary shows calls on both sides
    (forced-gpu and paused)."""
    pytest.importorskip("scipy")
    F.build()
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_SUMMARY=1)
    p = subprocess.run([F.PY, str(F.REPO / "bench" / "offload" / "dare_probe.py"),
                        "11", "20"],
                       env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "switch found" in p.stdout, p.stdout
    ways = re.findall(r"^X on the (cpu|gpu), residual on the (cpu|gpu): max \|res\| "
                      r"[\d.e+-]+  (ok|OVER atol)$", p.stdout, re.M)
    assert [w[:2] for w in ways] == [("cpu", "cpu"), ("cpu", "gpu"),
                                     ("gpu", "cpu"), ("gpu", "gpu")], p.stdout
    assert len(re.findall(r"residual in long double", p.stdout)) == 2, p.stdout
    assert re.search(r"reasons:.* forced-gpu=[1-9]", p.stderr), p.stderr
    assert re.search(r"reasons:.* paused=[1-9]", p.stderr), p.stderr
    # the bisection: one line per callee found, then the rest's line
    bis = re.findall(r"^bisect: only (.+?) on the GPU", p.stdout, re.M)
    assert len(bis) >= 2 and bis[-1] == "the rest" and "solve" in bis, p.stdout
    # the callees' backward errors, both devices on one line each
    acc = re.findall(r"^accuracy: (\w+) \(\S+\): on the cpu .*; on the gpu ", p.stdout, re.M)
    assert "qr" in acc and "ordqz" in acc, p.stdout
    # the perturbation runs: the data's, then every callee's arguments'
    pert = re.findall(r"^perturbed: .* (\d+) over atol$", p.stdout, re.M)
    assert len(pert) == 2 and "20 problems" in p.stdout, p.stdout
