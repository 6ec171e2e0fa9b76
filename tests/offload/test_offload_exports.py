"""libgpuoffload.so's exports and load gate: exactly the generated names
(every operation of the table, in its precisions, Fortran and CBLAS, in
the three naming schemes) and the library's own (src/offload/
exports.list: the pause switch), glibc 2.17, libc/libdl only."""
import shutil
import subprocess

import pytest

import ofront as F


def exports():
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(F.LIB)],
                         capture_output=True, text=True, check=True).stdout
    names = set()
    for ln in out.splitlines():
        f = ln.split()
        if len(f) >= 8 and f[6] != "UND" and f[4] in ("GLOBAL", "WEAK") \
                and f[3] not in ("SECTION", "FILE"):
            names.add(f[7].split("@")[0])
    return names


def test_gate_passes_with_the_generated_list():
    F.build()
    lst = F.BUILD / "offload" / "gen" / "exports.list"
    p = subprocess.run(["bash", str(F.REPO / "tools" / "gate.sh"), str(F.LIB), str(lst)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "the 529 names of" in p.stdout
    assert "gpu_offload_pause" in lst.read_text().split()


def test_every_name_of_every_scheme_is_exported():
    F.build()
    got = exports()
    assert len(got) == 529 and "gpu_offload_pause" in got
    for base in ("dgemm", "zherk", "ctrsm", "sgemv", "daxpy"):
        for name in (f"{base}_", f"cblas_{base}", f"scipy_{base}_",
                     f"scipy_cblas_{base}", f"scipy_{base}_64_", f"scipy_cblas_{base}64_"):
            assert name in got, name
    for base in ("dgesv", "zheevd", "sgesdd", "cgels", "dsyev", "zpotrf"):
        for name in (f"{base}_", f"scipy_{base}_", f"scipy_{base}_64_"):
            assert name in got, name
        assert f"cblas_{base}" not in got          # LAPACK has no CBLAS
    assert "zdotc_" in got and "cblas_zdotc_sub" in got and "scipy_cblas_zdotc_sub64_" in got
    assert not [n for n in got if n.startswith("gpo")]  # the module's own: hidden
    assert not [n for n in got if n.startswith(("zsyev", "dheev", "dhemm"))]


@pytest.mark.skipif(shutil.which("git") is None or not (F.REPO / ".git").exists(),
                    reason="needs a git checkout (the distro-check roots have no git)")
def test_generated_files_are_not_committed():
    tracked = subprocess.run(["git", "-C", str(F.REPO), "ls-files", "build"],
                             capture_output=True, text=True).stdout
    assert tracked == ""
