"""The machine-wide scenarios, run as root INSIDE a throw-away Debian root
(tests/system/run.sh makes it; tests/test_system.py reads the results).

It builds gpumutex there with the root's own compiler, installs a fake
driver (tests/fakecuda, built to journal to one fixed file even for
processes whose environment was reset) and a fake NVML where the dynamic
linker finds them, runs `gpumutex install --system`, and then tries every
way past the queue that the machine-wide mode must close. Each scenario's
outcome (ok, or the traceback) goes to OUT/results.json; nothing here
sleeps to synchronise: a waiter is known to wait when it printed its
waiting line, and the order of use is read from the journal.

Usage: python3 scenarios.py OUTDIR
"""

import json
import os
import select
import shutil
import stat
import subprocess
import sys
import traceback

SRC = "/gm-src"
B = SRC + "/build"
GM = B + "/gpumutex"
PROBE = B + "/tests/preload/cuprobe"
STATIC = B + "/tests/preload/hello-static"
JOURNAL = "/var/tmp/fakecuda.journal"
LIB = "/usr/local/lib/gpumutex/libgpumutex.so"
CONF = "/etc/gpumutex.conf"
PRELOAD = "/etc/ld.so.preload"
LOCKS = "/tmp/libgpumutex"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
USER = 4001
ORIG_PRELOAD = (b"# site preloads, kept by gpumutex\n"
                b"/usr/local/lib/libgmnoop.so\n\n"
                b"  /usr/local/lib/libgmnoop.so")  # no final newline
# Upper bounds against hangs only (a hang is a failure): never used to wait
# for something to happen.
HANG = 60

sys.path.insert(0, SRC + "/tests/lib")
import journal as J  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
results = {}


def scenario(fn):
    try:
        fn()
        results[fn.__name__] = {"ok": True}
    except Exception:
        results[fn.__name__] = {"ok": False, "detail": traceback.format_exc()}
    return fn


