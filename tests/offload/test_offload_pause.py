"""The offloader's pause switch, gpu_offload_pause (src/offload/pause.c,
docs/offload.md "Pausing the offloader"): while paused every call is the
CPU library's (pausecheck's libpauselib.so counts the calls that reach
it; the test backend's journal, every call forced to the "GPU" and the
threshold 0, the calls that did not), counted `paused` in the summary;
resumed, calls go to the GPU again. The copy engine stays idle while
paused (copycheck, libfcopy.so). The ctypes recipe of docs/offload.md,
run as written, with and without the library. pausecheck under
ThreadSanitizer (the library built with it)."""
import re
import subprocess

import pytest

import ofront as F

PAUSECHECK = str(F.T / "pausecheck")
COPYCHECK = str(F.BUILD / "tests" / "offload" / "pcopy" / "copycheck")
GPU_OFFLOAD = str(F.BUILD / "gpu-offload")


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()
    subprocess.run(["make", "-C", str(F.REPO), "-s", "pcopy-tests", "build/gpu-offload",
                    "build/tests/offload/pausecheck"], check=True, stdout=subprocess.DEVNULL)


def summary(err):
    """The summaries on stderr: [(seen, decided, offloaded, {reason: n})]."""
    out = []
    for m in re.finditer(r"gpu-offload: summary: (\d+) calls seen, (\d+) decided, "
                         r"(\d+) offloaded .*; reasons:(.*)", err):
        out.append((int(m.group(1)), int(m.group(2)), int(m.group(3)),
                    dict((k, int(v)) for k, v in
                         (kv.split("=") for kv in m.group(4).split()))))
    return out


# GPU_OFFLOAD_MIN_FLOPS: 0 keeps the light path shut (every call takes the
# full path); 1000 opens it and still sends pausecheck's 8x8 dgemm_ (1024
# flops) to the policy, and so to the GPU, while ddot_ is small.
PATHS = {"full": 0, "light": 1000}


