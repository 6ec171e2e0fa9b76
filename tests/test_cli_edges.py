"""The rough edges a newcomer hit, each checked on what the commands print
and return: one short job-id form everywhere and --job taking any unique
prefix; long values never cutting a message before its reason; labels cut
with an ellipsis; durations not rounded down; --until before --since
refused; an unwritable --svg/--html failing before any output; every
subcommand speaking under its full name with a one-line hint on usage
errors; the one-GPU --num-devices wording; install --quiet as run's;
doctor's wordings; the waiting line kept short."""

import json
import os
import re
import subprocess

import pytest

import jobs
from conftest import BUILD
from preloadlib import Holder, T, run
from preloadlib import built, env  # noqa: F401 (fixtures)
from synthlog import Log

GPUMUTEX = os.path.join(BUILD, "gpumutex")
HOLDER = os.path.join(BUILD, "tests", "lease-holder")
JOB_A = "3f9a0c1b22d4" + "a" * 20
JOB_B = "3f9a0c1b22d5" + "b" * 20


def gm(*args, env=None, **kw):
    return subprocess.run([GPUMUTEX, *args], capture_output=True, text=True,
                          timeout=120, env=env, **kw)


def two_jobs(lockdir):
    L = Log(lockdir)
    L.lease(0, JOB_A, "0", 1000, 1100, cmd="train.py")
    L.lease(0, JOB_B, "1", 1000, 1050, cmd="eval.py")
    L.write()


# ---- job ids ----------------------------------------------------------------

def test_one_short_job_form_and_prefixes(built, tmp_path):
    lockdir = str(tmp_path / "locks")
    two_jobs(lockdir)
    short = JOB_A[:12] + "..."
    log = gm("log", "--lock-dir", lockdir)
    assert log.returncode == 0, log.stderr
    assert short in log.stdout and JOB_A[:16] not in log.stdout
    rep = gm("report", "--lock-dir", lockdir, "--since", "@900",
             "--until", "@2000")
    assert short in rep.stdout and JOB_A[:16] not in rep.stdout
    svg = tmp_path / "p.svg"
    gm("report", "--lock-dir", lockdir, "--since", "@900", "--until", "@2000",
       "-q", "--svg", str(svg))
    assert f"job {short}" in svg.read_text()
    # --job: the short form as shown, or any unique prefix.
    for want in (short, JOB_A[:13], JOB_A):
        r = gm("log", "--json", "--lock-dir", lockdir, "--job", want)
        assert r.returncode == 0, r.stderr
        jobs_seen = {json.loads(line)["job"] for line in r.stdout.splitlines()}
        assert jobs_seen == {JOB_A}, (want, jobs_seen)
    amb = gm("log", "--lock-dir", lockdir, "--job", "3f9a")
    assert amb.returncode == 1 and amb.stdout == ""
    assert amb.stderr.startswith("gpumutex log: --job 3f9a names more than one job")
    none = gm("log", "--lock-dir", lockdir, "--job", "beef")
    assert none.returncode == 1 and none.stdout == ""
    assert none.stderr.startswith("gpumutex log: --job beef: no job")


def test_status_shows_the_short_form(built, lockdir, journal):
    env = jobs.job_env(lockdir, journal, devices="0", job=JOB_A)
    h = jobs.start(HOLDER, env, ready=True, hold=True)
    try:
        assert h.ready()
        out = gm("status", "--lock-dir", lockdir).stdout
        assert JOB_A[:12] + "..." in out and JOB_A[:16] not in out, out
    finally:
        h.release()
        assert h.wait() == 0


# ---- messages ---------------------------------------------------------------

def test_long_values_do_not_cut_the_reason(built, tmp_path):
    many = ",".join(str(i % 64) for i in range(10000))
    r = gm("init", "--lock-dir", str(tmp_path / "l"), "--visible-devices", many)
    assert r.returncode == 2
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith("gpumutex init: ")
    assert line.endswith("names GPU 0 twice; each index may appear once"), line
    assert "..." in line
    # A 3,800-byte path, below the 4,095 bytes a lock directory may have.
    deep = str(tmp_path) + "".join("/" + "d" * 99 for _ in range(38))
    deep = deep[:3800]
    assert len(deep) == 3800
    r = gm("init", "--lock-dir", deep, "--visible-devices", "0")
    assert r.returncode == 1
    assert r.stderr.strip().endswith("No such file or directory"), r.stderr
    s = gm("status", "--lock-dir", deep)
    assert s.returncode == 0
    assert s.stdout.strip().endswith("no job has used gpumutex here yet"), s.stdout


@pytest.mark.parametrize("sub", ["status", "log", "report", "sample", "metrics",
                                 "init", "doctor", "install", "uninstall", "run"])
def test_usage_errors_name_the_subcommand_and_hint(built, sub):
    r = gm(sub, "--no-such-flag")
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"gpumutex {sub}: ") and "--no-such-flag" in lines[0], lines
    assert lines[1:] == [f"Try 'gpumutex {sub} --help'."], lines
    assert r.stdout == ""


@pytest.mark.parametrize("sub", ["status", "log", "report", "metrics", "init"])
def test_missing_value_names_the_subcommand(built, sub):
    r = gm(sub, "--lock-dir")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"gpumutex {sub}: --lock-dir needs a value",
                                     f"Try 'gpumutex {sub} --help'."]


def test_unknown_command_is_one_line_and_a_hint(built):
    r = gm("statsu")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["gpumutex: unknown command 'statsu'",
                                     "Try 'gpumutex help'."]


