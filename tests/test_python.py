"""The Python package (python/gpumutex) as an API: what its children see,
what it refuses before running anything, os.system parity, subprocess
pass-through. `python -m gpumutex` and real contention are in
test_python_jobs.py, `pip install` in test_python_install.py; what they
share is tests/pythonlib.py.

Every claim is checked on an observable outcome: a child's printed
environment, a marker file that must not appear."""

import json
import math
import os
import signal
import subprocess

import pytest

from conftest import BUILD
from pythonlib import LIBRARY, PRINT_ENV, PYTHON, child_env, gpumutex
from pythonlib import caller_environ_unchanged, clean_env, native  # noqa: F401 (fixtures)


# ---- Paths and version ------------------------------------------------------

def test_library_path_and_version_from_source_tree(native):
    assert gpumutex.library_path() == os.path.realpath(LIBRARY)
    assert gpumutex.__version__ == "0.1.0"
    out = subprocess.run([os.path.join(BUILD, "gpumutex"), "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["gpumutex", gpumutex.__version__]


# ---- The child's environment ------------------------------------------------

def test_kwargs_reach_the_child_only(native, clean_env, tmp_path):
    base = dict(clean_env, LD_PRELOAD="libm.so.6", GPUMUTEX_JOB="inherited",
                GPUMUTEX_LOCK_DIR="/overridden", GPUMUTEX_QUIET="1")
    base_copy = dict(base)
    seen = [child_env(visible_devices=[0, 2, 3], num_devices=2,
                      lock_dir=tmp_path / "locks", timeout=1.5, quiet=False,
                      env=base) for _ in range(3)]
    for env in seen:
        assert env["GPUMUTEX_VISIBLE_DEVICES"] == "0,2,3"
        assert env["GPUMUTEX_NUM_DEVICES"] == "2"
        assert env["GPUMUTEX_LOCK_DIR"] == str(tmp_path / "locks")
        assert env["GPUMUTEX_TIMEOUT"] == "1.5"
        assert env["GPUMUTEX_QUIET"] == "0"
        # The library first, then what was there.
        assert env["LD_PRELOAD"] == os.path.realpath(LIBRARY) + ":libm.so.6"
        assert len(env["GPUMUTEX_JOB"]) == 32
        int(env["GPUMUTEX_JOB"], 16)
    jobs = {env["GPUMUTEX_JOB"] for env in seen}
    assert len(jobs) == 3 and "inherited" not in jobs   # fresh per call
    assert base == base_copy                            # env= not modified
    for name in ("GPUMUTEX_VISIBLE_DEVICES", "GPUMUTEX_JOB"):
        assert name not in os.environ or os.environ[name] != seen[0][name]


def test_defaults_and_inherited_variables(native, clean_env, monkeypatch):
    # Nothing but the devices: the other variables are left unset (the
    # core's defaults apply), LD_PRELOAD is just the library.
    env = child_env(visible_devices="1", env=clean_env)
    assert env["GPUMUTEX_VISIBLE_DEVICES"] == "1"
    for name in ("GPUMUTEX_NUM_DEVICES", "GPUMUTEX_LOCK_DIR",
                 "GPUMUTEX_TIMEOUT", "GPUMUTEX_QUIET"):
        assert name not in env
    assert env["LD_PRELOAD"] == os.path.realpath(LIBRARY)
    # With no env=, the base is os.environ, read at call time; its
    # GPUMUTEX_VISIBLE_DEVICES serves when the argument is not given.
    monkeypatch.setenv("GPUMUTEX_VISIBLE_DEVICES", "4,5")
    monkeypatch.setenv("GPUMUTEX_NUM_DEVICES", "2")
    monkeypatch.setenv("GM_PY_TEST_MARK", "parent")
    env = child_env()
    assert env["GPUMUTEX_VISIBLE_DEVICES"] == "4,5"
    assert env["GPUMUTEX_NUM_DEVICES"] == "2"
    assert env["GM_PY_TEST_MARK"] == "parent"
    # An argument overrides the inherited variable.
    env = child_env(visible_devices=[7], num_devices=1)
    assert env["GPUMUTEX_VISIBLE_DEVICES"] == "7"
    assert env["GPUMUTEX_NUM_DEVICES"] == "1"
    # The library is not put twice into LD_PRELOAD.
    env = child_env(visible_devices="0", env=dict(
        clean_env, LD_PRELOAD="libm.so.6 " + os.path.realpath(LIBRARY)))
    assert env["LD_PRELOAD"] == "libm.so.6 " + os.path.realpath(LIBRARY)


def test_environ_returns_a_new_dict(native):
    base = {"PATH": "/bin", "GPUMUTEX_JOB": "x"}
    env = gpumutex.environ(visible_devices=(3, 1), timeout=0, quiet=True,
                           env=base)
    assert base == {"PATH": "/bin", "GPUMUTEX_JOB": "x"}
    assert env["GPUMUTEX_VISIBLE_DEVICES"] == "3,1"
    assert env["GPUMUTEX_TIMEOUT"] == "0"
    assert env["GPUMUTEX_QUIET"] == "1"
    assert env["PATH"] == "/bin"
    assert env["LD_PRELOAD"] == os.path.realpath(LIBRARY)
    # Floats are written without an exponent (the core wants digits and a
    # dot); ints as ints.
    # At most the 18 fraction digits the core takes (1e-20 s is 0).
    for value, text in ((1e-7, "0.0000001"), (30, "30"), (2.5, "2.5"),
                        (1e9, "1000000000.0"), (-0.0, "0.0"),
                        (1e-20, "0.000000000000000000"),
                        (1.5e-18, "0.000000000000000002")):
        assert gpumutex.environ(visible_devices="0", timeout=value,
                                env={})["GPUMUTEX_TIMEOUT"] == text


# ---- Invalid arguments: refused before anything runs -------------------------

D3 = {"visible_devices": "0,1,2"}
BAD = [
    # (keyword arguments, exception, fragments the message must contain)
    ({"visible_devices": ""}, ValueError, ["visible_devices", "empty"]),
    ({"visible_devices": "0,,1"}, ValueError, ["visible_devices", "'0,,1'"]),
    ({"visible_devices": "0,0"}, ValueError, ["'0,0'", "twice"]),
    ({"visible_devices": "64"}, ValueError, ["'64'", "0 to 63"]),
    ({"visible_devices": "-1"}, ValueError, ["'-1'"]),
    ({"visible_devices": " 0"}, ValueError, ["' 0'"]),
    ({"visible_devices": "1,a"}, ValueError, ["'1,a'"]),
    ({"visible_devices": []}, ValueError, ["visible_devices", "empty"]),
    ({"visible_devices": [0, 0]}, ValueError, ["[0, 0]", "twice"]),
    ({"visible_devices": [64]}, ValueError, ["[64]", "0 to 63"]),
    ({"visible_devices": [-1]}, ValueError, ["[-1]"]),
    ({"visible_devices": [True]}, TypeError, ["visible_devices", "bool"]),
    ({"visible_devices": ["0"]}, TypeError, ["visible_devices", "str"]),
    ({"visible_devices": [1.0]}, TypeError, ["visible_devices", "float"]),
    ({"visible_devices": True}, TypeError, ["visible_devices", "bool"]),
    ({"visible_devices": 3}, TypeError, ["visible_devices", "int"]),
    ({"visible_devices": b"0"}, TypeError, ["visible_devices", "bytes"]),
    ({}, ValueError, ["visible_devices is required"]),
    (dict(D3, num_devices=0), ValueError, ["num_devices=0", "1 to 3"]),
    (dict(D3, num_devices=4), ValueError, ["num_devices=4", "1 to 3"]),
    (dict(D3, num_devices=True), TypeError, ["num_devices", "bool"]),
    (dict(D3, num_devices=1.0), TypeError, ["num_devices", "float"]),
    (dict(D3, num_devices="1"), TypeError, ["num_devices", "str"]),
    (dict(D3, timeout=-1), ValueError, ["timeout=-1", "negative"]),
    (dict(D3, timeout=-0.5), ValueError, ["timeout=-0.5"]),
    (dict(D3, timeout=math.nan), ValueError, ["timeout=nan"]),
    (dict(D3, timeout=math.inf), ValueError, ["timeout=inf"]),
    (dict(D3, timeout=2e9), ValueError, ["timeout=2000000000.0"]),
    (dict(D3, timeout=True), TypeError, ["timeout", "bool"]),
    (dict(D3, timeout="5"), TypeError, ["timeout", "str"]),
    (dict(D3, lock_dir="relative/dir"), ValueError, ["lock_dir='relative/dir'"]),
    (dict(D3, lock_dir=""), ValueError, ["lock_dir=''"]),
    (dict(D3, lock_dir=b"/tmp/x"), TypeError, ["lock_dir", "bytes"]),
    (dict(D3, lock_dir=5), TypeError, ["lock_dir", "int"]),
    (dict(D3, quiet="yes"), TypeError, ["quiet", "'yes'"]),
    (dict(D3, quiet=1), TypeError, ["quiet", "int"]),
]
BAD_INHERITED = [
    # (variables of the base environment, fragments)
    ({"GPUMUTEX_VISIBLE_DEVICES": "0,x"}, ["GPUMUTEX_VISIBLE_DEVICES", "'0,x'"]),
    # Empty is "not configured" (as for the library): no devices to queue.
    ({"GPUMUTEX_VISIBLE_DEVICES": ""},
     ["visible_devices is required", "GPUMUTEX_VISIBLE_DEVICES is set but empty"]),
    ({"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_NUM_DEVICES": "2"},
     ["GPUMUTEX_NUM_DEVICES", "'2'"]),
    ({"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_LOCK_DIR": "rel"},
     ["GPUMUTEX_LOCK_DIR", "'rel'"]),
    ({"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_TIMEOUT": "-1"},
     ["GPUMUTEX_TIMEOUT", "'-1'"]),
    ({"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_QUIET": "false"},
     ["GPUMUTEX_QUIET", "'false'", "expected 1"]),
    ({"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_RECHECK_MS": "soon"},
     ["GPUMUTEX_RECHECK_MS", "'soon'"]),
    ({"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_LIBRARY": "/nonexistent.so"},
     ["GPUMUTEX_LIBRARY", "'/nonexistent.so'"]),
]


def entry_points(marker):
    """Each public way to run something, set to create `marker` if it runs."""
    argv = [PYTHON, "-c", f"open({str(marker)!r}, 'w').close()"]
    return {
        "run": lambda **kw: gpumutex.run(argv, **kw),
        "Popen": lambda **kw: gpumutex.Popen(argv, **kw).wait(),
        "system": lambda **kw: gpumutex.system(
            f"touch '{marker}'", **kw),
        "environ": lambda **kw: gpumutex.environ(**kw),
    }


@pytest.mark.parametrize("kwargs,exc,fragments", BAD,
                         ids=[repr(b[0]) for b in BAD])
def test_invalid_argument_raises_before_running(native, clean_env, tmp_path,
                                                kwargs, exc, fragments):
    marker = tmp_path / "ran"
    for name, call in entry_points(marker).items():
        with pytest.raises(exc) as info:
            call(env=clean_env, **kwargs)
        for fragment in fragments:
            assert fragment in str(info.value), (name, str(info.value))
        assert not marker.exists(), f"{name} ran the command"


@pytest.mark.parametrize("variables,fragments", BAD_INHERITED,
                         ids=[repr(b[0]) for b in BAD_INHERITED])
def test_invalid_inherited_variable_raises(native, clean_env, tmp_path,
                                           variables, fragments):
    marker = tmp_path / "ran"
    for name, call in entry_points(marker).items():
        with pytest.raises(ValueError) as info:
            call(env=dict(clean_env, **variables))
        for fragment in fragments:
            assert fragment in str(info.value), (name, str(info.value))
        assert not marker.exists(), f"{name} ran the command"


def test_checks_agree_with_gpumutex_run(native, clean_env, tmp_path):
    """Text values: the Python checks accept exactly what gpumutex-run (the
    C core's parsers) accepts, so a value that passes here never fails in
    the child's cuInit. (gpumutex-run also checks the lock directory
    itself, which Python does not: every directory here is usable.)"""
    run_bin = os.path.join(BUILD, "gpumutex-run")
    clean_env = dict(clean_env, GPUMUTEX_LOCK_DIR=str(tmp_path / "locks"))

    def c_accepts(variables):
        r = subprocess.run([run_bin, "--", "true"], capture_output=True,
                           env=dict(clean_env, **variables))
        assert r.returncode in (0, 2), r
        return r.returncode == 0

    def py_accepts(variables):
        try:
            gpumutex.environ(env=dict(clean_env, **variables))
            return True
        except ValueError:
            return False

    devices = ["0", "0,1,63", "007", "0000", "00000", "64", "0,", ",0", "",
               "1,1", "+1", " 1", "1 ", "0x1", "١"]
    nums = ["1", "2", "3", "0", "-1", "+1", " 1", "\t1", "\n1", "1\n", "1.0", "", "01",
            "99999999999999999999"]
    timeouts = ["0", "30", "0.5", ".5", "5.", ".", "1.2.3", "-1", "1e3",
                "inf", "nan", " 1", "1000000000", "1000000001", "",
                "0." + "1" * 18, "0." + "1" * 19, "1000000000.000",
                "1000000000." + "0" * 17 + "1", "0000000000001",
                "99999999999", "0.000000000000000000"]
    lockdirs = [str(tmp_path / "x"), str(tmp_path) + "//y/", "tmp", "",
                "./x", "/" + "x" * 4031]
    rechecks = ["0", "10000", "86400000", "86400001", "", "-1", "+1", " 1",
                "1 ", "1.5", "soon", "0x10"]
    quiets = ["0", "1", "", "false", "no", "off", "yes", "2", "00", " 1"]
    cases = ([{"GPUMUTEX_VISIBLE_DEVICES": d} for d in devices]
             + [{"GPUMUTEX_VISIBLE_DEVICES": "0,1", "GPUMUTEX_NUM_DEVICES": n}
                for n in nums]
             + [{"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_TIMEOUT": t}
                for t in timeouts]
             + [{"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_LOCK_DIR": d}
                for d in lockdirs]
             + [{"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_QUIET": q}
                for q in quiets]
             + [{"GPUMUTEX_VISIBLE_DEVICES": "0", "GPUMUTEX_RECHECK_MS": r}
                for r in rechecks])
    for variables in cases:
        assert py_accepts(variables) == c_accepts(variables), variables


@pytest.mark.parametrize("value", ["1e3", "inf", "1000000001", "-1", "nan",
                                   "1000000000.5"])
def test_timeout_messages_state_the_range(native, clean_env, tmp_path, value):
    """A refused timeout says which values are accepted, whichever way it
    came: gpumutex-run's --timeout, GPUMUTEX_TIMEOUT for gpumutex-run, the
    Python functions' timeout= and a GPUMUTEX_TIMEOUT they inherit."""
    expected = "expected seconds from 0 to 1000000000"
    run_bin = os.path.join(BUILD, "gpumutex-run")
    env = dict(clean_env, GPUMUTEX_LOCK_DIR=str(tmp_path / "locks"),
               GPUMUTEX_VISIBLE_DEVICES="0")
    for args, extra, name in (
            (["--timeout", value], {}, "--timeout"),
            ([f"--timeout={value}"], {}, "--timeout"),
            ([], {"GPUMUTEX_TIMEOUT": value}, "GPUMUTEX_TIMEOUT")):
        r = subprocess.run([run_bin, *args, "--", "true"], capture_output=True,
                           text=True, env=dict(env, **extra))
        assert r.returncode == 2, r
        assert f'{name}="{value}"' in r.stderr and expected in r.stderr, (
            r.stderr)
    with pytest.raises(ValueError) as info:
        gpumutex.environ(env=dict(env, GPUMUTEX_TIMEOUT=value))
    assert f"GPUMUTEX_TIMEOUT='{value}'" in str(info.value)
    assert expected in str(info.value)
    if value != "1e3":  # 1e3 is a fine float: 1000 seconds
        with pytest.raises(ValueError) as info:
            gpumutex.environ(env=env, timeout=float(value))
        assert str(info.value).startswith("timeout=")
        assert expected in str(info.value), str(info.value)
    else:
        assert gpumutex.environ(env=env, timeout=float(value))[
            "GPUMUTEX_TIMEOUT"] == "1000.0"


# ---- system() ------------------------------------------------------------------

@pytest.mark.parametrize("command", ["exit 0", "exit 3", "exit 255",
                                     "kill -KILL $$", "kill -TERM $$"])
def test_system_status_matches_os_system(native, command):
    expected = os.system(command)
    assert gpumutex.system(command, visible_devices="0") == expected
    if command == "exit 3":
        assert expected == 768
    if command == "kill -KILL $$":
        assert expected == signal.SIGKILL


def test_system_runs_under_gpumutex(native, clean_env, tmp_path):
    lib = os.path.realpath(LIBRARY)
    check = ('test "$GPUMUTEX_VISIBLE_DEVICES" = 1,2 && '
             'test "$GPUMUTEX_NUM_DEVICES" = 2 && '
             f'test "$LD_PRELOAD" = "{lib}" && '
             'test "$(pwd)" = "$WANT_CWD"')
    assert gpumutex.system(check, visible_devices=[1, 2], num_devices=2,
                           cwd=tmp_path, env=dict(clean_env,
                                                  WANT_CWD=str(tmp_path))) == 0
    assert gpumutex.system(check, visible_devices=[1, 3], num_devices=2,
                           cwd=tmp_path, env=clean_env) == 256
    with pytest.raises(TypeError):
        gpumutex.system("true", visible_devices="0", shell=True)


# ---- run() and Popen(): subprocess pass-through --------------------------------

def test_run_passes_subprocess_kwargs(native, clean_env, tmp_path):
    r = gpumutex.run([PYTHON, "-c", "import os, sys; print(os.getcwd()); "
                      "print(sys.stdin.read().upper())"],
                     visible_devices="0", cwd=tmp_path, input="hello",
                     capture_output=True, text=True)
    assert isinstance(r, subprocess.CompletedProcess)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.split() == [str(tmp_path), "HELLO"]

    with pytest.raises(subprocess.CalledProcessError) as info:
        gpumutex.run([PYTHON, "-c", "import sys; sys.exit(3)"],
                     visible_devices="0", check=True)
    assert info.value.returncode == 3
    r = gpumutex.run([PYTHON, "-c", "import sys; sys.exit(3)"],
                     visible_devices="0")
    assert r.returncode == 3

    # env= is the base: the caller's other variables are not added.
    env = child_env(visible_devices="0", env={"ONLY_IN_BASE": "1"})
    assert env["ONLY_IN_BASE"] == "1" and "PATH" not in env

    # subprocess.run's own timeout, under another name.
    with pytest.raises(subprocess.TimeoutExpired):
        gpumutex.run([PYTHON, "-c", "import time; time.sleep(30)"],
                     visible_devices="0", subprocess_timeout=0.5)


def test_popen(native, clean_env):
    p = gpumutex.Popen(PRINT_ENV, visible_devices=[5], quiet=True,
                       stdout=subprocess.PIPE, text=True, env=clean_env)
    assert isinstance(p, subprocess.Popen)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0
    env = json.loads(out)
    assert env["GPUMUTEX_VISIBLE_DEVICES"] == "5"
    assert env["GPUMUTEX_QUIET"] == "1"
