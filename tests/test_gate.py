"""The load gate (tools/gate.sh) must pass a clean library and fail each
deliberately bad build, naming the property that failed."""

import os
import shutil
import subprocess

import pytest

from conftest import REPO, readme_build_line

GATE = os.path.join(REPO, "tools", "gate.sh")

GOOD_C = r"""
int cuInit(unsigned f) { (void)f; return 0; }
int dlsym_like_helper(void);
"""

VERSION_SCRIPT = "{ global: cuInit; local: *; };\n"


def build(tmp, name, source, extra=()):
    src = tmp / f"{name}.c"
    src.write_text(source)
    vs = tmp / "exports.map"
    vs.write_text(VERSION_SCRIPT)
    out = tmp / f"{name}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(src),
                    "-Wl,-soname," + name + ".so",
                    "-Wl,--version-script=" + str(vs), *extra], check=True)
    return str(out)


def gate(lib, tmp, exports=("cuInit",)):
    lst = tmp / "exports.list"
    lst.write_text("# documented exports\n" + "\n".join(exports) + "\n")
    return subprocess.run(["bash", GATE, lib, str(lst)], capture_output=True,
                          text=True)


def test_clean_library_passes(tmp_path):
    r = gate(build(tmp_path, "good", GOOD_C), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "gate: ok" in r.stdout


def test_verdict_does_not_race_a_long_dynamic_section(tmp_path):
    """The gate once piped readelf's output into `grep -q` under pipefail:
    grep leaves at the first match, the writer then dies of SIGPIPE, and a
    clean library "has no SONAME" (seen once in CI, under load). A readelf
    whose output is far longer than a pipe holds makes that certain."""
    real = shutil.which("readelf")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "readelf").write_text(
        "#!/bin/sh\n"
        f"{real} \"$@\" || exit\n"
        "case $1 in -dW) yes ' 0x0000000000000000 (NULL) 0x0' | head -n 50000 ;; esac\n")
    (fake / "readelf").chmod(0o755)
    lib = build(tmp_path, "good", GOOD_C)
    lst = tmp_path / "exports.list"
    lst.write_text("cuInit\n")
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    r = subprocess.run(["bash", GATE, lib, str(lst)], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "gate: ok" in r.stdout
    # And a library with a RUNPATH is still caught behind the long output.
    bad = build(tmp_path, "runpath", GOOD_C,
                ["-Wl,-rpath,/opt/x", "-Wl,--enable-new-dtags"])
    r = subprocess.run(["bash", GATE, bad, str(lst)], capture_output=True,
                       text=True, env=env)
    assert r.returncode != 0 and "RUNPATH" in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("case,extra,source,message", [
    ("cxx", ["-Wl,--no-as-needed", "-lstdc++"], GOOD_C, "NEEDED libstdc++"),
    ("runpath", ["-Wl,-rpath,/opt/x", "-Wl,--enable-new-dtags"], GOOD_C,
     "RUNPATH"),
    ("rpath", ["-Wl,-rpath,/opt/x", "-Wl,--disable-new-dtags"], GOOD_C,
     "RPATH"),
    ("newsym", [], GOOD_C + r"""
#include <sys/stat.h>
int cuGetProcAddress(void) { struct stat s; return fstat(0, &s); }
""", "newer than GLIBC_2.17"),
    ("libm", ["-Wl,--no-as-needed", "-lm"], GOOD_C, "NEEDED libm.so.6"),
    # On glibc < 2.38 this references strtol@GLIBC_2.2.5 and fails by
    # name; on a newer host it references __isoc23_strtol@GLIBC_2.38.
    ("c23", [], "#define _GNU_SOURCE\n#include <stdlib.h>\n" + GOOD_C + r"""
long cuGetProcAddress(const char *s) { return strtol(s, 0, 10); }
""", "strtol"),
])
def test_bad_builds_fail(tmp_path, case, extra, source, message):
    if case == "newsym":
        # fstat is a real function only since glibc 2.33; on an older build
        # machine this case cannot be made, and says so.
        libc = subprocess.run(["ldd", "--version"], capture_output=True,
                              text=True).stdout.split("\n")[0]
        if float(libc.split()[-1]) < 2.33:
            pytest.skip(f"build machine glibc too old to make the case: {libc}")
    lib = build(tmp_path, case, source, extra)
    r = gate(lib, tmp_path)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert message in r.stderr
    # Every failure also says what to do about it.
    assert "gate:   fix: " in r.stderr, r.stderr


def test_extra_export_fails(tmp_path):
    src = GOOD_C + "int extra_symbol(void) { return 1; }\n"
    (tmp_path / "exports.map").write_text("{ global: cuInit; extra_symbol; local: *; };\n")
    out = tmp_path / "extra.so"
    (tmp_path / "extra.c").write_text(src)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out),
                    str(tmp_path / "extra.c"), "-Wl,-soname,extra.so",
                    "-Wl,--version-script=" + str(tmp_path / "exports.map")],
                   check=True)
    r = gate(str(out), tmp_path)
    assert r.returncode == 1
    assert "undocumented symbols: extra_symbol" in r.stderr


def test_missing_export_and_soname(tmp_path):
    (tmp_path / "x.c").write_text(GOOD_C)
    out = tmp_path / "nosoname.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out),
                    str(tmp_path / "x.c")], check=True)
    r = gate(str(out), tmp_path, exports=("cuInit", "dlsym"))
    assert r.returncode == 1
    assert "no SONAME" in r.stderr
    assert "does not export documented symbols: dlsym" in r.stderr


def test_readme_one_line_build_passes_the_gate(tmp_path):
    """The README's build without make, run as written in a copy of src/
    (no build/ directory, no Makefile), gives a library the gate accepts;
    docs/preload.md gives the same line."""
    line = readme_build_line()
    with open(os.path.join(REPO, "docs", "preload.md")) as f:
        assert "    " + line + "\n" in f.read()
    shutil.copytree(os.path.join(REPO, "src"), tmp_path / "src")
    r = subprocess.run(line, shell=True, cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["bash", GATE, str(tmp_path / "libgpumutex.so"),
                        os.path.join(REPO, "src", "preload", "exports.list")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gate: ok" in r.stdout
