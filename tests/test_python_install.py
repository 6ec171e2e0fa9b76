"""The Python package installed: `pip install` into a venv, the README's
two ways (slow: one install each), and what the installed package, its
programs and its children use (the packaged library, not the
repository's). Shared with test_python.py: tests/pythonlib.py."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO
from pythonlib import caller_environ_unchanged, clean_env, native  # noqa: F401 (fixtures)


# ---- pip install into a venv (slow: one install per session) --------------------

# The README's two ways: a plain venv and `pip install .` (build isolation:
# the in-tree backend needs nothing from an index), and a venv that sees
# the system's packages with --no-build-isolation. --no-index proves that
# neither needs a package index, setuptools or wheel.
@pytest.mark.parametrize("venv_args,pip_args", [
    ([], []),
    (["--system-site-packages"], ["--no-build-isolation"]),
], ids=["isolated", "no-build-isolation"])
def test_pip_install_into_venv(native, tmp_path_factory, clean_env,
                               venv_args, pip_args):
    venv = str(tmp_path_factory.mktemp("venv") / "v")
    env = {k: v for k, v in clean_env.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHONPATH")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    subprocess.run(["/usr/bin/python3", "-m", "venv", *venv_args, venv],
                   check=True, env=env, timeout=300)
    r = subprocess.run([os.path.join(venv, "bin", "pip"), "install",
                        *pip_args, "--no-index", REPO],
                       env=env, capture_output=True, text=True, cwd=venv,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    vpython = os.path.join(venv, "bin", "python")
    real_venv = os.path.realpath(venv)

    # The packaged library and programs, not the repository's.
    r = subprocess.run([vpython, "-c", "import gpumutex; "
                        "print(gpumutex.library_path()); "
                        "print(gpumutex.__version__)"],
                       env=env, cwd=venv, capture_output=True, text=True,
                       check=True)
    lib, version = r.stdout.split()
    assert lib.startswith(real_venv + os.sep) and lib.endswith(
        "/gpumutex/_bin/libgpumutex.so")
    assert version == "0.1.0"
    for prog in ("gpumutex", "gpumutex-run"):
        r = subprocess.run([os.path.join(venv, "bin", prog), "--version"],
                           env=env, capture_output=True, text=True, check=True)
        assert r.stdout.split() == [prog, "0.1.0"]
        assert os.access(os.path.join(os.path.dirname(lib), prog), os.X_OK)
    # Children of the installed package and of its gpumutex-run preload the
    # installed library.
    r = subprocess.run([vpython, "-c", "import gpumutex, sys; sys.exit("
                        "gpumutex.system('test \"$LD_PRELOAD\" = ' + "
                        "gpumutex.library_path(), visible_devices='0') >> 8)"],
                       env=env, cwd=venv)
    assert r.returncode == 0
    r = subprocess.run([os.path.join(venv, "bin", "gpumutex-run"),
                        "--visible-devices", "0", "--lock-dir",
                        str(tmp_path_factory.mktemp("runlocks") / "l"), "--",
                        "sh", "-c", "echo $LD_PRELOAD"], env=env,
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == lib
    r = subprocess.run([vpython, "-m", "gpumutex", "status", "--json",
                        "--lock-dir", str(tmp_path_factory.mktemp("locks"))],
                       env=env, cwd=venv, capture_output=True, text=True,
                       check=True)
    assert json.loads(r.stdout)["schema"] == "gpumutex.status/2"

    # The build left nothing in the source tree (only under build/).
    for d in (REPO, os.path.join(REPO, "python")):
        assert not [n for n in os.listdir(d) if n.endswith(".egg-info")], d
    assert not os.path.exists(os.path.join(REPO, "python", "build"))
    assert not os.path.exists(os.path.join(REPO, "python", "gpumutex", "_bin"))
    shutil.rmtree(venv, ignore_errors=True)
