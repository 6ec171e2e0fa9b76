"""`make install` and `make uninstall` into a DESTDIR: the installed
commands work as the README says, from the installed files alone (a
contended pair of jobs on the fake driver takes turns through the installed
gpumutex-run and library), `gpumutex install --system` copies the installed
library, and `make uninstall` leaves nothing behind."""
import filecmp
import os
import subprocess
import sys

from conftest import BUILD, REPO

sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
import journal as J  # noqa: E402

PREFIX = "/usr/local"
ENV = {k: v for k, v in os.environ.items()
       if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")
       and not k.startswith(("GPUMUTEX_", "LD_PRELOAD"))}


def make(*args):
    r = subprocess.run(["make", "-C", REPO, "-s"] + list(args), env=ENV,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def files_under(top):
    out = set()
    for d, dirs, names in os.walk(top):
        out |= {os.path.relpath(os.path.join(d, n), top) for n in dirs + names}
    return out


def test_install_runs_a_contended_pair_and_uninstall_removes_it(tmp_path):
    dest = str(tmp_path / "dest")
    make("fakecuda", "build/demo/fakejob")
    make("install", "DESTDIR=" + dest, "PREFIX=" + PREFIX)
    bindir = dest + PREFIX + "/bin"
    libdir = dest + PREFIX + "/lib/gpumutex"
    for cmd in ("gpumutex", "gpumutex-run", "gpu-offload"):
        assert os.readlink(os.path.join(bindir, cmd)) == "../lib/gpumutex/" + cmd
    for f in ("libgpumutex.so", "libgpuoffload.so", "libgpuoffload-cuda.so",
              "libgpuoffload-test.so", "gpu-offload-calib"):
        assert filecmp.cmp(os.path.join(libdir, f), os.path.join(BUILD, f),
                           shallow=False), f
    assert os.path.isfile(dest + PREFIX + "/share/doc/gpumutex/README.md")

    # The README's usage: `gpumutex-run -- CMD`, with the command on PATH.
    journal = str(tmp_path / "journal")
    env = dict(ENV, PATH=bindir + ":" + ENV.get("PATH", "/usr/bin:/bin"),
               LD_LIBRARY_PATH=os.path.join(BUILD, "tests", "fakecuda"),
               FAKECUDA_NUM_DEVICES="2", FAKECUDA_JOURNAL=journal)
    job = ["gpumutex-run", "--visible-devices", "0", "--lock-dir",
           str(tmp_path / "locks"), "--", os.path.join(BUILD, "demo", "fakejob"),
           "30"]
    procs = [subprocess.Popen(job, env=env) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    ev = J.parse(journal)
    J.check_exclusive(ev)
    inits = J.by_kind(ev, "init")
    assert len(inits) == 2 and all(e["cvd"] == "0" for e in inits), inits
    # The library preloaded was the installed one.
    r = subprocess.run(["gpumutex-run", "--visible-devices", "0", "--",
                        "sh", "-c", 'echo "$LD_PRELOAD"'], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip().split(":")[0]) == \
        os.path.realpath(os.path.join(libdir, "libgpumutex.so")), r.stdout
    r = subprocess.run(["gpu-offload", "--help"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

    # `gpumutex install --system` (into a root directory) copies the
    # installed library, found beside the installed program.
    if os.geteuid() == 0:
        root = str(tmp_path / "root")
        for d in ("etc", "tmp"):
            os.makedirs(os.path.join(root, d))
        r = subprocess.run(["gpumutex", "install", "--system", "--root", root,
                            "--visible-devices", "0"], env=env,
                           capture_output=True, text=True)
        # (It stops after the copy: the bare root has no /bin/true to
        # load the library into.)
        assert filecmp.cmp(root + PREFIX + "/lib/gpumutex/libgpumutex.so",
                           os.path.join(libdir, "libgpumutex.so"), shallow=False), r.stderr

    make("uninstall", "DESTDIR=" + dest, "PREFIX=" + PREFIX)
    left = files_under(dest)
    assert not any(p.startswith(("usr/local/lib/gpumutex", "usr/local/share/doc/gpumutex"))
                   or p.startswith("usr/local/bin/") for p in left), left
