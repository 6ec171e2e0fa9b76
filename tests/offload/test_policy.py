"""The policy's decisions (docs/offload.md, "The model"): the C unit test
of model.c and profile.c with synthetic profiles (model-unit.c), and the
same through policy.c (the policy driver): levels, ski-rental, forcing,
configuration errors, `gpu-offload profile`."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import REPO  # noqa: E402
from policylib import (GPU_OFFLOAD, GUARD, MODEL_UNIT, PROFILE, Driver,  # noqa: E402
                       env, write_profile)


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
    assert r["gpu"] == 0 and r["reasons"] == {"model-cpu": 50}, r
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