def sh(*argv, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", HANG)
    return subprocess.run(list(argv), **kw)


def must(*argv, **kw):
    r = sh(*argv, **kw)
    assert r.returncode == 0, (argv, r.returncode, r.stdout, r.stderr)
    return r


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def write(path, data, mode=0o644):
    if os.path.lexists(path) and not os.path.isdir(path):
        os.unlink(path)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    os.chmod(path, mode)


def events():
    return J.parse(JOURNAL) if os.path.exists(JOURNAL) else []


def inits():
    return J.by_kind(events(), "init")


def clean_env(**extra):
    env = {"PATH": PATH}
    env.update(extra)
    return env


_pending = {}


def until_line(f, needle):
    """Lines of the pipe `f` until one contains `needle` (then True) or
    EOF (False); fails on a hang. Reads the descriptor itself: a buffered
    readline could take in the awaited line too and leave select() nothing
    to see."""
    fd = f.fileno()
    buf = _pending.pop(fd, b"")
    seen = []
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            seen.append(line.decode(errors="replace") + "\n")
            if needle in seen[-1]:
                _pending[fd] = buf
                return True, seen
        r, _, _ = select.select([fd], [], [], HANG)
        assert r, f"hung waiting for {needle!r}; saw {seen}"
        chunk = os.read(fd, 4096)
        if not chunk:
            if buf:
                seen.append(buf.decode(errors="replace"))
            return False, seen
        buf += chunk


def rest(f):
    """What is left of pipe `f` (after until_line) up to EOF."""
    fd = f.fileno()
    buf = _pending.pop(fd, b"")
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return buf.decode(errors="replace")
        buf += chunk


# ---- Set-up: build, fakes, install -------------------------------------

def setup():
    os.chdir(SRC)
    must("make", "-s", "-j2", "build/gpumutex", "build/libgpumutex.so",
         "build/tests/preload/cuprobe", "build/tests/preload/hello-static",
         timeout=900)
    fc = SRC + "/tests/fakecuda"
    must("sh", "-c", f"sh {fc}/gen-stubs.sh --c {fc}/stubs.txt "
         f"{fc}/fakecuda.h > /tmp/stubs.c")
    must("cc", "-std=gnu11", "-O2", "-fPIC", "-shared", "-pthread",
         f"-I{fc}", f"-DFAKECUDA_DEFAULT_JOURNAL=\"{JOURNAL}\"",
         "-o", "/usr/local/lib/libcuda.so.1",
         # Every source of the fake but its self-test (as its module.mk).
         *sorted(f"{fc}/{n}" for n in os.listdir(fc)
                 if n.endswith(".c") and n != "selftest.c"),
         "/tmp/stubs.c", "-Wl,-soname,libcuda.so.1",
         f"-Wl,--version-script={fc}/exports.map", "-Wl,-Bsymbolic", "-ldl")
    must("cc", "-O2", "-fPIC", "-shared", "-o",
         "/usr/local/lib/libnvidia-ml.so.1",
         SRC + "/tests/system/fakenvml.c")
    must("cc", "-O2", "-fPIC", "-shared", "-o",
         "/usr/local/lib/libgmnoop.so", SRC + "/tests/system/noop.c")
    must("ldconfig")
    write(JOURNAL, b"", 0o666)
    write(PRELOAD, ORIG_PRELOAD, 0o644)


try:
    setup()
    results["setup"] = {"ok": True}
except Exception:
    results["setup"] = {"ok": False, "detail": traceback.format_exc()}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    sys.exit(0)


def install(*extra):
    return sh(GM, "install", "--system", "--visible-devices", "0,1",
              "--lib", B + "/libgpumutex.so", *extra)


@scenario
def install_dry_run_changes_nothing():
    r = install("--dry-run")
    assert r.returncode == 0, r
    assert "would add the line " + LIB in r.stdout, r.stdout
    assert read(PRELOAD) == ORIG_PRELOAD
    assert not os.path.exists(CONF) and not os.path.exists(LIB)


@scenario
def install_puts_the_library_first_and_keeps_every_line():
    r = install()
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert read(PRELOAD) == LIB.encode() + b"\n" + ORIG_PRELOAD
    assert read(PRELOAD + ".gpumutex-backup") == ORIG_PRELOAD
    conf = read(CONF, "r")
    assert "visible_devices = 0,1\n" in conf and "enforce = yes\n" in conf
    st = os.stat(CONF)
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644
    st = os.stat(LOCKS)
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o755


@scenario
def install_twice_is_install_once():
    before = (read(PRELOAD), read(CONF), read(LIB))
    r = install()
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert (read(PRELOAD), read(CONF), read(LIB)) == before
    r = install("--dry-run")
    assert "unchanged" in r.stdout, r.stdout


@scenario
def install_needs_root():
    r = sh(GM, "install", "--system", "--visible-devices", "0,1",
           user=USER, group=USER, env=clean_env())
    assert r.returncode == 1 and "only root" in r.stderr, r


# ---- Queueing without the environment ---------------------------------

def holder():
    """A job that holds both managed GPUs (narrowing num_devices is
    allowed: 2 is the managed count)."""
    p = subprocess.Popen([PROBE, "hold"], env=clean_env(GPUMUTEX_NUM_DEVICES="2"),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, bufsize=0)
    ok, seen = until_line(p.stdout, "ready")
    assert ok and "rc=0\n" in seen and "cvd=0,1\n" in seen, seen
    return p


def queued_behind_holder(argv, env, expect_stderr=(), **kw):
    """Start `argv` while a holder has both GPUs: it must say it waits,
    must not have initialised the driver, and must get a managed GPU only
    after the holder is gone."""
    h = holder()
    n_inits = len(inits())
    w = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         bufsize=0, **kw)
    try:
        ok, seen = until_line(w.stderr, "waits for")
        assert ok, ("did not wait", seen)
        assert len(inits()) == n_inits, "the waiter initialised the driver"
    finally:
        h.stdin.close()
        h.wait(timeout=HANG)
        rest(h.stdout)
    rest_err = rest(w.stderr)
    rest_out = rest(w.stdout)
    w.wait(timeout=HANG)
    err = "".join(seen) + rest_err
    assert w.returncode == 0, (w.returncode, rest_out, err)
    assert "rc=0\n" in rest_out, (rest_out, err)
    for s in expect_stderr:
        assert s in err, (s, err)
    ev = events()
    J.check_exclusive(ev)
    hold_end = max(e.t for e in ev if e["ev"] == "end" and int(e["pid"]) == h.pid)
    mine = [e for e in ev if e["ev"] == "begin" and int(e["pid"]) != h.pid
            and e.t > hold_end]
    assert mine, ("the waiter never used a GPU", ev[-6:])
    assert all(e["dev"] in ("0", "1") for e in mine), mine
    return err


