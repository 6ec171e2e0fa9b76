"""Adversarial tests of libgpumutex.so (src/preload): interleavings and
inputs that the main suite does not reach, plus stress tests.

Three bugs this file found (a fork during the first cuInit deadlocking the
child; SIGPIPE from our message on a broken stderr pipe; a child forked
while the gate waits stalling on inherited descriptors) are fixed; their
tests assert the correct behaviour. Helpers are tests/preload/adv_*.c,
compiled here into tmp_path. Observable outcomes only (fake driver journal,
exit codes, stderr); no sleeps as synchronisation; every subprocess has a
timeout, and hangs inside helpers end as SIGALRM.
"""
import os
import signal
import subprocess
from pathlib import Path

import pytest

import journal as J
from conftest import fake_driver_env

REPO = Path(__file__).resolve().parent.parent
B = REPO / "build"
LIB = B / "libgpumutex.so"
T = B / "tests" / "preload"
SRC = REPO / "tests" / "preload"
PY = "/usr/bin/python3"
TIMEOUT = 90


@pytest.fixture(scope="session")
def built():
    cmd = ["make", "-s", "-C", str(REPO), "all", "fakecuda", "preload-tests"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def cc(tmp_path, name, *extra, shared=False):
    out = tmp_path / (("lib" + name + ".so") if shared else name)
    cmd = ["cc", "-O1", "-Wall", "-o", str(out), str(SRC / (name + ".c"))]
    if shared:
        cmd[1:1] = ["-shared", "-fPIC"]
    r = subprocess.run(cmd + list(extra) + ["-ldl", "-lpthread"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture
def env(tmp_path, built):
    return fake_driver_env(tmp_path, GPUMUTEX_RECHECK_MS="0")


def kv(text):
    return dict(l.split("=", 1) for l in text.splitlines() if "=" in l)


def inits(env):
    """The fake driver's init events (tests/lib/journal.py)."""
    p = env["FAKECUDA_JOURNAL"]
    return J.by_kind(J.parse(p), "init") if os.path.exists(p) else []


# ---- Bugs -------------------------------------------------------------------

@pytest.mark.parametrize("configured", [True, False],
                         ids=["configured", "not-configured"])
def test_fork_between_gate_lock_and_busy(env, tmp_path, configured):
    """Found in review: the gate used to take gate_lock, then call
    pthread_atfork, and only then mark itself BUSY; a fork in that window
    left the child a locked gate_lock that nothing reset, and its cuInit
    deadlocked (configured or not). Thread A makes the process's first
    cuInit; an instrument preloaded before libgpumutex.so
    (adv_atfork_shim.c) holds any pthread_atfork call made during it while
    the main thread forks. Now the handler is registered at load time, so
    cuInit makes no such call (window=0), the child handler always resets
    gate_lock, and the child's cuInit returns 0 (SIGALRM after 20 s would
    mean a hang)."""
    shim = cc(tmp_path, "adv_atfork_shim", shared=True)
    prog = cc(tmp_path, "adv_forkwin")
    e = dict(env, LD_PRELOAD=f"{shim}:{LIB}",
             GPUMUTEX_JOB="0123456789abcdef0123456789abcdef")
    if not configured:
        del e["GPUMUTEX_VISIBLE_DEVICES"]
    r = subprocess.run([str(prog)], env=e, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    out = kv(r.stdout)
    assert out.get("window") == "0", r.stdout  # no registration in cuInit
    assert out.get("a-rc") == "0", r.stdout + r.stderr
    assert out.get("child-status") == "exit:0", (
        f"child of a fork during the first cuInit: {out.get('child-status')}"
        f" (signal:{int(signal.SIGALRM)} = deadlocked in cuInit)")
    assert out.get("child-rc") == "0", r.stdout


def test_message_to_broken_stderr_pipe_does_not_kill(env):
    """Found in review (gmp_say now blocks SIGPIPE around its write).
    A fail-closed message (malformed GPUMUTEX_VISIBLE_DEVICES) with fd 2
    a pipe whose read end is closed (e.g. `prog 2>&1 | head -1` after head
    exited). Without the library the probe exits 0; with it, it must still
    exit 0 and report cuInit's error (1), not die of SIGPIPE."""
    e = dict(env, GPUMUTEX_VISIBLE_DEVICES="zz")
    r, w = os.pipe()
    os.close(r)
    try:
        res = {}
        for pre in (False, True):
            ee = dict(e, LD_PRELOAD=str(LIB)) if pre else e
            res[pre] = subprocess.run([str(T / "cuprobe"), "dlopen"], env=ee,
                                      stdout=subprocess.PIPE, stderr=w,
                                      text=True, timeout=TIMEOUT)
    finally:
        os.close(w)
    assert res[False].returncode == 0  # the host itself is fine
    assert res[True].returncode == 0, (
        f"killed by signal {-res[True].returncode}"
        if res[True].returncode < 0 else res[True].returncode)
    assert kv(res[True].stdout).get("rc") == "1", res[True].stdout


def run_forkbusy(env, tmp_path, children, job, **extra):
    """Hold GPU 0 with one process, start adv_forkbusy (thread A waits in
    the gate; the main thread forks `children` children meanwhile), then
    let the holder go. Returns adv_forkbusy's (stdout, stderr)."""
    prog = cc(tmp_path, "adv_forkbusy")
    e = dict(env, LD_PRELOAD=str(LIB), GPUMUTEX_VISIBLE_DEVICES="0", **extra)
    holder = subprocess.Popen([str(T / "cuprobe"), "hold"], env=e,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert "rc=0" in holder.stdout.readline()
        # It holds the lease once it uses the GPU (docs/preload.md, "When
        # the lease is taken").
        while not holder.stdout.readline().startswith("ready"):
            pass
        p = subprocess.Popen([str(prog), str(children)],
                             env=dict(e, GPUMUTEX_JOB=job),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline() == "forked\n"
        holder.stdin.close()
        holder.wait(TIMEOUT)
        return p.communicate(timeout=TIMEOUT)
    finally:
        holder.kill()
        holder.wait()


def test_child_forked_while_gate_waits_joins_promptly(env, tmp_path):
    """Found in review: a child forked (from another thread) while the
    parent's gate waits in the queue inherited the parent's in-flight lock
    descriptors and waited on a doorbell it held itself, until the
    re-check timer (off here). The child handler now closes them
    (gm_lease_forget_inflight), and the child joins its job's lease."""
    out, err = run_forkbusy(env, tmp_path, 2, "cd" * 16,
                            GPUMUTEX_TIMEOUT="8")
    assert "a-rc=0" in out, out + err
    kids = [l for l in out.splitlines() if l.startswith("child-status=")]
    assert kids == ["child-status=exit:0"] * 2, out + err


def hold_gpu0(e):
    """A holder (cuprobe hold) of GPU 0, once it uses it; the caller
    closes its stdin to let go."""
    holder = subprocess.Popen([str(T / "cuprobe"), "hold"], env=e,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    for line in holder.stdout:
        if line.startswith(("ready", "rc=")) and line != "rc=0\n":
            break
    assert line.startswith("ready"), line
    return holder


@pytest.mark.parametrize("path", ["dlsym", "linked"])
@pytest.mark.parametrize("case", ["free", "wait", "not-configured"])
def test_cuinit_on_a_16k_thread_stack(env, case, path):
    """Found in review: the gate needed 24-32 KiB of thread stack (the
    configuration with its 4 KiB path, lease records, the waiting line and
    the lock directory's state on the stack), so cuInit from a thread with
    a 16 KiB stack (Go, some JVMs and thread pools make such threads) died
    of SIGSEGV in the gate, while waiting and also without waiting; the
    fake driver's own cuInit works there. Now the gate's buffers are static
    (used under the gate's mutex only) and the lease core's are on the
    heap. tests/preload/smallstack.c calls cuInit from such a thread, then
    uses the GPU; with `wait`, a holder has the only managed GPU until the
    probe says it waits, then lets go."""
    e = dict(env, LD_PRELOAD=str(LIB))
    argv = [str(T / "smallstack"), path]
    holder = None
    if case == "not-configured":
        del e["GPUMUTEX_VISIBLE_DEVICES"]
    if case == "wait":
        e["GPUMUTEX_VISIBLE_DEVICES"] = "0"
        holder = hold_gpu0(e)
    try:
        p = subprocess.Popen(argv, env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        if holder:
            waiting = p.stderr.readline()  # "" if it died first
            holder.stdin.close()
            assert holder.wait(TIMEOUT) == 0
        out, err = p.communicate(timeout=TIMEOUT)
    finally:
        if holder:
            holder.kill()
            holder.wait()
    assert p.returncode == 0, (
        f"killed by signal {-p.returncode} (SIGSEGV = {int(signal.SIGSEGV)}) "
        f"on a {kv(out).get('stack')}-byte thread stack" if p.returncode < 0
        else f"exit {p.returncode}: {err}")
    res = kv(out)
    assert res.get("rc") == "0", out + err
    mine = [r for r in inits(env) if r["pid"] == str(p.pid)]
    assert len(mine) == 1, inits(env)
    if case == "not-configured":
        assert res["cvd"] == "-unset-" and mine[0]["cvd"] == "-unset-"
        return
    assert res["cvd"] in ("0", "1") and mine[0]["cvd"] == res["cvd"], out
    if holder:
        assert "waits for 1 GPU of 0" in waiting, waiting + err
        assert res["cvd"] == "0"
        J.check_exclusive(J.parse(env["FAKECUDA_JOURNAL"]))


def nsprobe(e, mode):
    r = subprocess.run([str(T / "nsprobe"), mode], env=e, capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r, kv(r.stdout)


@pytest.mark.parametrize("mode", ["newlm-driver", "newlm-origin",
                                  "newlm-dependent", "existing-driver",
                                  "base-first"])
def test_dlmopen_of_the_driver_outside_the_main_namespace_is_refused(env,
                                                                     mode):
    """Found in review: dlmopen(LM_ID_NEWLM, "libcuda.so.1") and dlsym(h,
    "cuInit") got the real cuInit of a second copy of the driver in a new
    link-map namespace, where LD_PRELOAD libraries are not loaded: no
    lease, no CUDA_VISIBLE_DEVICES, and the process used the GPU another
    job held, silently. The same through a library linked with -lcuda
    (its own PLT), into a namespace made by an earlier dlmopen, by
    $ORIGIN, and with the driver already loaded in the main namespace (the
    new namespace gets its own copy all the same). Now dlmopen outside the
    main namespace is refused when the namespace holds the driver: NULL,
    one gpumutex: line, dlerror() says why, and the fake driver's journal
    shows only the holder ever initialised it."""
    e = dict(env, LD_PRELOAD=str(LIB), GPUMUTEX_VISIBLE_DEVICES="0")
    holder = hold_gpu0(e)
    try:
        r, out = nsprobe(e, mode)
    finally:
        holder.stdin.close()
        holder.wait(TIMEOUT)
    assert out.get("handle") == "null", (
        f"dlmopen gave a handle; cuInit through it returned {out.get('rc')} "
        f"while another job held the GPU: {r.stdout}{r.stderr}")
    assert "gpumutex refused" in out["dlerror"], out
    said = [l for l in r.stderr.splitlines() if l.startswith("gpumutex: ")]
    assert len(said) == 1 and "refused dlmopen(" in said[0] and \
        "NVIDIA driver" in said[0], r.stderr
    assert {ev["pid"] for ev in inits(env)} == {str(holder.pid)}, inits(env)
    J.check_exclusive(J.parse(env["FAKECUDA_JOURNAL"]))


def test_dlmopen_of_an_unrelated_library_into_a_new_namespace_works(env):
    """Configured, dlmopen(LM_ID_NEWLM) of a library that has nothing to do
    with CUDA is made as before, and found as glibc finds it for the caller:
    libnexttwo.so is only on nsprobe's RUNPATH ($ORIGIN), which glibc would
    not search for a dlmopen made from libgpumutex.so itself."""
    e = dict(env, LD_PRELOAD=str(LIB))
    r, out = nsprobe(e, "newlm-other")
    assert out == {"handle": "ok", "dlerror": "(null)", "shared_fn": "2"}, \
        r.stdout + r.stderr
    assert r.stderr == ""


def test_dlmopen_of_the_driver_when_not_configured_passes_through(env):
    e = dict(env, LD_PRELOAD=str(LIB))
    del e["GPUMUTEX_VISIBLE_DEVICES"]
    r, out = nsprobe(e, "newlm-driver")
    assert out.get("handle") == "ok" and out.get("rc") == "0", r.stdout
    assert r.stderr == ""


def test_dlmopen_into_the_main_namespace_queues(env):
    """dlmopen(LM_ID_BASE, "libcuda.so.1") is dlopen: its cuInit goes
    through the gate and waits for the holder, as before."""
    e = dict(env, LD_PRELOAD=str(LIB), GPUMUTEX_VISIBLE_DEVICES="0")
    holder = hold_gpu0(e)
    try:
        p = subprocess.Popen([str(T / "nsprobe"), "base"], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        waiting = p.stderr.readline()
        holder.stdin.close()
        assert holder.wait(TIMEOUT) == 0
        out, err = p.communicate(timeout=TIMEOUT)
    finally:
        holder.kill()
        holder.wait()
    assert p.returncode == 0, err
    assert "waits for 1 GPU of 0" in waiting, waiting + err
    assert kv(out) == {"handle": "ok", "dlerror": "(null)", "rc": "0"}, out
    mine = [ev for ev in inits(env) if ev["pid"] == str(p.pid)]
    assert len(mine) == 1 and mine[0]["cvd"] == "0", inits(env)
    J.check_exclusive(J.parse(env["FAKECUDA_JOURNAL"]))


# ---- Stress tests (pass) ----------------------------------------------------

def test_many_threads_race_every_lookup_path_in_several_processes(env,
                                                                  tmp_path):
    """16 threads x 4 processes (4 jobs, 1 GPU of 2 each) race dlsym
    (handle, RTLD_DEFAULT, RTLD_NEXT), cuGetProcAddress(_v2) incl. the
    self-lookup, unrelated lookups and cuInit. Every cuInit pointer is the
    same function, every call returns 0, each process's cuInit ran with one
    leased GPU."""
    prog = cc(tmp_path, "adv_stress")
    e = dict(env, LD_PRELOAD=str(LIB), GPUMUTEX_RECHECK_MS="200")
    procs = [subprocess.Popen([str(prog), "16", "40"], env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 0, err
        assert kv(out) == {"calls": "640 bad=0"}, out + err
    ev = inits(env)
    assert len({r["pid"] for r in ev}) == 4
    assert all(r["cvd"] in ("0", "1") and r["order"] == "PCI_BUS_ID"
               for r in ev), ev


def test_fork_from_another_thread_while_gate_waits(env, tmp_path):
    """Children forked while thread A waits in the gate start over, join
    the job and get cuInit == 0 (with the default-style re-check on)."""
    out, err = run_forkbusy(env, tmp_path, 4, "ab" * 16,
                            GPUMUTEX_RECHECK_MS="200")
    assert "a-rc=0" in out, out + err
    assert out.count("child-status=exit:0") == 4, out + err
    # cuInit ran before the fork (the lease waits for the first device
    # call); all five then used GPU 0 as members of the job.
    mine = [r for r in inits(env) if r["job"] == "ab" * 16]
    assert len(mine) == 1 and mine[0]["cvd"] == "0", mine
    begins = [r for r in J.parse(env["FAKECUDA_JOURNAL"])
              if r["ev"] == "begin" and r["job"] == "ab" * 16]
    assert len(begins) == 5 and {r["dev"] for r in begins} == {"0"}
    J.check_exclusive(J.parse(env["FAKECUDA_JOURNAL"]))


def test_ctypes_from_many_python_threads(env, tmp_path):
    """8 Python threads call cuInit through ctypes at once (GIL released
    around the call, so os.environ is updated by a pending call); then a
    signal in the main thread runs pending calls. All return 0, one real
    lease, C environment and os.environ agree."""
    code = r"""
import ctypes, os, signal, threading
lib = ctypes.CDLL("libcuda.so.1")
bar = threading.Barrier(8)
rcs = []
def work():
    bar.wait()
    for _ in range(20):
        rcs.append(ctypes.CDLL("libcuda.so.1").cuInit(0))
        getattr(lib, "cuDeviceGetCount")
ts = [threading.Thread(target=work) for _ in range(8)]
for t in ts: t.start()
for t in ts: t.join()
seen = []
signal.signal(signal.SIGUSR1, lambda *a: seen.append(1))
signal.raise_signal(signal.SIGUSR1)
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
c_cvd = libc.getenv(b"CUDA_VISIBLE_DEVICES").decode()
print("rcs=" + ",".join(sorted(set(map(str, rcs)))), "n=%d" % len(rcs))
print("c=" + c_cvd)
print("py=" + os.environ.get("CUDA_VISIBLE_DEVICES", "-"))
print("job=" + str(os.environ.get("GPUMUTEX_JOB") == libc.getenv(b"GPUMUTEX_JOB").decode()))
"""
    r = subprocess.run([PY, "-c", code], env=dict(env, LD_PRELOAD=str(LIB)),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "rcs=0 n=160", r.stdout
    c = lines[1].split("=", 1)[1]
    assert c in ("0", "1") and lines[2] == "py=" + c and lines[3] == "job=True", r.stdout
    ev = inits(env)  # the fake journals the first real cuInit only
    assert len(ev) == 1 and ev[0]["cvd"] == c, ev
