"""The policy's decisions (docs/offload.md, "The model"): the C unit test
of model.c and profile.c with synthetic profiles (model-unit.c), and the
same through policy.c (the policy driver): levels, ski-rental, forcing,
configuration errors, `gpu-offload profile`."""

import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import REPO  # noqa: E402
from policylib import (GPU_OFFLOAD, GUARD, MODEL_UNIT, PROFILE, Driver,  # noqa: E402
                       env, needs_lapack, write_profile)


@pytest.fixture(scope="module", autouse=True)
def build():
    subprocess.run(["make", "-C", REPO, "-s", "all", "fakecuda"], check=True)


@pytest.mark.parametrize("name", ["numbers", "parse", "interp", "levels",
                                  "ski", "converge", "probe", "fastcpu"])
def test_model_unit(name):
    r = subprocess.run([MODEL_UNIT, name], capture_output=True, text=True,
                       timeout=GUARD)
    assert r.returncode == 0 and r.stdout == f"ok {name}\n", r.stderr


# 5.4e7 flops: T_cpu = 5.4e-4 s; T_gpu = 5.4e-6 + 2e-5 + (2.75e6 +
# 7.2e5) / 1e10 = 3.724e-4 s: a predicted speedup of 1.45, which pays from
# level 5 (1.3x) on but not at level 4 (1.6x). Observed times as predicted.
MID = "gemm d 5.4e7 2.75e6 7.2e5 0.00054 0.0003724"


@pytest.mark.parametrize("level,offloads", [(1, False), (4, False),
                                            (5, True), (10, True)])
def test_the_level_decides_a_middling_call(tmp_path, level, offloads):
    e = env(tmp_path, devices=None, GPU_OFFLOAD_LEVEL=str(level))
    d = Driver(e)
    # many calls: enough savings for the ski-rental start where it pays
    r = d.call(20000, MID)
    d.finish()
    if offloads:
        assert r["starts"] == 1 and r["gpu"] > 0, r
    else:
        assert r["starts"] == 0 and r["gpu"] == 0, r
        assert r["reasons"] == {"model-cpu": 20000}, r


def test_a_short_program_never_starts_the_gpu(tmp_path):
    # each call would save 0.147 s; the start needs 2 x 0.5 s at level 5
    d = Driver(env(tmp_path, devices=None))
    r = d.call(6)
    assert r["starts"] == 0 and r["reasons"] == {"ski-rental": 6}, r
    r = d.call(1)
    assert r["starts"] == 1 and r["gpu"] == 1, r
    d.finish()


def test_without_a_profile_everything_stays_on_the_cpu(tmp_path):
    e = env(tmp_path, devices=None)
    os.unlink(e["GPU_OFFLOAD_PROFILE"])
    d = Driver(e)
    r = d.call(50)
    rc, err = d.finish()
    assert r["gpu"] == 0 and r["reasons"] == {"no-profile": 50}, r
    # named by GPU_OFFLOAD_PROFILE but missing: one line says so
    assert err.count("gpu-offload:") == 1 and "profile" in err, err


def test_a_bad_profile_is_named_with_its_line(tmp_path):
    e = env(tmp_path, devices=None)
    write_profile(tmp_path, PROFILE + "cpu sgemm 1e6\n")
    d = Driver(e)
    r = d.call(3)
    rc, err = d.finish()
    assert r["gpu"] == 0
    assert "line 8: a point is WORK:SPEED" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("force,dev", [("cpu", "cpu"), ("gpu", "gpu")])
def test_forced(tmp_path, force, dev):
    d = Driver(env(tmp_path, devices=None, GPU_OFFLOAD_FORCE=force))
    # a call the model would keep on the CPU
    r = d.call(5, "gemm d 1e6 1e5 1e5 1e-5 1")
    d.finish()
    assert r[dev] == 5 and r["reasons"] == {f"forced-{force}": 5}, r


def test_bad_settings_say_so_once(tmp_path):
    d = Driver(env(tmp_path, devices=None, GPU_OFFLOAD_LEVEL="11",
                   GPU_OFFLOAD_FORCE="always"))
    d.call(3)
    rc, err = d.finish()
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert "GPU_OFFLOAD_LEVEL=11 is not a level from 1 to 10" in err
    assert "GPU_OFFLOAD_FORCE=always is not cpu or gpu" in err


