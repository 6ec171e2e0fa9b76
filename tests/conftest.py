"""Shared fixtures: the build, a private lock directory per test, and a
way to start test jobs."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")


def wrapped_names():
    """The driver functions the library exports a wrapper for: every name
    of src/preload/driver-names.txt but the pure queries and the hand-made
    hooks of driver-policy.txt."""
    src = os.path.join(REPO, "src", "preload")
    with open(os.path.join(src, "driver-names.txt")) as f:
        names = {l.strip() for l in f if l.strip()}
    with open(os.path.join(src, "driver-policy.txt")) as f:
        for line in f:
            w = line.split("#")[0].split()
            if len(w) >= 2 and w[1] in ("query", "own"):
                names.discard(w[0])
    return names


sys.path.insert(0, os.path.join(REPO, "tests", "lib"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "stress: slow test, run by `make stress` (pytest -m stress)")


def pytest_collection_modifyitems(config, items):
    """Stress tests run only when asked for (-m stress): `make check` stays
    quick, `make stress` runs them."""
    if "stress" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="stress test: run by `make stress`")
    for item in items:
        if "stress" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    import jobs
    closed = jobs.unreachable_dir()
    if closed is None:
        return "other-user tests: run the programs in build/ directly"
    return (f"other-user tests: {closed} is closed to other users (no o+x), "
            f"so they run copies of the programs in build/ from a "
            f"world-readable directory under /tmp")


@pytest.fixture(scope="session")
def built():
    """Build the core and its test programs once per session."""
    subprocess.run(["make", "-C", REPO, "-s", "all", "sanitizer-tests"],
                   check=True)
    return BUILD


@pytest.fixture
def lockdir(tmp_path):
    d = tmp_path / "locks"
    return str(d)


@pytest.fixture
def journal(tmp_path):
    return str(tmp_path / "journal")


def fake_driver_env(tmp_path, **overrides):
    """A clean environment for running programs on the fake driver under
    the preload tests: fake libcuda.so.1 on the library path, a private
    journal and lock directory, GPUs 0,1 of 4 managed, and a timeout so
    that a bug fails instead of hanging. LD_PRELOAD is left to the test."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("GPUMUTEX_", "CUDA_", "FAKECUDA_", "LD_"))}
    e.update(LD_LIBRARY_PATH=os.path.join(BUILD, "tests", "fakecuda"),
             FAKECUDA_JOURNAL=str(tmp_path / "journal"),
             FAKECUDA_NUM_DEVICES="4",
             GPUMUTEX_LOCK_DIR=str(tmp_path / "lock"),
             GPUMUTEX_VISIBLE_DEVICES="0,1",
             GPUMUTEX_TIMEOUT="30")
    e.update(overrides)
    return e


def readme_build_line():
    """The one-line build the README gives under "Install" (without make),
    exactly as written there."""
    import re
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    install = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    lines = re.findall(r"^`(cc -shared [^`]*)`$", install, re.M)
    assert len(lines) == 1, f"README's Install section has {len(lines)} cc lines"
    return lines[0]


def _shared_dir(prefix):
    """A directory like /tmp that every user can use (pytest's tmp_path is
    private), with a journal file every user can append to."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(d, 0o1777)
    j = os.path.join(d, "journal")
    open(j, "w").close()
    os.chmod(j, 0o666)
    return d, lambda: shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def shared_tmp():
    d, done = _shared_dir("gm-users-")
    yield d
    done()


@pytest.fixture
def shared():
    """The same as shared_tmp (the name the newer tests use)."""
    d, done = _shared_dir("gm-shared-")
    yield d
    done()
