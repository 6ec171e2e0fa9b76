"""gpu-offload under gpumutex (docs/offload.md, "Under gpumutex"): the
GPU only under a lease taken without waiting, never ahead of a waiter, and
given back to a job that waits; alone and together with libgpumutex.so.

The offloading program is the policy driver (policy-driver.c: the real
policy behind a stand-in frontend whose GPU is the fake driver, so that
the journal shows who used which GPU); the other jobs are lease-holders.
Synchronisation is by the driver's answers and the jobs' pipes, never by
sleeping."""

import os
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import jobs  # noqa: E402
import journal as jl  # noqa: E402
from conftest import BUILD, REPO  # noqa: E402
from policylib import (BIG, GUARD, HOLDER, Driver, env,  # noqa: E402
                       journal_of, status_json)


@pytest.fixture(scope="module", autouse=True)
def build():
    subprocess.run(["make", "-C", REPO, "-s", "all", "fakecuda"], check=True)


def report(d):
    r = subprocess.run([os.path.join(BUILD, "gpu-offload"), "report", str(d)],
                       capture_output=True, text=True, timeout=GUARD)
    assert r.returncode == 0, r.stderr
    return r.stdout


def begins(ev, pid):
    return [e for e in ev if e["ev"] == "begin" and e["pid"] == str(pid)]


def holder_env(e, devices="0", want=None, timeout=None):
    h = jobs.job_env(e["GPUMUTEX_LOCK_DIR"], e["GM_JOURNAL"], devices=devices,
                     want=want, timeout=timeout)
    return h


def test_a_free_gpu_is_leased_without_waiting(tmp_path):
    e = env(tmp_path)
    d = Driver(e)
    r = d.call(20)
    assert r["starts"] == 1 and r["gpu"] > 0, r
    # It holds its lease like any job: `gpumutex status` shows it.
    st = status_json(e)
    leases = [l for l in st["leases"] if d.pid in l["pids"]]
    assert len(leases) == 1 and leases[0]["devices"] == [0], st
    rc, err = d.finish()
    assert rc == 0 and err == "", err
    ev = journal_of(e)
    b = begins(ev, d.pid)
    assert len(b) == 1 and b[0]["dev"] == "0"
    # The fake driver saw the leased GPU only, in PCI order.
    init = [x for x in ev if x["ev"] == "init" and x["pid"] == str(d.pid)]
    assert init[0]["cvd"] == "0" and init[0]["order"] == "PCI_BUS_ID"


def test_a_holder_keeps_the_offloader_on_the_cpu(tmp_path):
    e = env(tmp_path, GPU_OFFLOAD_RETRY_MS="3600000",
            GPU_OFFLOAD_TRACE=str(tmp_path / "trace"))
    h = jobs.start(HOLDER, holder_env(e), ready=True, hold=True)
    assert h.ready()
    d = Driver(e)
    # It answers (it did not wait in the queue), and nothing ran on the GPU.
    r = d.call(30)
    assert r["gpu"] == 0 and r["starts"] == 0, r
    assert r["reasons"].get("no-lease", 0) >= 1, r
    # Giving up left no ticket in the queue that would delay others.
    st = status_json(e)
    assert st["queue"] == [] and len(st["leases"]) == 1, st
    assert os.listdir(os.path.join(e["GPUMUTEX_LOCK_DIR"], "queue")) == ["seq"]
    # Refused once, then not asked again on every call: the back-off.
    h.wait()
    r = d.call(30)
    assert r["gpu"] == 0 and r["starts"] == 0, r
    rc, err = d.finish()
    assert rc == 0
    assert begins(journal_of(e), d.pid) == []
    assert "1 leases refused" in report(tmp_path / "trace")


def test_the_offloader_never_jumps_the_queue(tmp_path):
    """GPU 1 is free, but an older claim waits for GPUs 0 and 1: a lease
    without waiting for GPU 1 would get in ahead of it, so it is refused."""
    e = env(tmp_path, devices="1")
    x = jobs.start(HOLDER, holder_env(e, devices="0"), ready=True, hold=True)
    assert x.ready()
    w = jobs.start(HOLDER, holder_env(e, devices="0,1", want=2),
                   waiting=True, ready=True, hold=True)
    assert w.waited()
    d = Driver(e)
    r = d.call(30)
    assert r["gpu"] == 0 and r["starts"] == 0, r
    assert "no-lease" in r["reasons"], r
    x.wait()
    assert w.ready()
    w.wait()
    d.finish()
    ev = journal_of(e)
    assert begins(ev, d.pid) == []
    jl.check_exclusive(ev)


