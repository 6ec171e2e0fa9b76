"""Live utilisation through NVML (src/cli/nvml.c), with the fake
libnvidia-ml.so.1 (tests/fakenvml): absent, present, erroring, crashing;
`gpumutex status` still works and says what it could not read."""

import json
import os
import subprocess

import jobs
from conftest import BUILD

GPUMUTEX = os.path.join(BUILD, "gpumutex")
HOLDER = os.path.join(BUILD, "tests", "lease-holder")
FAKE = os.path.join(BUILD, "tests", "fakenvml")


def status(lockdir, nvml=None, fake_file=None, json_=False):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "FAKENVML_FILE")}
    if nvml:
        env["LD_LIBRARY_PATH"] = FAKE
    if fake_file:
        env["FAKENVML_FILE"] = fake_file
    p = subprocess.run([GPUMUTEX, "status", "--lock-dir", lockdir] +
                       (["--json"] if json_ else []), env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout) if json_ else p.stdout


def holding(lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0,1")
    j = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="train"), ready=True,
                   hold=True)
    assert j.ready()
    return j


def test_nvml_absent(built, lockdir, journal):
    j = holding(lockdir, journal)
    try:
        text = status(lockdir)
        assert "train" in text  # the table is there
        assert "Utilisation: NVML not available (libnvidia-ml.so.1" in text
        doc = status(lockdir, json_=True)
        assert doc["nvml"]["available"] is False
        assert "libnvidia-ml.so.1" in doc["nvml"]["note"]
        assert doc["leases"][0]["job"] == "train"
    finally:
        j.wait()


def test_nvml_present(built, lockdir, journal, tmp_path):
    j = holding(lockdir, journal)
    try:
        f = tmp_path / "nvml"
        # The holder's own process and a child of it on GPU 0 (it holds
        # GPU 0: the first free candidate), a stranger on GPU 1.
        child = subprocess.Popen(["sleep", "60"])
        f.write_text(f"util 0 37 12\nmem 0 {3 << 30} {80 << 30}\n"
                     f"proc 0 {j.pid} {1 << 30}\nproc 1 1 {2 << 30}\n"
                     f"util 1 0 0\n")
        text = status(lockdir, nvml=True, fake_file=str(f))
        assert "Utilisation (NVML):" in text
        line0 = [ln for ln in text.splitlines() if ln.startswith("0 ")
                 and "GiB" in ln][0]
        assert "37%" in line0 and "3.0 of 80.0 GiB" in line0
        assert "1.00 GiB in 1 process" in line0
        doc = status(lockdir, nvml=True, fake_file=str(f), json_=True)
        d0 = doc["nvml"]["devices"][0]
        assert d0["util"] == 37 and d0["memory_used"] == 3 << 30
        assert d0["lease_memory"] == 1 << 30 and d0["lease_processes"] == 1
        assert d0["lease"] == doc["leases"][0]["lease"]
        child.kill()
        child.wait()
    finally:
        j.wait()


def test_nvml_errors(built, lockdir, journal, tmp_path):
    j = holding(lockdir, journal)
    f = tmp_path / "nvml"
    try:
        f.write_text("fail nvmlInit_v2 9\n")
        text = status(lockdir, nvml=True, fake_file=str(f))
        assert "NVML failed to start (nvmlInit: Driver Not Loaded, code 9)" in text
        assert "train" in text
        f.write_text("fail nvmlDeviceGetUtilizationRates 15\n"
                     "fail nvmlDeviceGetComputeRunningProcesses_v3 3\n")
        doc = status(lockdir, nvml=True, fake_file=str(f), json_=True)
        d0 = doc["nvml"]["devices"][0]
        assert d0["util"] is None and d0["memory_total"] == 80 << 30
        assert d0["lease_memory"] is None
        assert "utilisation: GPU is lost" in d0["note"]
        assert "processes: Not Supported" in d0["note"]
        # A library that crashes costs a child process, not the command.
        f.write_text("crash nvmlDeviceGetCount_v2\n")
        text = status(lockdir, nvml=True, fake_file=str(f))
        assert "NVML crashed while read (signal 6)" in text
        assert "train" in text
    finally:
        j.wait()