@scenario
def env_i_queues():
    queued_behind_holder(["/usr/bin/env", "-i", PROBE, "work", "1"], clean_env())


@scenario
def subprocess_with_empty_env_queues():
    code = ("import subprocess, sys\n"
            f"sys.exit(subprocess.run([{PROBE!r}, 'work', '1'], env={{}}).returncode)\n")
    queued_behind_holder(["/usr/bin/python3", "-c", code], clean_env())


@scenario
def unset_ld_preload_queues():
    queued_behind_holder(["/usr/bin/env", "-u", "LD_PRELOAD", PROBE, "work", "1"],
                         clean_env(LD_PRELOAD=LIB))


@scenario
def device_outside_the_managed_set_is_refused():
    err = queued_behind_holder(
        [PROBE, "work", "1"], clean_env(GPUMUTEX_VISIBLE_DEVICES="5"),
        expect_stderr=['GPUMUTEX_VISIBLE_DEVICES="5" is refused'])
    assert all(e["dev"] != "5" for e in events() if e["ev"] == "begin")


@scenario
def other_lock_dir_is_refused():
    queued_behind_holder(
        [PROBE, "work", "1"], clean_env(GPUMUTEX_LOCK_DIR="/tmp/elsewhere"),
        expect_stderr=['GPUMUTEX_LOCK_DIR="/tmp/elsewhere" is refused'])
    assert not os.path.exists("/tmp/elsewhere")


@scenario
def setuid_program_queues_under_the_file_only():
    """AT_SECURE: the library comes by /etc/ld.so.preload, and takes no
    setting from the (user-chosen) environment, only the file's."""
    suid = "/usr/local/bin/gm-suid-probe"
    shutil.copy(PROBE, suid)
    os.chown(suid, 0, 0)
    os.chmod(suid, 0o4755)
    queued_behind_holder(
        [suid, "work", "1"],
        clean_env(GPUMUTEX_LOCK_DIR="/tmp/evil", GPUMUTEX_VISIBLE_DEVICES="5"),
        user=USER, group=USER)
    assert not os.path.exists("/tmp/evil")


@scenario
def static_program_is_untouched():
    r = sh(STATIC, env=clean_env())
    assert r.returncode == 7 and r.stderr == "", r
    assert r.stdout == "hello from a static program\n"


@scenario
def programs_without_cuda_run_unchanged():
    before = sorted(os.listdir(LOCKS + "/queue")), sorted(os.listdir(LOCKS + "/job"))
    for argv, want in ((["/bin/true"], ""), (["/bin/sh", "-c", "echo hi"], "hi\n"),
                       (["/usr/bin/python3", "-c", "print(1)"], "1\n"),
                       (["/usr/bin/env", "-i", "/bin/sh", "-c", "echo x"], "x\n")):
        r = sh(*argv, env=clean_env())
        assert (r.returncode, r.stdout, r.stderr) == (0, want, ""), (argv, r)
    after = sorted(os.listdir(LOCKS + "/queue")), sorted(os.listdir(LOCKS + "/job"))
    assert before == after


@scenario
def the_library_is_loaded_everywhere():
    r = sh("/usr/bin/env", "-i", "/bin/cat", "/proc/self/maps")
    assert LIB in r.stdout


# ---- Bad configuration files --------------------------------------------

GOOD = "visible_devices = 0,1\nenforce = yes\n"