def test_num_devices_above_one_gpu_wording(built, tmp_path):
    r = gm("run", "--visible-devices", "0", "--num-devices", "3",
           "--lock-dir", str(tmp_path / "l"), "--", "true")
    assert r.returncode == 2
    assert "only one GPU is managed" in r.stderr and "1 to 1" not in r.stderr


# ---- the report ---------------------------------------------------------------

def test_report_title_does_not_round_down(built, tmp_path):
    lockdir = str(tmp_path / "locks")
    L = Log(lockdir)
    L.lease(0, "j", "0", 1000.1, 1001.5)
    L.write()
    r = gm("report", "--lock-dir", lockdir, "--since", "@900", "--until", "@1002")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].endswith("(1.90s)"), r.stdout


def test_until_before_since_is_refused(built, tmp_path):
    r = gm("report", "--lock-dir", str(tmp_path), "--until", "1h", "--since", "30m")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("gpumutex report: --until 1h is before --since 30m")


@pytest.mark.parametrize("flag", ["--svg", "--html"])
def test_unwritable_picture_fails_before_any_output(built, tmp_path, flag):
    lockdir = str(tmp_path / "locks")
    two_jobs(lockdir)
    r = gm("report", "--lock-dir", lockdir, flag, "/nonexistent/x.out")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "gpumutex report: cannot write /nonexistent/x.out: No such file or directory"]


def test_picture_labels_cut_with_an_ellipsis(built, tmp_path):
    lockdir = str(tmp_path / "locks")
    L = Log(lockdir)
    label = "fakejob 2500 --steps 100000 --batch 64"
    # Leases from 2 s to 400 s long in a 2,000 s window: short ones cut.
    t = 1000
    for i, dur in enumerate((2, 5, 10, 20, 40, 80, 160, 400)):
        L.lease(0, f"j{i}", "0", t, t + dur, cmd=label)
        t += dur + 100
    L.write()
    svg = tmp_path / "p.svg"
    r = gm("report", "--lock-dir", lockdir, "--since", "@1000", "--until",
           "@3000", "-q", "--svg", str(svg))
    assert r.returncode == 0, r.stderr
    texts = re.findall(r'fill="#fff">([^<]*)</text>', svg.read_text())
    shown = [x for x in texts if x.startswith("fakej")]
    assert shown, texts
    cut = [x for x in shown if x != label]
    assert cut, shown  # some were too narrow for the whole label
    for x in cut:
        assert x.endswith("\u2026") and label.startswith(x[:-1]), x


# ---- install and doctor ------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="install --system needs root")
def test_install_quiet_takes_run_values(built, tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    base = ["install", "--system", "--root", str(root), "--dry-run"]
    for q in (["--quiet"], ["--quiet=1"], ["--quiet=0"]):
        r = gm(*base, *q, "--visible-devices", "0")
        assert r.returncode == 0, (q, r.stderr)
        assert re.search(r"quiet = [10]", r.stdout), r.stdout
    r = gm(*base, "--quiet=yes", "--visible-devices", "0")
    assert r.returncode == 2
    assert r.stderr.startswith('gpumutex install: --quiet="yes" is not valid'), r.stderr


def doctor(tmp_path, lockdir, devices):
    e = dict(os.environ, GPUMUTEX_VISIBLE_DEVICES=devices,
             GPUMUTEX_LOCK_DIR=lockdir,
             LD_LIBRARY_PATH=os.path.join(BUILD, "tests", "fakecuda"))
    return gm("doctor", env=e).stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="root's directory")
def test_doctor_wordings(built, tmp_path, journal):
    lockdir = str(tmp_path / "locks")
    out = doctor(tmp_path, lockdir, "0")
    assert "GPU 0 managed, 1 GPU per job" in out, out
    assert "GPUs 0, 1 per job" not in out
    # Made by a job run as root: not "prepared by root".
    env = jobs.job_env(lockdir, journal, devices="0")
    h = jobs.start(HOLDER, env, ready=True, hold=True)
    assert h.ready()
    h.release()
    assert h.wait() == 0
    out = doctor(tmp_path, lockdir, "0")
    assert "prepared by root" not in out
    assert "made by a job run as root, not by `gpumutex init`" in out, out
    assert gm("init", "--lock-dir", lockdir, "--visible-devices", "0").returncode == 0
    out = doctor(tmp_path, lockdir, "0,1")
    assert "(prepared by root: gpumutex init)" in out, out
    assert "GPUs 0,1 managed, 1 GPU per job" in out, out


# ---- the waiting line ---------------------------------------------------------

def test_waiting_line_stays_short(env):
    """A holder with the longest job id and a long command line: the line
    is at most 200 characters and still names the holder."""
    long_job = "x" * 64
    h = Holder(dict(env, GPUMUTEX_JOB=long_job, GPUMUTEX_NUM_DEVICES="2"),
               extra=["--" + "a" * 300])
    try:
        res = run([T / "cuprobe", "dlopen"],
                  dict(env, GPUMUTEX_TIMEOUT="0.2", CUPROBE_TOUCH="1"))
        lines = [l for l in res.stderr.splitlines() if "waits for" in l]
        assert len(lines) == 1, res.stderr
        assert len(lines[0]) <= 200, (len(lines[0]), lines[0])
        assert "held by job " + long_job[:12] + "..." in lines[0], lines[0]
    finally:
        assert h.release() == 0