def test_sample_records_utilisation(built, lockdir, journal, tmp_path):
    f = tmp_path / "nvml"
    f.write_text("util 0 55 5\nutil 1 0 0\n")
    env = dict(os.environ, LD_LIBRARY_PATH=FAKE, FAKENVML_FILE=str(f))
    p = subprocess.run([GPUMUTEX, "sample", "--lock-dir", lockdir,
                        "--count", "2", "--interval", "0.01"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = subprocess.run([GPUMUTEX, "log", "--json", "--lock-dir", lockdir],
                         capture_output=True, text=True, check=True).stdout
    recs = [json.loads(x) for x in out.splitlines()]
    assert [(r["devices"], r["gpu"]) for r in recs] == \
        [([0], 55), ([1], 0), ([0], 55), ([1], 0)]
    # Without NVML it says so and fails.
    env.pop("LD_LIBRARY_PATH")
    p = subprocess.run([GPUMUTEX, "sample", "--lock-dir", lockdir,
                        "--count", "1"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "NVML not available" in p.stderr


def test_python_status_and_events(built, lockdir, journal):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(BUILD), "python"))
    import gpumutex
    j = holding(lockdir, journal)
    try:
        doc = gpumutex.status(lockdir)
        assert doc["schema"] == "gpumutex.status/2"
        assert [x["job"] for x in doc["leases"]] == ["train"]
    finally:
        j.wait()
    ev = gpumutex.events(since="1h", lock_dir=lockdir)
    assert [e["ev"] for e in ev] == ["grant", "exit", "end"]
    assert gpumutex.events(job="nope", lock_dir=lockdir) == []
    import datetime
    assert len(gpumutex.events(since=datetime.timedelta(hours=1),
                               lock_dir=lockdir)) == 3


def test_status_marks_a_lease_without_context(built, lockdir, journal,
                                              tmp_path):
    """A lease whose GPUs NVML shows without any compute process is
    marked "no context", in text and as leases[].context false; one of
    its processes listed: true; unknown (null, no mark) when NVML is
    absent, its list fails, or it lists a process not found to be the
    lease's (it may be its reparented child, or a member elsewhere)."""
    j = holding(lockdir, journal)
    f = tmp_path / "nvml"
    mark = "No context (NVML): GPU 0 held by job train (pids %d)" % j.pid
    try:
        def check(lines, want):
            f.write_text("".join(x + "\n" for x in lines))
            doc = status(lockdir, nvml=True, fake_file=str(f), json_=True)
            assert doc["leases"][0]["devices"] == [0]
            assert doc["leases"][0]["context"] is want, lines
            text = status(lockdir, nvml=True, fake_file=str(f))
            assert (mark in text) is (want is False), text
            assert "train" in text

        # The holder itself computes on its GPU: it has a context.
        check([f"proc 0 {j.pid} {1 << 30}"], True)
        # ... or on another GPU (one it does not hold: still a context).
        check([f"proc 1 {j.pid} 5"], True)
        # Nobody on its GPU (a stranger on another one), or nowhere.
        check([f"proc 1 {os.getpid()} 5"], False)
        check([], False)
        # The list cannot be read, or names a process not found to be the
        # lease's (this test, or one not visible here): no verdict.
        check(["fail nvmlDeviceGetComputeRunningProcesses_v3 3"], None)
        check([f"proc 0 {os.getpid()} 5"], None)
        check(["proc 0 4194000 5"], None)
        check(["fail nvmlInit_v2 9"], None)
        # NVML absent: unknown, not marked.
        doc = status(lockdir, json_=True)
        assert doc["leases"][0]["context"] is None
        assert "No context" not in status(lockdir)
    finally:
        j.wait()


def of_lockdir(lockdir):
    """The lease-holders whose GPUMUTEX_LOCK_DIR is lockdir (other tests
    of the machine have their own)."""
    found = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            exe = os.readlink(f"/proc/{d}/exe")
        except (OSError, ValueError):
            continue
        if (b"GPUMUTEX_LOCK_DIR=" + lockdir.encode()) in env and \
                exe == os.path.realpath(HOLDER):
            found.append(int(d))
    return found


def test_context_of_a_descendant_and_of_an_orphan(built, lockdir, journal,
                                                  tmp_path):
    """A member's child listed by NVML is the lease's context. A child
    that keeps the lease after its member parent exited (reparented, so
    no longer found to be the lease's) gives no verdict when listed on the
    lease's GPU, never "no context"."""
    f = tmp_path / "nvml"
    fifo = tmp_path / "child"
    os.mkfifo(fifo)
    env = jobs.job_env(lockdir, journal, devices="0,1")
    j = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="train"),
                   ["--spawn", "sh", "-c",
                    f"echo $$ > {fifo}; exec sleep 600"], ready=True)
    kid = None
    try:
        assert j.ready()
        with open(fifo) as p:  # the child's PID, once it runs
            kid = int(p.read())
        f.write_text(f"proc 0 {kid} 5\n")
        doc = status(lockdir, nvml=True, fake_file=str(f), json_=True)
        assert doc["leases"][0]["pids"] == [j.pid]
        assert doc["leases"][0]["context"] is True
    finally:
        if kid:
            os.kill(kid, 9)
        j.wait()

    r, w = os.pipe()
    parent = jobs.start(HOLDER, dict(env, GPUMUTEX_JOB="orph"),
                        ["--orphan", str(r)], ready=True, pass_fds=(r,))
    os.close(r)
    try:
        assert parent.ready()
        assert parent.wait() == 0
        orphan = of_lockdir(lockdir)
        assert len(orphan) == 1 and orphan[0] != parent.pid
        doc = status(lockdir, nvml=True, fake_file=str(f), json_=True)
        assert [x["job"] for x in doc["leases"]] == ["orph"]
        f.write_text(f"proc 0 {orphan[0]} 5\n")
        doc = status(lockdir, nvml=True, fake_file=str(f), json_=True)
        assert doc["leases"][0]["context"] is None
        assert "No context" not in status(lockdir, nvml=True,
                                          fake_file=str(f))
    finally:
        os.close(w)
