"""The Python package's command and real jobs: `python -m gpumutex` is the
CLI, `status` sees a job started by gpumutex.Popen, and jobs in threads
take turns on the fake driver's GPUs through libgpumutex.so (checked on
the fake driver's journal, with a check that would catch overlapping
jobs). Shared with test_python.py: tests/pythonlib.py."""

import json
import signal
import subprocess
import threading

import pytest

import journal as journal_lib
from pythonlib import (CUDA_JOB, FAKECUDA, HOLD_S, PY_ENV, PYTHON, gpumutex,
                       py_m)
from pythonlib import caller_environ_unchanged, clean_env, native  # noqa: F401 (fixtures)


# ---- python -m gpumutex -----------------------------------------------------------

def test_python_m_gpumutex_is_the_cli(native, clean_env, lockdir):
    r = py_m("--version")
    assert r.returncode == 0 and r.stdout.split() == ["gpumutex", "0.1.0"]
    r = py_m("frobnicate")
    assert r.returncode == 2 and "frobnicate" in r.stderr

    r = py_m("status", "--json", "--lock-dir", lockdir)
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["schema"] == "gpumutex.status/2" and doc["exists"] is False

    r = py_m("init", "--lock-dir", lockdir, "--visible-devices", "0,1")
    assert r.returncode == 0, r.stderr
    doc = json.loads(py_m("status", "--json", "--lock-dir", lockdir).stdout)
    assert doc["exists"] is True
    assert [(d["index"], d["state"]) for d in doc["devices"]] == [
        (0, "free"), (1, "free")]

    # `run` execs: the command has python's pid, its status is python's.
    p = subprocess.Popen([PYTHON, "-m", "gpumutex", "run", "--visible-devices",
                          "0", "--lock-dir", lockdir, "--", "sh", "-c",
                          'echo $$; kill -TERM $$'],
                         env=dict(clean_env, **PY_ENV), stdout=subprocess.PIPE,
                         text=True)
    out, _ = p.communicate(timeout=60)
    assert int(out) == p.pid
    assert p.returncode == -signal.SIGTERM
    r = py_m("run", "--visible-devices", "0", "--lock-dir", lockdir, "--",
             "sh", "-c", "exit 7", env=clean_env)
    assert r.returncode == 7


def test_status_sees_a_python_job(native, clean_env, lockdir):
    """A job started by gpumutex.Popen holds a fake GPU; `python -m gpumutex
    status --json` shows its lease under its job id and pid."""
    env = dict(clean_env, LD_LIBRARY_PATH=FAKECUDA, FAKECUDA_NUM_DEVICES="2")
    p = gpumutex.Popen([PYTHON, "-c", CUDA_JOB, "hold"], visible_devices="0,1",
                       lock_dir=lockdir, stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True, env=env)
    try:
        job, cvd = p.stdout.readline().split()
        doc = json.loads(py_m("status", "--json", "--lock-dir",
                              lockdir).stdout)
        assert [(lease["job"], lease["pids"], lease["devices"])
                for lease in doc["leases"]] == [(job, [p.pid], [int(cvd)])]
    finally:
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    doc = json.loads(py_m("status", "--json", "--lock-dir", lockdir).stdout)
    assert doc["leases"] == []


# ---- Contention through the real library and the fake driver -------------------

def test_threads_take_turns_on_fake_gpus(native, clean_env, lockdir, journal):
    njobs = 6
    env = dict(clean_env, LD_LIBRARY_PATH=FAKECUDA, FAKECUDA_NUM_DEVICES="2",
               FAKECUDA_JOURNAL=journal, HOLD_S=str(HOLD_S),
               GPUMUTEX_RECHECK_MS="0")  # a lost wake-up must hang, not hide
    results = [None] * njobs

    def one(i):
        results[i] = gpumutex.run([PYTHON, "-c", CUDA_JOB],
                                  visible_devices=[0, 1], lock_dir=lockdir,
                                  quiet=True, env=env, capture_output=True,
                                  text=True, subprocess_timeout=120)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(njobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""                 # quiet=True: no waiting line
    printed = [r.stdout.split() for r in results]
    assert len({job for job, _ in printed}) == njobs
    assert {cvd for _, cvd in printed} == {"0", "1"}

    events = journal_lib.parse(journal)
    spans = journal_lib.check_exclusive(events)
    assert set(spans) == {0, 1}                # both fake GPUs were used
    owners = {owner for ss in spans.values() for _, _, owner, _ in ss}
    assert owners == {job for job, _ in printed}
    for job, _ in printed:
        kinds = [e["ev"] for e in events if e["job"] == job]
        assert kinds[:2] == ["init", "begin"] and kinds[-1] == "end"


def test_contention_check_has_teeth(native, clean_env, tmp_path):
    """The same jobs without gpumutex overlap, and check_exclusive says so:
    the test above would catch a library that let jobs through."""
    journal = str(tmp_path / "journal")
    procs = [subprocess.Popen([PYTHON, "-c", CUDA_JOB], stdout=subprocess.PIPE,
                              env=dict(clean_env, LD_LIBRARY_PATH=FAKECUDA,
                                       FAKECUDA_JOURNAL=journal,
                                       HOLD_S=str(HOLD_S), GPUMUTEX_JOB=f"j{i}",
                                       CUDA_VISIBLE_DEVICES="0"))
             for i in range(3)]
    for p in procs:
        p.communicate(timeout=60)
        assert p.returncode == 0
    with pytest.raises(AssertionError, match="two jobs held one device"):
        journal_lib.check_exclusive(journal_lib.parse(journal))
