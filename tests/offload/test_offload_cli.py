"""The command explains itself (docs/offload.md, "The command"): --help
for gpu-offload and each subcommand (exit 0, every option listed);
unknown options and missing files are errors with exit 2; a --backend
that cannot be loaded and a --trace that is not a writable directory
fail before the program starts, naming the path; the summary says why
nothing was offloaded when the setup is why (no profile, no CUDA
driver, no GPU backend)."""
import os
import subprocess

import pytest

import ofront as F

GPU_OFFLOAD = str(F.BUILD / "gpu-offload")
CUDA_BE = F.BUILD / "libgpuoffload-cuda.so"

OPTIONS = {
    "run": ["--level", "--profile", "--backend", "--trace", "--measure",
            "--verify", "--summary", "--help"],
    "report": ["--help"],
    "profile": ["--help"],
    "calibrate": ["--output", "--backend", "--cpu-library", "--max-size",
                  "--reps", "--budget", "--ops", "--thorough", "--help"],
}

# The GPU pays for anything above the threshold, at once (start-up 0).
GPU_PAYS = """gpu-offload-profile 1
source synthetic
startup 0
h2d 1e-9 1e12
d2h 1e-9 1e12
cpu dgemm 1e3:1e6 1e12:1e6
gpu dgemm 1e3:1e13 1e12:1e13
"""


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()
    subprocess.run(["make", "-C", str(F.REPO), "-s", "build/gpu-offload"],
                   check=True, stdout=subprocess.DEVNULL)


def cli(*args, env=None, cwd=None):
    return subprocess.run([GPU_OFFLOAD, *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=cwd)


def clean_env(tmp):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("GPU_OFFLOAD") and k != "LD_PRELOAD"}
    e["HOME"] = str(tmp)            # no profile at the default place
    e.pop("XDG_CONFIG_HOME", None)
    return e


def test_top_level_help_lists_every_command_and_option():
    for args in (["--help"], ["-h"]):
        p = cli(*args)
        assert p.returncode == 0 and p.stderr == "", p.stderr
        for cmd, opts in OPTIONS.items():
            assert f"  {cmd} " in p.stdout or f"  {cmd}\n" in p.stdout, cmd
            for o in opts:
                assert o in p.stdout, (cmd, o)


@pytest.mark.parametrize("cmd", sorted(OPTIONS))
def test_each_command_has_help(cmd):
    for h in ("--help", "-h"):
        p = cli(cmd, h)
        assert p.returncode == 0, (cmd, p.stderr)
        assert p.stdout.startswith(f"usage: gpu-offload {cmd}"), p.stdout
        for o in OPTIONS[cmd]:
            assert o in p.stdout, (cmd, o)


@pytest.mark.parametrize("cmd", sorted(OPTIONS))
def test_unknown_options_exit_2(cmd):
    p = cli(cmd, "--no-such-option", *(["--", "true"] if cmd == "run" else []))
    assert p.returncode == 2, (cmd, p.returncode, p.stderr)
    assert "unknown option --no-such-option" in p.stderr, p.stderr


def test_missing_files_exit_2(tmp_path):
    p = cli("report", str(tmp_path / "absent"))
    assert p.returncode == 2 and str(tmp_path / "absent") in p.stderr, p.stderr
    p = cli("run", "--profile", str(tmp_path / "absent"), "--", "true")
    assert p.returncode == 2 and str(tmp_path / "absent") in p.stderr, p.stderr
    p = cli("calibrate", "--backend", str(tmp_path / "absent.so"),
            "--output", str(tmp_path / "prof"))
    assert p.returncode == 2 and "absent.so" in p.stderr, p.stderr
    p = cli("no-such-command")
    assert p.returncode == 2


def _not_started(tmp, *opts):
    """run OPTS -- touch MARK: exit 2, the marker never made."""
    mark = tmp / "started"
    p = cli("run", *opts, "--", "touch", str(mark), env=clean_env(tmp))
    assert p.returncode == 2, (opts, p.returncode, p.stderr)
    assert not mark.exists(), "the program ran"
    return p.stderr


