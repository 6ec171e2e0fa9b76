"""The package list is one list: the README's `apt-get install -y ...` line
names exactly the packages of .ci/packages, which .ci/run installs and
tools/distro-build.sh bootstraps its fresh root with."""
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent


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
