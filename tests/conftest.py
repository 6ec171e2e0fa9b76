"""Shared fixtures: the build, a private lock directory per test, and a
way to start test jobs."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))


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