def test_a_backend_that_cannot_be_loaded_fails_before_the_program(tmp_path):
    err = _not_started(tmp_path, "--backend", "/nonexistent.so")
    assert "/nonexistent.so" in err, err
    notlib = tmp_path / "notlib.so"
    notlib.write_text("not an ELF file\n")
    err = _not_started(tmp_path, "--backend", str(notlib))
    assert str(notlib) in err, err
    # a loadable library that is not a backend: named, and why
    # (libgpumutex.so: built by `make check` everywhere, the distro
    # roots included, where the offloader's test programs are not)
    err = _not_started(tmp_path, "--backend", str(F.BUILD / "libgpumutex.so"))
    assert "libgpumutex.so" in err and "gpo_backend_entry" in err, err
    # the real thing passes, and the program runs
    mark = tmp_path / "ran"
    p = cli("run", "--backend", str(F.TESTBE), "--", "touch", str(mark),
            env=clean_env(tmp_path))
    assert p.returncode == 0 and mark.exists(), p.stderr


def test_a_trace_that_is_not_a_writable_directory_fails_before(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    err = _not_started(tmp_path, "--trace", str(f))
    assert str(f) in err, err
    err = _not_started(tmp_path, "--trace", str(f / "sub"))
    assert str(f / "sub") in err, err
    # a directory that does not exist yet is made, as the library would
    mark = tmp_path / "ran"
    p = cli("run", "--trace", str(tmp_path / "new"), "--", "touch", str(mark),
            env=clean_env(tmp_path))
    assert p.returncode == 0 and mark.exists() and (tmp_path / "new").is_dir()


def _summary_run(tmp, env, *opts):
    """threadcheck (4 threads x 20 dgemm 64x64: 524288 flops each, above
    a threshold of 1000) under `gpu-offload run --summary`."""
    env["GPU_OFFLOAD_MIN_FLOPS"] = "1000"
    env["GPU_OFFLOAD_NVML"] = "0"
    p = cli("run", "--summary", *opts, "--", str(F.T / "threadcheck"), env=env)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr
    return p.stderr


@pytest.mark.skipif(not F.HAVE_LAPACK, reason="needs libblas3")
def test_summary_says_no_profile(tmp_path):
    err = _summary_run(tmp_path, clean_env(tmp_path))
    assert " no-profile=80" in err, err
    assert "nothing was offloaded: no profile" in err, err
    assert "model-cpu" not in err, err


@pytest.mark.skipif(not F.HAVE_LAPACK, reason="needs libblas3")
@pytest.mark.skipif(not CUDA_BE.exists(), reason="the CUDA backend is not built")
def test_summary_says_no_cuda_driver(tmp_path):
    prof = tmp_path / "profile"
    prof.write_text(GPU_PAYS)
    e = clean_env(tmp_path)
    # no libcuda.so.1 on this machine's library path (the fake driver is
    # not put there): the CUDA backend finds no driver
    e.pop("LD_LIBRARY_PATH", None)
    err = _summary_run(tmp_path, e, "--profile", str(prof))
    assert " no-driver=" in err, err
    assert "nothing was offloaded: no CUDA driver" in err, err


@pytest.mark.skipif(not F.HAVE_LAPACK, reason="needs libblas3")
def test_summary_says_no_gpu_backend(tmp_path):
    prof = tmp_path / "profile"
    prof.write_text(GPU_PAYS)
    e = clean_env(tmp_path)
    e.update(LD_PRELOAD=str(F.LIB), GPU_OFFLOAD_PROFILE=str(prof),
             GPU_OFFLOAD_BACKEND=str(tmp_path / "gone.so"),
             GPU_OFFLOAD_SUMMARY="1", GPU_OFFLOAD_MIN_FLOPS="1000",
             GPU_OFFLOAD_NVML="0")
    p = subprocess.run([str(F.T / "threadcheck")], env=e, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert " no-backend=" in p.stderr, p.stderr
    assert "nothing was offloaded: no GPU backend" in p.stderr, p.stderr