def pausecheck(tmp, mode, k, path="light", **extra):
    e = F.env(tmp, "gpu", GPU_OFFLOAD_MIN_FLOPS=PATHS[path], GPU_OFFLOAD_SUMMARY=1, **extra)
    p = subprocess.run([PAUSECHECK, mode, str(k)], env=e, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.endswith("ok\n"), p.stdout + p.stderr
    return p


def test_without_the_library_pausecheck_finds_no_switch(tmp_path):
    p = subprocess.run([PAUSECHECK, "seq", "1"], env=F.env(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and p.stdout == "no switch\n"


@pytest.mark.parametrize("path,traced", [("light", False), ("full", False),
                                         ("light", True)],
                         ids=["light", "full", "traced"])
def test_paused_calls_reach_the_cpu_library_and_resumed_ones_the_gpu(tmp_path, path, traced):
    """Paused before the first call (its first call takes the full path:
    the library not yet configured) and again later (the light path, or
    the full path when the threshold is 0 or a trace runs): every dgemm_, ddot_
    and dgetrs_ reaches libpauselib.so, the backend runs none of them;
    resumed, every dgemm_ runs on the (test) GPU and none reaches the
    CPU library; the GPU, started once, stays started while paused. The summary: paused = the 3k top-level calls of each
    paused phase, nested = dgetrs_'s 2 dgemm_ each, forced-gpu = the
    resumed ones, nothing else; the trace's report the same."""
    k = 300
    extra = {"GPU_OFFLOAD_TRACE": str(tmp_path / "tr")} if traced else {}
    p = pausecheck(tmp_path, "seq", k, path, **extra)
    assert p.stdout.splitlines() == [
        "paused-first dgemm %d ddot %d dgetrs %d" % (3 * k, k, k),
        "resumed dgemm 0 ddot 0 dgetrs 0",
        "paused-again dgemm %d ddot %d dgetrs %d" % (3 * k, k, k),
        "resumed-again dgemm 0 ddot 0 dgetrs 0",
        "ok"], p.stdout + p.stderr
    assert [r[0] for r in F.runs(tmp_path)] == [1] * (2 * k)
    # The GPU started once, at the first resumed call, and stayed started
    # through the second pause (the policy's state kept).
    kinds = [r[0] for r in F.journal(tmp_path)]
    assert kinds.count("start") == 1 and "stop" not in kinds, kinds[:5]
    assert summary(p.stderr) == [(12 * k, 2 * k, 2 * k, {
        "paused": 6 * k, "nested": 4 * k, "forced-gpu": 2 * k})], p.stderr
    if traced:
        rep = subprocess.run([GPU_OFFLOAD, "report", str(tmp_path / "tr")],
                             capture_output=True, text=True, timeout=60)
        assert rep.returncode == 0, rep.stderr
        assert "1 processes, %d calls" % (12 * k) in rep.stdout, rep.stdout
        for op in ("dgemm", "ddot", "dgetrs"):
            assert re.search(r"^%s .*[ ,]paused:%d(,|$)" % (op, 2 * k), rep.stdout,
                             re.M), rep.stdout


@pytest.mark.parametrize("path", ["light", "full"])
def test_a_thread_flipping_the_switch_while_others_call(tmp_path, path):
    """Four threads call dgemm_ (each result checked) while a fifth
    pauses and resumes 2000 times: no crash, every result right, every
    call counted once, as paused or as a GPU call, and the GPU's runs
    are exactly the GPU calls."""
    p = pausecheck(tmp_path, "threads", 2000, path)
    calls = int(re.search(r"^calls (\d+)$", p.stdout, re.M).group(1))
    [(seen, decided, offloaded, reasons)] = summary(p.stderr)
    assert seen == calls and set(reasons) <= {"paused", "forced-gpu"}, p.stderr
    assert reasons.get("paused", 0) + reasons.get("forced-gpu", 0) == calls
    assert len(F.runs(tmp_path)) == offloaded == reasons.get("forced-gpu", 0)


@pytest.mark.parametrize("mode,k,path", [("threads", 300, "light"), ("threads", 300, "full"),
                                         ("seq", 100, "light"), ("fork", 100, "light")])
def test_under_thread_sanitizer(tmp_path, mode, k, path):
    """The library and pausecheck built with ThreadSanitizer: the switch
    flipped while four threads call, the sequence, the fork: no report,
    every result right (the positive control, a plain read-modify-write
    of the gate word in gpu_offload_pause, was reported as a race)."""
    subprocess.run(["make", "-C", str(F.REPO), "-s", "offload-tsan-tests"], check=True,
                   stdout=subprocess.DEVNULL)
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=PATHS[path], GPU_OFFLOAD_SUMMARY=1,
              TSAN_OPTIONS="halt_on_error=1")
    e["LD_PRELOAD"] = str(F.T / "tsan" / "libgpuoffload.so")
    p = subprocess.run([str(F.T / "tsan" / "pausecheck"), mode, str(k)], env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.endswith("ok\n"), p.stdout + p.stderr
    assert "ThreadSanitizer" not in p.stderr, p.stderr
    assert summary(p.stderr), p.stderr


def test_a_fork_child_inherits_the_pause(tmp_path):
    """The parent started the GPU, paused, forked: the child is paused,
    its calls reach the CPU library (a child of a process that started
    the GPU stays on the CPU anyway, but its calls are counted paused,
    not forked); the parent resumed runs its calls on the GPU."""
    k = 200
    p = pausecheck(tmp_path, "fork", k)
    assert p.stdout.splitlines() == ["child dgemm %d" % k, "parent dgemm 0", "ok"]
    child, parent = summary(p.stderr)
    assert child == (k, 0, 0, {"paused": k}), p.stderr
    assert parent == (k + 1, k + 1, k + 1, {"forced-gpu": k + 1}), p.stderr
    assert len(F.runs(tmp_path)) == k + 1


def test_the_copy_engine_does_not_run_while_paused(tmp_path):
    """copycheck's engine-shaped ?copy calls, paused: every one reaches
    the CPU library (libfcopy.so), every byte right, no worker thread
    started; the summary counts them paused, no copy-engine; resumed,
    the engine takes a big copy again (its workers start)."""
    e = F.env(tmp_path, "", backend=None, GPU_OFFLOAD_SUMMARY=1)
    p = subprocess.run([COPYCHECK, "paused"], env=e, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    f = p.stdout.splitlines()
    assert f[0] == "switch 1 was 0", p.stdout
    assert re.search(r"^exact checks \d+ failed 0$", p.stdout, re.M), p.stdout
    assert "engine-shaped calls 480 reached-cpu-library 480" in f, p.stdout
    m = re.search(r"^paused tasks start (\d+) end (\d+)$", p.stdout, re.M)
    assert m and m.group(1) == m.group(2), p.stdout
    assert "paused big copies-right 1 reached-cpu-library 1" in f, p.stdout
    m = re.search(r"^resumed big copies-right 1 reached-cpu-library 0 tasks (\d+)$",
                  p.stdout, re.M)
    assert m and int(m.group(1)) > 1, p.stdout
    [(_, _, _, reasons)] = summary(p.stderr)
    assert "copy-engine" not in reasons or reasons["copy-engine"] == 1, p.stderr
    assert reasons.get("copy-engine") == 1 and reasons["paused"] > 480, p.stderr


def recipe():
    """The ctypes recipe of docs/offload.md, as written there."""
    text = (F.REPO / "docs" / "offload.md").read_text()
    m = re.search(r"<!-- pause-recipe -->\n```python\n(.*?)```\n<!-- /pause-recipe -->",
                  text, re.S)
    assert m, "no recipe in docs/offload.md"
    return m.group(1)


RECIPE_PROG = r'''
import os, sys
import numpy as np
{recipe}
def runs():
    j = os.environ.get("GPU_OFFLOAD_TEST_JOURNAL")
    if not j or not os.path.exists(j):
        return 0
    with open(j) as f:
        return sum(1 for ln in f if ln.startswith("run "))
rng = np.random.default_rng(1)
a, b = rng.random((64, 64)) + 64 * np.eye(64), rng.random((64, 3))
want = np.linalg.solve(a, b)
r0 = runs()
with offload_paused():
    with offload_paused():          # nested: the inner one leaves it paused
        got = np.linalg.solve(a, b)
    got2 = np.linalg.solve(a, b)
r1 = runs()
np.linalg.solve(a, b)
r2 = runs()
ok = np.allclose(got, want) and np.allclose(got2, want)
print("switch", _switch is not None, "ok", ok, "runs", r0, r1 - r0, r2 - r1)
'''


@pytest.mark.skipif(not F.HAVE_NUMPY, reason="needs python3-numpy")
def test_the_ctypes_recipe_with_and_without_the_library(tmp_path):
    prog = tmp_path / "recipe.py"
    prog.write_text(RECIPE_PROG.format(recipe=recipe()))
    # Not loaded: the recipe is a no-op, the program runs.
    p = subprocess.run([F.PY, str(prog)], env=F.env(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "switch False ok True runs 0 0 0\n", \
        p.stdout + p.stderr
    # Preloaded, every call forced to the (test) GPU: the solves inside
    # the block ran on the CPU, the one after it on the GPU again.
    e = F.env(tmp_path, "gpu", GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_SUMMARY=1)
    p = subprocess.run([F.PY, str(prog)], env=e, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.match(r"switch True ok True runs (\d+) 0 (\d+)\n$", p.stdout)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0, p.stdout + p.stderr
    [(_, _, _, reasons)] = summary(p.stderr)
    assert reasons.get("paused", 0) >= 2, p.stderr
