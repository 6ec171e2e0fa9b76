"""The package list is one list: the README's `apt-get install -y ...` line
names exactly the packages of .ci/packages, which .ci/run installs and
tools/distro-build.sh bootstraps its fresh root with."""
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent
MARKER = "# -- host-only test packages (not in the distro-check roots) --"


def ci_packages():
    names = []
    for line in (REPO / ".ci" / "packages").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert re.fullmatch(r"[a-z0-9][a-z0-9+.-]*", line), line
            names.append(line)
    return names


def readme_packages():
    lines = [m.group(1) for m in re.finditer(r"`apt-get install -y ([^`]*)`",
                                             (REPO / "README.md").read_text())]
    assert len(lines) == 1, f"want one apt-get install line in README.md: {lines}"
    return lines[0].split()


def test_list_has_no_duplicates():
    names = ci_packages()
    assert names and len(names) == len(set(names)), names


def test_readme_line_is_the_list():
    readme, ci = readme_packages(), ci_packages()
    assert not [n for n in readme if n.startswith("-")], readme
    assert sorted(readme) == sorted(ci), (
        f"README.md only: {sorted(set(readme) - set(ci))}; "
        f".ci/packages only: {sorted(set(ci) - set(readme))}")


def test_ci_run_installs_the_list():
    run = (REPO / ".ci" / "run").read_text()
    assert ".ci/packages" in run and "--no-install-recommends" in run


def distro_packages():
    """The lines above the host-only marker: what the distro-check roots
    are bootstrapped with."""
    text = (REPO / ".ci" / "packages").read_text()
    return [ln.split("#", 1)[0].strip() for ln in text.split(MARKER + "\n")[0].splitlines()
            if ln.split("#", 1)[0].strip()]


def test_host_only_packages_are_below_the_marker():
    lines = (REPO / ".ci" / "packages").read_text().splitlines()
    assert lines.count(MARKER) == 1
    roots = distro_packages()
    assert roots and set(roots) < set(ci_packages())
    for host_only in ("python3-numpy", "python3-scipy", "gfortran"):
        assert host_only in ci_packages() and host_only not in roots


def test_distro_build_bootstraps_only_above_the_marker():
    sh = (REPO / "tools" / "distro-build.sh").read_text()
    assert MARKER in sh
    import subprocess
    line = [ln for ln in sh.splitlines() if ln.startswith("mapfile -t packages")]
    assert len(line) == 1
    cmd = line[0].split("< <(", 1)[1].rsplit(")", 1)[0]
    out = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == distro_packages()


# ---- tools/packages.sh, the first step of `make demo` and `make check` ----

def run_check(tmp_path, installed, uid, env_extra=None, provides=""):
    """tools/packages.sh with a stand-in dpkg-query that reports `installed`
    as installed (and knows nothing else; asked for every package, it
    answers "installed PROVIDES" with `provides`), an `id -u` answering
    `uid`, and an apt-get that only records its arguments."""
    import os
    import subprocess
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "apt.log"
    (bin_ / "dpkg-query").write_text(
        "#!/bin/sh\nshift 2\n[ $# -eq 0 ] && echo 'installed %s'\n"
        "for p; do case ' %s ' in *\" $p \"*) "
        "echo \"$p installed\";; esac; done\n" % (provides, " ".join(installed)))
    (bin_ / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (bin_ / "apt-get").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    # (`make check PACKAGES=no` puts PACKAGES into the tests' environment.)
    env = {k: v for k, v in os.environ.items() if k != "PACKAGES"}
    env.update(PATH=f"{bin_}:/usr/bin:/bin", **(env_extra or {}))
    r = subprocess.run(["sh", str(REPO / "tools" / "packages.sh")], env=env,
                       capture_output=True, text=True)
    return r, (log.read_text() if log.exists() else "")


def test_nothing_missing_says_nothing(tmp_path):
    r, apt = run_check(tmp_path, ci_packages(), 1000)
    assert (r.returncode, r.stdout, r.stderr, apt) == (0, "", "", "")


def test_missing_as_a_user_prints_the_apt_get_line_and_exits_2(tmp_path):
    r, apt = run_check(tmp_path, ci_packages()[2:], 1000)
    assert r.returncode == 2 and apt == ""
    line = [ln for ln in r.stderr.splitlines() if "apt-get install -y" in ln]
    assert len(line) == 1 and line[0].split()[3:] == ci_packages()[:2], r.stderr


def test_missing_as_root_says_what_it_installs_and_installs_it(tmp_path):
    r, apt = run_check(tmp_path, ci_packages()[1:], 0)
    assert r.returncode == 0, r.stderr
    assert ci_packages()[0] in r.stdout and "installing" in r.stdout
    assert apt.splitlines() == ["update -q",
                                f"install -y -q --no-install-recommends {ci_packages()[0]}"]


def test_a_name_an_installed_package_provides_is_not_missing(tmp_path):
    """Debian 13 installs libtcmalloc-minimal4 as libtcmalloc-minimal4t64,
    which provides the old name: not missing (before, every `make check`
    on trixie asked to install it again, and a user's exited 2)."""
    have = [p for p in ci_packages() if p != "libtcmalloc-minimal4"]
    r, apt = run_check(tmp_path, have, 1000,
                       provides="libtcmalloc-minimal4 (= 2.16-1), libfoo")
    assert (r.returncode, r.stdout, r.stderr, apt) == (0, "", "", "")
    (tmp_path / "again").mkdir()
    r, apt = run_check(tmp_path / "again", have, 1000, provides="libfoo (= 1)")
    assert r.returncode == 2 and "libtcmalloc-minimal4" in r.stderr


def test_packages_no_skips_the_check(tmp_path):
    r, apt = run_check(tmp_path, [], 1000, {"PACKAGES": "no"})
    assert (r.returncode, apt) == (0, "")