def test_profile_command(tmp_path):
    path = write_profile(tmp_path)
    e = dict(os.environ, GPU_OFFLOAD_PROFILE=path)
    r = subprocess.run([GPU_OFFLOAD, "profile"], env=e, capture_output=True,
                       text=True, timeout=GUARD)
    assert r.returncode == 0
    assert r.stdout.startswith(f"# {path}\ngpu-offload-profile 1\n")
    assert "gpu dgemm 1e+06:1e+13 1e+12:1e+13" in r.stdout
    e["GPU_OFFLOAD_PROFILE"] = str(tmp_path / "none")
    r = subprocess.run([GPU_OFFLOAD, "profile"], env=e, capture_output=True,
                       text=True, timeout=GUARD)
    assert r.returncode == 1 and "gpu-offload calibrate" in r.stderr
    # the default place: $XDG_CONFIG_HOME/gpu-offload/profile
    e.pop("GPU_OFFLOAD_PROFILE")
    e["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    os.makedirs(tmp_path / "xdg" / "gpu-offload")
    (tmp_path / "xdg" / "gpu-offload" / "profile").write_text(PROFILE)
    r = subprocess.run([GPU_OFFLOAD, "profile"], env=e, capture_output=True,
                       text=True, timeout=GUARD)
    assert r.returncode == 0 and "source synthetic" in r.stdout


# ---- Through the frontend's library and its test backend -----------------

CALIB = os.path.join(REPO, "build", "gpu-offload-calib")
TESTBE = os.path.join(REPO, "build", "libgpuoffload-test.so")

# A GPU so fast and cheap to start that every decided call pays.
FAST = """gpu-offload-profile 1
startup 0.0001
h2d 0 1e15
d2h 0 1e15
cpu dgemm 1e3:1e6
gpu dgemm 1e3:1e15
cpu sgemm 1e3:1e6
gpu sgemm 1e3:1e15
cpu dgetrf 1e3:1e6
gpu dgetrf 1e3:1e15
"""



def run_workload(tmp_path, e, extra=()):
    tr = tmp_path / "trace"
    # the curves of FAST (and one without, which stays on the CPU)
    e = dict(e, GPO_CALIB_OPS="dgemm,sgemm,dgetrf,dpotrf")
    r = subprocess.run([GPU_OFFLOAD, "run", "--summary", "--trace", str(tr),
                        "--backend", TESTBE, *extra, "--", CALIB, "128", "1"],
                       env=e, capture_output=True, text=True, timeout=GUARD)
    assert r.returncode == 0, r.stderr
    summary = [l for l in r.stderr.splitlines() if "summary:" in l]
    assert len(summary) == 1, r.stderr
    m = re.search(r"(\d+) offloaded", summary[0])
    return int(m.group(1)), summary[0], r.stderr


@needs_lapack
def test_run_offloads_through_the_library(tmp_path):
    e = env(tmp_path, devices=None)
    write_profile(tmp_path, FAST)
    n, summary, err = run_workload(tmp_path, e)
    assert n > 0, summary
    assert "model-gpu=" in summary and "probe=" in summary, summary


@needs_lapack
def test_run_under_a_held_gpu_stays_on_the_cpu(tmp_path):
    import jobs
    from policylib import HOLDER
    e = env(tmp_path, devices="0")
    write_profile(tmp_path, FAST)
    h = jobs.start(HOLDER, jobs.job_env(e["GPUMUTEX_LOCK_DIR"],
                                        e["GM_JOURNAL"], devices="0"),
                   ready=True, hold=True)
    assert h.ready()
    n, summary, err = run_workload(tmp_path, e)
    h.wait()
    assert n == 0 and "no-lease=" in summary, summary
    n, summary, err = run_workload(tmp_path, e, ("--level", "5"))
    assert n > 0, summary


def test_run_refuses_a_bad_level(tmp_path):
    r = subprocess.run([GPU_OFFLOAD, "run", "--level", "0", "--", "true"],
                       capture_output=True, text=True, timeout=GUARD)
    assert r.returncode == 2 and "--level takes 1 to 10" in r.stderr


def test_verify_mode_decides_for_the_gpu(tmp_path):
    """--verify runs every GPU-capable call on both devices: the policy's
    decision is the GPU's, whatever the model says (and with no profile)."""
    e = env(tmp_path, devices=None, GPU_OFFLOAD_VERIFY="1",
            GPU_OFFLOAD_PROFILE="none")
    d = Driver(e)
    r = d.call(5, "gemm d 1e6 1e5 1e5 1e-5 1")
    rc, err = d.finish()
    assert r["gpu"] == 5 and r["reasons"] == {"forced-gpu": 5}, r
    assert err == ""


@needs_lapack
def test_run_measure_traces_and_keeps_everything_on_the_cpu(tmp_path):
    e = env(tmp_path, devices=None)
    write_profile(tmp_path, FAST)
    n, summary, err = run_workload(tmp_path, e, ("--measure",))
    assert n == 0 and "forced-cpu=" in summary, summary
    text = subprocess.run([GPU_OFFLOAD, "report", str(tmp_path / "trace")],
                          capture_output=True, text=True,
                          timeout=GUARD).stdout
    assert re.search(r"^dgemm +\d+", text, re.M), text


MT = os.path.join(REPO, "build", "tests", "offload", "policy-mt-tsan")


@pytest.mark.parametrize("managed", [False, True])
def test_threads_and_the_watcher_race_free(tmp_path, managed):
    """Eight threads decide and observe at once (ThreadSanitizer build);
    managed, lease-holders queue for the GPU meanwhile and are served
    (the watcher gives the lease back, the threads take it again)."""
    import jobs
    from policylib import HOLDER
    e = env(tmp_path, devices="0" if managed else None,
            GPU_OFFLOAD_SUMMARY="1", GPU_OFFLOAD_WATCH_MS="1",
            GPU_OFFLOAD_YIELD_MS="0", GPU_OFFLOAD_RETRY_MS="1",
            GPU_OFFLOAD_TRACE=str(tmp_path / "trace"),
            TSAN_OPTIONS="halt_on_error=1 exitcode=66")
    p = subprocess.Popen([MT], env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    if managed:
        he = jobs.job_env(e["GPUMUTEX_LOCK_DIR"], e["GM_JOURNAL"],
                          devices="0")
        for _ in range(3):
            h = jobs.start(HOLDER, he, args=["--ticks", "2"])
            assert h.wait() == 0
    out, err = p.communicate(timeout=GUARD)
    if "unexpected memory mapping" in err:
        # a kernel whose address-space randomisation this TSan predates
        pytest.skip("ThreadSanitizer cannot run on this kernel")
    assert p.returncode == 0 and out == "done\n", err
    assert "ThreadSanitizer" not in err, err
    m = re.search(r"summary: (\d+) calls seen, (\d+) decided", err)
    assert m and int(m.group(1)) == 160000 and int(m.group(2)) == 106664, err
    # every call traced, records whole (one write each, under the lock)
    f, = list((tmp_path / "trace").iterdir())
    assert (f.stat().st_size - 64) % 320 == 0
    assert (f.stat().st_size - 64) // 320 >= 160000


# CPU 1e11 flop/s, GPU 1e13, copies 1e10 B/s: policy-mt's learning call
# (1e10 flops, 8.9e8 bytes in) is predicted 0.1 s on the CPU and 0.09 s
# on the GPU, which level 5 (1.3x) leaves on the CPU until the CPU's
# correction factor is learnt.
LEARN = """gpu-offload-profile 1
source synthetic
startup 0.5
h2d 1e-5 1e10
d2h 1e-5 1e10
cpu dgemm 1e6:1e11 1e12:1e11
gpu dgemm 1e6:1e13 1e12:1e13
"""


def test_learning_converges_under_threads(tmp_path):
    """Eight threads decide and learn at once, without the policy's lock
    on the CPU path (ThreadSanitizer build): the CPU's correction factor
    still reaches what the threads observe (4x the prediction), and the
    verdict turns to the GPU, which starts."""
    e = env(tmp_path, devices=None, GPU_OFFLOAD_SUMMARY="1",
            TSAN_OPTIONS="halt_on_error=1 exitcode=66")
    write_profile(tmp_path, LEARN)
    p = subprocess.run([MT, "learn"], env=e, capture_output=True, text=True,
                       timeout=GUARD)
    if "unexpected memory mapping" in p.stderr:
        pytest.skip("ThreadSanitizer cannot run on this kernel")
    assert p.returncode == 0 and "ThreadSanitizer" not in p.stderr, p.stderr
    m = re.search(r"learnt t_cpu=([0-9.]+) device=(\d)", p.stdout)
    assert m, p.stdout
    assert abs(float(m.group(1)) / 0.4 - 1) < 1e-9, p.stdout
    assert m.group(2) == "1" or "probe" in p.stderr, p.stdout
    s = re.search(r"summary: (\d+) calls seen, (\d+) decided, (\d+) offloaded", p.stderr)
    assert s and int(s.group(1)) == 16001 and int(s.group(2)) == 16001, p.stderr
    # most calls went to the GPU once learnt (a probe every 16)
    assert int(s.group(3)) > 16001 * 0.8, p.stderr