def test_a_waiting_job_gets_the_gpu_back_while_the_program_offloads(tmp_path):
    e = env(tmp_path, GPU_OFFLOAD_WATCH_MS="10", GPU_OFFLOAD_YIELD_MS="20")
    d = Driver(e)
    assert d.call(20)["starts"] == 1
    w = jobs.start(HOLDER, holder_env(e), waiting=True, ready=True, hold=True)
    assert w.waited()
    # The program keeps calling: once the waiter is seen, calls stay on the
    # CPU and the GPU is given back (the driver's loop ends when the policy
    # stops the GPU).
    r = d.send("until-stop " + BIG)
    assert r["stops"] == 1 and r["reasons"].get("no-lease", 0) >= 1, r
    assert w.ready()
    # While the waiter holds the GPU, the offloader stays on the CPU.
    r = d.call(30)
    assert r["gpu"] == 0 and r["starts"] == 0, r
    w.wait()
    d.finish()
    ev = journal_of(e)
    jl.check_exclusive(ev)
    mine = [x for x in ev if x["pid"] == str(d.pid) and x["ev"] == "end"]
    theirs = [x for x in ev if x["pid"] == str(w.pid) and x["ev"] == "begin"]
    assert mine and theirs and mine[0].t < theirs[0].t


def test_a_waiting_job_gets_the_gpu_back_from_an_idle_program(tmp_path):
    """The program stops calling BLAS at all (the driver waits for its next
    command): the lease is given back all the same."""
    e = env(tmp_path, GPU_OFFLOAD_WATCH_MS="10", GPU_OFFLOAD_YIELD_MS="20")
    d = Driver(e)
    assert d.call(20)["starts"] == 1
    w = jobs.start(HOLDER, holder_env(e), ready=True, hold=True)
    assert w.ready()
    w.wait()
    d.finish()
    jl.check_exclusive(journal_of(e))


def test_a_forked_child_does_not_keep_the_lease(tmp_path):
    """A child forked after the GPU started shares the lease's descriptors;
    it closes its copies, so the parent's give-back frees the GPU."""
    e = env(tmp_path, GPU_OFFLOAD_WATCH_MS="10", GPU_OFFLOAD_YIELD_MS="20")
    d = Driver(e)
    assert d.call(20)["starts"] == 1
    child = d.send("fork-hold")
    pid = child["child"]
    try:
        w = jobs.start(HOLDER, holder_env(e, timeout=60), ready=True,
                       hold=True)
        assert w.ready(), "the child kept the lease"
        w.wait()
    finally:
        os.kill(pid, signal.SIGKILL)
    d.finish()


def test_with_libgpumutex_the_backend_joins_its_own_lease(tmp_path):
    """Both preloaded: the backend's cuInit reaches libgpumutex, which must
    join the offloader's lease (same job) instead of queueing behind it.
    GPUMUTEX_TIMEOUT=0 makes a second claim fail at once instead of
    hanging."""
    e = env(tmp_path, GPUMUTEX_TIMEOUT="0")
    d = Driver(e, preload=os.path.join(BUILD, "libgpumutex.so"))
    r = d.call(20)
    assert r["starts"] == 1 and r["gpu"] > 0, r
    st = status_json(e)
    assert len(st["leases"]) == 1 and st["queue"] == [], st
    job = st["leases"][0]["job"]
    rc, err = d.finish()
    assert rc == 0 and "gpumutex:" not in err, err
    ev = journal_of(e)
    b = begins(ev, d.pid)
    assert len(b) == 1 and b[0]["job"] == job and b[0]["dev"] == "0"


def test_with_libgpumutex_the_lease_lasts_for_the_process(tmp_path):
    """Documented: libgpumutex's join holds the lease until exit, so the
    offloader does not starve its own GPU calls for nothing; the waiter is
    served when the program exits."""
    e = env(tmp_path, GPU_OFFLOAD_WATCH_MS="10", GPU_OFFLOAD_YIELD_MS="0",
            GPU_OFFLOAD_TRACE=str(tmp_path / "t"))
    d = Driver(e, preload=os.path.join(BUILD, "libgpumutex.so"))
    assert d.call(20)["starts"] == 1
    w = jobs.start(HOLDER, holder_env(e), waiting=True, ready=True, hold=True)
    assert w.waited()
    r = d.call(40)
    assert r["cpu"] == r["reasons"].get("probe", 0), r
    d.finish()
    assert "given back 0 times, kept for the process 1 times" in report(
        tmp_path / "t")
    assert w.ready()
    w.wait()
    jl.check_exclusive(journal_of(e))


