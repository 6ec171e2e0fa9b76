"""The wheel (manylinux 2.17) on other Debian releases: installed with pip
into a fresh venv in the bullseye root (glibc 2.31) and the trixie root
(glibc 2.41) (tools/mkroot.sh; shared with tests/test_system.py), its
gpumutex-run makes a contended pair of jobs take turns on the fake driver
(tests/system/wheel.sh). Needs root, mount namespaces and overlayfs, and
Debian's package mirror the first time."""
import os
import subprocess

import pytest

from conftest import REPO
from test_packaging import backend
from test_system import SUITES, ci_packages, why_not


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return backend("build_wheel", tmp_path_factory.mktemp("wheel"))


@pytest.mark.parametrize("suite", list(SUITES))
def test_wheel_runs_a_contended_pair_in_a_fresh_venv(suite, wheel):
    reason = why_not()
    if reason:
        pytest.skip(reason)
    pkgs = SUITES[suite] or ci_packages()
    r = subprocess.run(["bash", "tools/mkroot.sh", suite, *pkgs], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, f"cannot make the {suite} root: {r.stderr}"
    root = os.path.join(REPO, r.stdout.strip())
    r = subprocess.run(["bash", "tests/system/wheel.sh", root, wheel],
                       cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "wheel: ok" in r.stdout, r.stdout + r.stderr
