"""The library declines rather than crashes: with no driver, in a static
program, in a process that closes all its descriptors or changes its user,
and in programs that never touch CUDA under global preloading. Where it
cannot guarantee exclusion it says so (checked on stderr) and fails
closed; elsewhere the program behaves exactly as without it."""

import os
import subprocess
import tempfile

import pytest

import journal as J
from conftest import BUILD, REPO

LIB = os.path.join(BUILD, "libgpumutex.so")
T = os.path.join(BUILD, "tests", "preload")
FAKE = os.path.join(BUILD, "tests", "fakecuda")


@pytest.fixture(scope="module")
def progs(built):
    subprocess.run(["make", "-C", REPO, "-s", "fakecuda",
                    "build/tests/preload/decline",
                    "build/tests/preload/hello-static"], check=True)


def env_for(lockdir, journal, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUMUTEX_", "CUDA_"))}
    env.update(LD_PRELOAD=LIB, GPUMUTEX_VISIBLE_DEVICES="0,1",
               GPUMUTEX_LOCK_DIR=lockdir, GPUMUTEX_RECHECK_MS="0",
               FAKECUDA_JOURNAL=journal, FAKECUDA_NUM_DEVICES="2")
    env.update(extra)
    return env


def run(argv, env, **kw):
    return subprocess.run(argv, env=env, capture_output=True, text=True,
                          timeout=60, **kw)


def test_no_driver_on_the_system(progs, lockdir, journal):
    """No libcuda.so.1 anywhere: loading it fails exactly as without us,
    and nothing is queued."""
    env = env_for(lockdir, journal)
    code = ("import ctypes\n"
            "try:\n ctypes.CDLL('libcuda.so.1'); print('loaded')\n"
            "except OSError as e: print('no driver')\n"
            "print(ctypes.CDLL(None)._handle != 0)\n")
    with_lib = run(["/usr/bin/python3", "-c", code], env)
    without = run(["/usr/bin/python3", "-c", code],
                  {k: v for k, v in env.items() if k != "LD_PRELOAD"})
    assert with_lib.returncode == without.returncode == 0
    assert with_lib.stdout == without.stdout == "no driver\nTrue\n"
    assert with_lib.stderr == ""
    assert not os.path.exists(lockdir)


def test_static_program_is_untouched(progs, lockdir, journal):
    """A statically linked program never runs the dynamic linker, so the
    preload cannot reach it (documented limitation); it runs unchanged."""
    r = run([os.path.join(T, "hello-static")], env_for(lockdir, journal))
    assert r.returncode == 7
    assert r.stdout == "hello from a static program\n" and r.stderr == ""


def test_closing_the_lease_descriptors_is_reported(progs, lockdir, journal):
    """A process that closes every descriptor after taking its lease (a
    daemon) has given the lease up while it may still use the GPU: the
    next cuInit says so and fails closed, and the GPU is indeed free for
    others (which is what the message warns about)."""
    env = env_for(lockdir, journal, GPUMUTEX_VISIBLE_DEVICES="0")
    p = subprocess.Popen([os.path.join(T, "decline"), "closeall"], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "first=0 second=100\n"
    # While it lives (and may still use GPU 0), nothing holds GPU 0 any
    # more: another job gets it at once. This is what the message warns of.
    other = run([os.path.join(T, "decline"), "setuid", str(os.geteuid())],
                dict(env, GPUMUTEX_TIMEOUT="0"))
    assert other.stdout == "rc=0 cvd=0\n", other.stderr
    p.stdin.close()
    assert p.wait(timeout=60) == 0
    err = p.stderr.read()
    assert "closed the descriptor that held its lease on GPU 0" in err
    assert "exclusion is no longer guaranteed" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to change user")
def test_process_that_changes_user(progs):
    """A root process that drops to another user before cuInit queues as
    that user in a shared (1777) lock directory; in a directory that user
    cannot write, cuInit fails closed with a message naming it."""
    shared = tempfile.mkdtemp(prefix="gm-decline-", dir="/tmp")
    try:
        os.chmod(shared, 0o1777)
        journal = os.path.join(shared, "journal")
        open(journal, "w").close()
        os.chmod(journal, 0o666)
        lockdir = os.path.join(shared, "locks")
        r = run([os.path.join(T, "decline"), "setuid", "4201"],
                env_for(lockdir, journal))
        assert r.stdout == "rc=0 cvd=0\n", r.stderr
        st = os.stat(os.path.join(lockdir, "job"))
        assert os.listdir(os.path.join(lockdir, "job", "4201"))
        assert st.st_mode & 0o1777 == 0o1777
        inits = J.by_kind(J.parse(journal), "init")
        assert [e["cvd"] for e in inits] == ["0"]

        private = os.path.join(shared, "private")
        os.mkdir(private, 0o755)  # root's, not writable by 4201
        r = run([os.path.join(T, "decline"), "setuid", "4201"],
                env_for(private, journal))
        assert r.stdout.startswith("rc=100 "), r.stdout
        assert "gpumutex: cannot queue for a GPU" in r.stderr
        assert private in r.stderr
        assert len(J.by_kind(J.parse(journal), "init")) == 1  # real cuInit never ran
    finally:
        subprocess.run(["rm", "-rf", shared])


@pytest.mark.parametrize("argv", [
    ["/bin/sh", "-c", "echo hi; ls / >/dev/null; exit 3"],
    ["/usr/bin/python3", "-c", "import os; print(os.getpid() > 0)"],
    ["/usr/bin/env"],
])
def test_global_preloading_of_programs_without_cuda(progs, lockdir, journal,
                                                    argv):
    """With the library preloaded into everything (as /etc/ld.so.preload
    would), programs that never touch CUDA run exactly as without it and
    create nothing in the lock directory."""
    env = env_for(lockdir, journal)
    plain = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    a, b = run(argv, env), run(argv, plain)
    assert a.returncode == b.returncode
    assert a.stderr == b.stderr
    if argv[0] == "/usr/bin/env":
        assert sorted(a.stdout.splitlines()) == sorted(
            (b.stdout + f"LD_PRELOAD={LIB}\n").splitlines())
    else:
        assert a.stdout == b.stdout
    assert not os.path.exists(lockdir)
