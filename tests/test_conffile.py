"""The configuration file on this machine, which has no /etc/gpumutex.conf
(and whose /etc is never touched): GPUMUTEX_CONFIG names a file of the
user's, which configures the library as the system file would without
enforce; the environment overrides it; a file that cannot be trusted or
read fails closed. The system file, enforce mode, install and doctor in
full are in tests/test_system.py (chroot roots)."""

import json
import os
import subprocess

import pytest

import journal as J
from conftest import BUILD, fake_driver_env

LIB = os.path.join(BUILD, "libgpumutex.so")
PROBE = os.path.join(BUILD, "tests", "preload", "cuprobe")
GM = os.path.join(BUILD, "gpumutex")

pytestmark = pytest.mark.skipif(os.path.exists("/etc/gpumutex.conf"),
                                reason="this machine has an /etc/gpumutex.conf")


@pytest.fixture(scope="module")
def built():
    subprocess.run(["make", "-s", "-C", os.path.dirname(BUILD), "all",
                    "fakecuda", "preload-tests"], check=True)


def env_for(tmp_path, conf_text=None, mode=0o644, **extra):
    e = fake_driver_env(tmp_path, LD_PRELOAD=LIB)
    del e["GPUMUTEX_VISIBLE_DEVICES"]
    e.update(extra)
    if conf_text is not None:
        conf = tmp_path / "my.conf"
        conf.write_text(conf_text)
        os.chmod(conf, mode)
        e["GPUMUTEX_CONFIG"] = str(conf)
    return e


def probe(env):
    return subprocess.run([PROBE, "work", "1"], env=env, capture_output=True,
                          text=True, timeout=60)


def test_user_file_configures(built, tmp_path):
    lock = tmp_path / "lock"
    r = probe(env_for(tmp_path, f"visible_devices = 1\nlock_dir = {lock}\n"))
    assert r.stdout.startswith("rc=0\ncvd=1\n"), (r.stdout, r.stderr)
    assert os.path.isdir(lock / "dev")
    assert [e["dev"] for e in J.by_kind(J.parse(tmp_path / "journal"), "begin")] == ["1"]


def test_environment_overrides_a_non_enforcing_file(built, tmp_path):
    r = probe(env_for(tmp_path, "visible_devices = 1\n",
                      GPUMUTEX_VISIBLE_DEVICES="0"))
    assert r.stdout.startswith("rc=0\ncvd=0\n"), (r.stdout, r.stderr)


def test_without_any_file_nothing_changes(built, tmp_path):
    """No system file, no GPUMUTEX_CONFIG, no GPUMUTEX_VISIBLE_DEVICES:
    a pure pass-through, as before the file existed."""
    r = probe(env_for(tmp_path))
    assert r.stdout.startswith("rc=0\ncvd=-unset-\n") and r.stderr == "", r


@pytest.mark.parametrize("case,needle", [
    ("missing", "cannot open configuration file"),
    ("writable", "writable by everyone), so it is not trusted"),
    ("garbage", 'line 2: unknown key "colour"'),
    ("fifo", "is a FIFO"),
    ("symlink", "is a symbolic link"),
])
def test_bad_user_file_fails_closed(built, tmp_path, case, needle):
    e = env_for(tmp_path, "visible_devices = 0\ncolour = red\n"
                if case == "garbage" else "visible_devices = 0\n",
                mode=0o666 if case == "writable" else 0o644)
    conf = e["GPUMUTEX_CONFIG"]
    if case == "missing":
        os.unlink(conf)
    elif case == "fifo":
        os.unlink(conf)
        os.mkfifo(conf)
    elif case == "symlink":
        os.rename(conf, conf + ".real")
        os.symlink(conf + ".real", conf)
    r = probe(e)
    assert r.stdout.startswith("rc=1\n"), (r.stdout, r.stderr)  # INVALID_VALUE
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("gpumutex:")]
    assert needle in line and conf in line, line
    assert not os.path.exists(tmp_path / "journal") or \
        not J.by_kind(J.parse(tmp_path / "journal"), "init")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make another user's file")
def test_user_file_of_another_user_is_not_trusted(built, tmp_path):
    e = env_for(tmp_path, "visible_devices = 0\n")
    os.chown(e["GPUMUTEX_CONFIG"], 4001, 4001)
    r = probe(e)
    assert r.stdout.startswith("rc=1\n"), r
    assert "owned by uid 4001, so it is not trusted" in r.stderr


def test_doctor_on_this_shell(built, tmp_path):
    e = fake_driver_env(tmp_path, LD_PRELOAD=LIB)
    r = subprocess.run([GM, "doctor"], env=e, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "LD_PRELOAD has" in r.stdout and "from the environment" in r.stdout
    j = json.loads(subprocess.run([GM, "doctor", "--json"], env=e,
                                  capture_output=True, text=True).stdout)
    assert j["queued"] and j["preload"] == "LD_PRELOAD" and not j["enforce"]
    assert j["config_source"] == "environment" and j["visible_devices"] == [0, 1]
    # Neither preloaded nor configured.
    bare = {k: v for k, v in e.items()
            if k != "LD_PRELOAD" and not k.startswith("GPUMUTEX_")}
    r = subprocess.run([GM, "doctor"], env=bare, capture_output=True, text=True)
    assert r.returncode == 1 and "not preloaded" in r.stdout \
        and "not configured" in r.stdout, r.stdout


def test_install_refusals(built, tmp_path):
    r = subprocess.run([GM, "install", "--visible-devices", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "only --system is supported" in r.stderr
    if os.geteuid() == 0:
        r = subprocess.run([GM, "install", "--system", "--visible-devices", "0"],
                           capture_output=True, text=True, user=4001, group=4001)
        assert r.returncode == 1 and "only root" in r.stderr, r.stderr
    # --root with --dry-run changes nothing there.
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    r = subprocess.run([GM, "install", "--system", "--root", str(root),
                        "--visible-devices", "0,1", "--dry-run"],
                       capture_output=True, text=True)
    if os.geteuid() == 0:
        assert r.returncode == 0 and "would write" in r.stdout, r
        assert os.listdir(root / "etc") == []


def test_doctor_names_stale_tickets(built, tmp_path):
    """A waiter killed while queued leaves its (dead) ticket: doctor
    counts it as stale and harmless, and still says the shell queues."""
    import select
    import signal
    e = fake_driver_env(tmp_path, LD_PRELOAD=LIB, GPUMUTEX_VISIBLE_DEVICES="0")

    def until(f, needle):
        got = b""
        while needle not in got:
            r, _, _ = select.select([f], [], [], 60)
            assert r, f"no {needle!r} (hang)"
            chunk = os.read(f.fileno(), 4096)
            assert chunk, got
            got += chunk

    h = subprocess.Popen([PROBE, "hold"], env=e, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    until(h.stdout, b"ready")
    w = subprocess.Popen([PROBE, "work", "1"], env=e, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    until(w.stderr, b"waits for")
    w.send_signal(signal.SIGKILL)
    w.wait()
    r = subprocess.run([GM, "doctor"], env=e, capture_output=True, text=True)
    h.stdin.close()
    h.wait(timeout=60)
    assert r.returncode == 0, r.stdout
    assert "1 stale ticket and 0 temporary names" in r.stdout, r.stdout