def bad(name, make, needle, **kw):
    """With the file as `make` leaves it, a CUDA program fails closed
    (cuInit returns an error) with one gpumutex line naming the file and
    the reason, and never reaches the driver; nothing hangs."""
    if os.path.isdir(CONF) and not os.path.islink(CONF):
        os.rmdir(CONF)
    elif os.path.lexists(CONF):
        os.unlink(CONF)
    make()
    n = len(inits())
    r = sh("/usr/bin/env", "-i", PROBE, "work", "1", **kw)
    assert r.returncode == 0 and r.stdout.startswith("rc=") and \
        not r.stdout.startswith("rc=0\n"), (name, r)
    lines = [x for x in r.stderr.splitlines() if x.startswith("gpumutex:")]
    assert len(lines) == 1 and needle in lines[0], (name, r.stderr)
    assert len(inits()) == n, (name, "reached the driver")
    return lines[0]


def fifo():
    os.mkfifo(CONF, 0o644)


def symlink():
    write("/etc/gpumutex.real", GOOD)
    os.symlink("/etc/gpumutex.real", CONF)


def owned_by_user():
    write(CONF, GOOD)
    os.chown(CONF, USER, USER)


BAD = {
    "missing": (lambda: None, "configuration file /etc/gpumutex.conf is missing"),
    "empty": (lambda: write(CONF, ""), "names no GPUs"),
    "garbage": (lambda: write(CONF, b"\x7fELF\x01\x02 binary junk\n"), "line 1: "),
    "nul_byte": (lambda: write(CONF, b"visible_devices = 0\x00,1\n"), "NUL byte"),
    "unknown_key": (lambda: write(CONF, GOOD + "colour = blue\n"),
                    'line 3: unknown key "colour"'),
    "duplicate_key": (lambda: write(CONF, GOOD + "visible_devices = 0\n"),
                      'line 3: key "visible_devices" was already set on line 1'),
    "bad_value": (lambda: write(CONF, "visible_devices = 0,x\nenforce = yes\n"),
                  'line 1: visible_devices="0,x" is not a list'),
    "bad_enforce": (lambda: write(CONF, "visible_devices = 0\nenforce = maybe\n"),
                    'line 2: enforce="maybe" is not valid; expected yes or no'),
    "directory": (lambda: os.mkdir(CONF), "is a directory"),
    "fifo": (fifo, "is a FIFO"),
    "symlink": (symlink, "is a symbolic link"),
    "huge": (lambda: write(CONF, GOOD + "#" * 70000 + "\n"), "expected at most 65536"),
    "wrong_owner": (owned_by_user, "owned by uid 4001, so it is not trusted"),
    "world_writable": (lambda: write(CONF, GOOD, 0o666),
                       "mode 0666 (writable by everyone), so it is not trusted"),
    "group_writable": (lambda: write(CONF, GOOD, 0o664), "writable by its group"),
    "enforce_without_devices": (lambda: write(CONF, "enforce = yes\n"),
                                "enforce = yes needs visible_devices"),
}


@scenario
def bad_config_files_fail_closed():
    msgs = {}
    for name, (make, needle) in BAD.items():
        msgs[name] = bad(name, make, needle)
    # Unreadable by the user who runs the program.
    msgs["unreadable"] = bad("unreadable", lambda: write(CONF, GOOD, 0o600),
                             "cannot be read by uid 4001", user=USER, group=USER)
    with open(os.path.join(out, "bad-config-messages.json"), "w") as f:
        json.dump(msgs, f, indent=1)
    for p in ("/etc/gpumutex.real",):
        if os.path.lexists(p):
            os.unlink(p)
    os.unlink(CONF)
    assert install().returncode == 0


@scenario
def non_enforcing_file_gives_defaults():
    """enforce = no: the file configures processes that have no variable
    (env -i still queues), and the environment overrides it."""
    saved = read(CONF)
    try:
        write(CONF, "visible_devices = 0,1\nenforce = no\n")
        queued_behind_holder(["/usr/bin/env", "-i", PROBE, "work", "1"], clean_env())
        r = sh(PROBE, "work", "1", env=clean_env(GPUMUTEX_VISIBLE_DEVICES="5"))
        assert r.stdout.startswith("rc=0\ncvd=5\n") and r.stderr == "", r
        j = json.loads(sh(GM, "doctor", "--json", env=clean_env()).stdout)
        assert j["queued"] is True and j["enforce"] is False, j
    finally:
        write(CONF, saved)


