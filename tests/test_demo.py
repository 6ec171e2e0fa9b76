"""`make demo` keeps working: the demo runs on the fake driver, exits 0,
and its own journal check passed (it says so only after checking)."""

import os
import subprocess

from conftest import REPO


def test_demo_runs(built):
    subprocess.run(["make", "-C", REPO, "-s", "fakecuda", "build/demo/fakejob"],
                   check=True)
    env = {k: v for k, v in os.environ.items() if k != "GPUMUTEX_VISIBLE_DEVICES"}
    env["PATH"] = "/usr/bin:/bin"  # no nvidia-smi: the fake-driver demo
    r = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "demo", "demo.py")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No two jobs ever used one GPU" in r.stdout
    assert r.stdout.count("cuInit returned") == 6
    assert r.stdout.count("gpumutex granted GPU") == 6
    assert r.stdout.count("first GPU work on GPU") >= 6
    assert "waits for" in r.stderr  # the library's one-line waiting message
    # It ends with the report of its own run, and says where the picture is.
    assert "The report of this run" in r.stdout
    assert "Waits: " in r.stdout and "HAND-OFFS" in r.stdout
    svg = os.path.join(REPO, "build", "demo", "report.svg")
    assert f"Picture of this run: {svg}" in r.stdout
    assert 'id="timeline"' in open(svg).read()