def test_inside_a_job_that_holds_the_gpu_it_joins_and_keeps_it(tmp_path):
    """Under gpumutex-run (GPUMUTEX_JOB set) whose job already holds the GPU
    through another process: the offloader joins that lease at once, and a
    waiter does not make it give back a lease that would outlive it."""
    e = env(tmp_path, GPUMUTEX_JOB="myjob", GPU_OFFLOAD_WATCH_MS="10",
            GPU_OFFLOAD_YIELD_MS="0", GPU_OFFLOAD_TRACE=str(tmp_path / "t"))
    m = jobs.start(HOLDER, holder_env(e) | {"GPUMUTEX_JOB": "myjob"},
                   ready=True, hold=True)
    assert m.ready()
    d = Driver(e)
    assert d.call(20)["starts"] == 1
    w = jobs.start(HOLDER, holder_env(e), waiting=True, ready=True, hold=True)
    assert w.waited()
    r = d.call(40)
    assert "no-lease" not in r["reasons"] and r["stops"] == 0, r
    d.finish()
    assert "given back 0 times, kept for the process 1 times" in report(
        tmp_path / "t")
    m.wait()
    assert w.ready()
    w.wait()
    # (one lease, journaled under its id by lease-holder and under the job
    # by the fake driver: compare the waiter with each)
    ev = journal_of(e)
    w_begin = min(x.t for x in ev if x["pid"] == str(w.pid)
                  and x["ev"] == "begin")
    assert all(x.t < w_begin for x in ev if x["ev"] in ("begin", "tick", "end")
               and x["pid"] in (str(d.pid), str(m.pid)))


def test_a_configuration_file_governs_it_as_it_does_libgpumutex(tmp_path):
    """GPUMUTEX_CONFIG (docs/deploy.md) instead of the variables: the
    offloader resolves its settings as libgpumutex does, so it is under the
    same queue."""
    e = env(tmp_path, devices=None)
    conf = tmp_path / "gpumutex.conf"
    conf.write_text(f"visible_devices = 1\nlock_dir = {e['GPUMUTEX_LOCK_DIR']}\n")
    os.chmod(conf, 0o644)
    e["GPUMUTEX_CONFIG"] = str(conf)
    e.pop("GPUMUTEX_LOCK_DIR")
    d = Driver(e)
    assert d.call(20)["starts"] == 1
    st = status_json(dict(e, GPUMUTEX_LOCK_DIR=str(tmp_path / "lock")))
    assert [l["devices"] for l in st["leases"]] == [[1]], st
    d.finish()


def test_not_configured_uses_the_gpu_without_a_lease(tmp_path):
    e = env(tmp_path, devices=None)
    d = Driver(e)
    assert d.call(20)["starts"] == 1
    d.finish()
    assert not os.path.exists(e["GPUMUTEX_LOCK_DIR"])


def test_a_bad_configuration_keeps_the_gpu_off(tmp_path):
    e = env(tmp_path, devices="0,x")
    d = Driver(e)
    r = d.call(20)
    assert r["gpu"] == 0 and r["starts"] == 0, r
    rc, err = d.finish()
    lines = [l for l in err.splitlines() if l]
    assert len(lines) == 1 and lines[0].startswith(
        "gpu-offload: cannot take a gpumutex lease"), err


@pytest.mark.parametrize("cvd", ["", "-1"])
def test_an_inherited_cuda_visible_devices_hiding_all_keeps_it_off(tmp_path,
                                                                   cvd):
    e = env(tmp_path, CUDA_VISIBLE_DEVICES=cvd)
    d = Driver(e)
    r = d.call(20)
    rc, err = d.finish()
    assert r["gpu"] == 0 and r["starts"] == 0, r
    assert err.count("gpu-offload:") == 1 and "hides every GPU" in err, err
    assert begins(journal_of(e), d.pid) == []


def test_an_inherited_cuda_visible_devices_narrows_the_claim(tmp_path):
    e = env(tmp_path, devices="0,1", CUDA_VISIBLE_DEVICES="1")
    d = Driver(e)
    assert d.call(20)["starts"] == 1
    d.finish()
    b = begins(journal_of(e), d.pid)
    assert len(b) == 1 and b[0]["dev"] == "1", b


def test_a_missing_backend_gives_the_lease_back(tmp_path):
    e = env(tmp_path, POLICY_DRIVER_BACKEND="none")
    d = Driver(e)
    r = d.call(20)
    assert r["gpu"] == 0 and r["reasons"].get("no-backend", 0) >= 1, r
    assert status_json(e)["leases"] == []
    rc, err = d.finish()
    assert err.count("gpu-offload:") == 1, err