# ---- gpumutex doctor ------------------------------------------------------

def doctor(*extra, **kw):
    kw.setdefault("env", clean_env())
    return sh(GM, "doctor", *extra, **kw)


@scenario
def doctor_effective():
    r = doctor()
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "would be queued" in r.stdout and "/etc/ld.so.preload preloads" in r.stdout
    j = json.loads(doctor("--json").stdout)
    assert j["queued"] is True and j["enforce"] is True, j
    assert j["preload"] == "ld.so.preload" and j["visible_devices"] == [0, 1], j
    assert j["config_source"] == "file" and j["lock_dir"] == LOCKS, j
    # Narrowing from the environment: both sources, still queued.
    j = json.loads(doctor("--json", env=clean_env(GPUMUTEX_NUM_DEVICES="2")).stdout)
    assert j["queued"] is True and j["config_source"] == "both", j
    r = doctor(user=USER, group=USER)
    assert r.returncode == 0, (r.stdout, r.stderr)


def doctor_broken(make, needle, undo=None, **kw):
    saved = read(CONF)
    try:
        make()
        r = doctor(**kw)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert needle in r.stdout and "would NOT be queued" in r.stdout, r.stdout
        j = json.loads(doctor("--json", **kw).stdout)
        assert j["queued"] is False
        assert any(f["level"] == "problem" and needle in f["text"]
                   for f in j["findings"]), j
    finally:
        if undo:
            undo()
        if os.path.lexists(CONF):
            os.unlink(CONF)
        write(CONF, saved)


@scenario
def doctor_broken_setups():
    doctor_broken(lambda: os.chmod(CONF, 0o666), "not trusted")
    doctor_broken(lambda: write(CONF, "visible_devices = 0,9\nenforce = yes\n"),
                  "managed GPU 9 does not exist")
    os.makedirs("/tmp/gm-real-locks", exist_ok=True)
    if not os.path.lexists("/tmp/gm-link"):
        os.symlink("/tmp/gm-real-locks", "/tmp/gm-link")
    doctor_broken(lambda: write(CONF, GOOD + "lock_dir = /tmp/gm-link\n"),
                  "symbolic link")
    doctor_broken(lambda: None, "leaves none of the managed GPUs",
                  env=clean_env(CUDA_VISIBLE_DEVICES="4"))
    drv = "/usr/local/lib/libcuda.so.1"
    # Out of ldconfig's directories (it would link libcuda.so.1 to any
    # file there with that SONAME).
    doctor_broken(lambda: (os.rename(drv, "/root/libcuda.away"), must("ldconfig")),
                  "no NVIDIA driver library",
                  undo=lambda: (os.rename("/root/libcuda.away", drv), must("ldconfig")))


# ---- Uninstall ------------------------------------------------------------

@scenario
def uninstall_restores_ld_so_preload_exactly():
    r = sh(GM, "uninstall", "--system", "--dry-run")
    assert r.returncode == 0 and "would remove the line" in r.stdout, r
    assert read(PRELOAD).startswith(LIB.encode())
    r = sh(GM, "uninstall", "--system")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert read(PRELOAD) == ORIG_PRELOAD
    assert not os.path.exists(LIB) and os.path.exists(CONF)
    r = sh(GM, "uninstall", "--system")
    assert r.returncode == 0 and read(PRELOAD) == ORIG_PRELOAD
    r = doctor()
    assert r.returncode == 1 and "not preloaded" in r.stdout, r.stdout
    # No ld.so.preload before: none after.
    os.unlink(PRELOAD)
    assert install().returncode == 0
    assert read(PRELOAD) == LIB.encode() + b"\n"
    assert sh(GM, "uninstall", "--system").returncode == 0
    assert not os.path.exists(PRELOAD)


with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(results, f, indent=1)
