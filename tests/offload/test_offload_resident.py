"""Residency (src/offload/resid.c, docs/offload-residency.md): operands kept
on the GPU between calls while their host memory is unchanged, under the
CPU test backend.

residcheck (tests/offload/residcheck.c) makes a matrix resident, changes
it one way per case (a write by this or another thread, read(2), recv,
pread, fork, MADV_DONTNEED, munmap and a new mapping at the same address,
mremap, shared memory written by another process, a transparent huge
page, an output read back by the next call and changed, mprotect, the
same matrix as both operands of one call), and
compares every result with a plain loop's: a stale device copy would give
a wrong result (each case but "reuse" and "shared" reports WRONG with the
tracker's clean() forced to 1). The copies are the test backend's journal
("to_device" lines)."""
import pathlib
import subprocess

import pytest

import ofront as F

pytestmark = F.needs_lapack
PROG = F.T / "residcheck"


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()
    subprocess.run(["make", "-C", str(F.REPO), "-s",
                    str(PROG.relative_to(F.REPO)),
                    str((F.T / "wtprobe").relative_to(F.REPO))],
                   check=True, stdout=subprocess.DEVNULL)


needs_tracking = pytest.mark.skipif(not F.tracking(), reason=F.NO_TRACKING)


def run(tmp, case, **extra):
    # Every operand tracked (the 2 MiB matrix is below the default 4 MiB).
    extra.setdefault("GPU_OFFLOAD_RESIDENT_MIN", 0)
    e = F.env(tmp, "gpu", GPU_OFFLOAD_MIN_FLOPS=0, GPU_OFFLOAD_SUMMARY=1,
              **extra)
    j = pathlib.Path(tmp) / "be.journal"
    if j.exists():
        j.unlink()
    p = subprocess.run([str(PROG), case], env=e, capture_output=True,
                       text=True, timeout=300)
    copies = sum(1 for r in F.journal(tmp) if r[0] == "to_device")
    return p, copies


CASES = subprocess.run([str(PROG), "list"], capture_output=True, text=True
                       ).stdout.split() if PROG.exists() else [
    "reuse", "write", "thread", "read", "recv", "pread", "fork", "dontneed",
    "remap", "mremap", "shared", "thp", "output", "mprotect", "twice"]


@pytest.mark.parametrize("case", CASES)
def test_changed_resident_matrix_gives_the_cpu_result(tmp_path, case):
    p, _ = run(tmp_path, case)
    assert p.returncode == 0 and p.stdout.strip() == f"{case} ok", \
        p.stdout + p.stderr


@pytest.mark.parametrize("case", ["write", "fork", "output", "dontneed"])
def test_verify_mode_covers_resident_operands(tmp_path, case):
    # Verify mode computes on the GPU (resident operands included) and on
    # the CPU and compares: no mismatch, and fewer copies than with
    # residency off (the resident operands were used).
    p, on = run(tmp_path, case, GPU_OFFLOAD_VERIFY=1)
    assert p.returncode == 0 and f"{case} ok" in p.stdout, p.stdout + p.stderr
    assert "mismatch" not in p.stderr and "differ" not in p.stderr, p.stderr
    p, off = run(tmp_path, case, GPU_OFFLOAD_VERIFY=1, GPU_OFFLOAD_RESIDENT=0)
    assert p.returncode == 0, p.stdout + p.stderr
    if F.tracking():
        assert on < off, (on, off)


@needs_tracking
def test_unchanged_operand_is_not_copied_again(tmp_path):
    p, on = run(tmp_path, "reuse")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "gpu-offload: residency: on; 2 copies avoided" in p.stderr, p.stderr
    p, off = run(tmp_path, "reuse", GPU_OFFLOAD_RESIDENT=0)
    assert p.returncode == 0, p.stdout + p.stderr
    # 4 calls of A (2 MiB) and B: A copied on the first two only.
    assert off == 8 and on == off - 2, (on, off)
    assert "residency:" not in p.stderr, p.stderr   # off on purpose: quiet


@needs_tracking
def test_shared_memory_is_never_resident(tmp_path):
    p, on = run(tmp_path, "shared")
    assert p.returncode == 0, p.stdout + p.stderr
    _, off = run(tmp_path, "shared", GPU_OFFLOAD_RESIDENT=0)
    assert on == off, (on, off)


@needs_tracking
def test_operands_never_reused_are_never_tracked(tmp_path):
    # Fresh matrices every call: none is armed (no write-protection, no
    # userfaultfd registration of their memory: the kernel's PAGEMAP_SCAN
    # says so, PAGE_IS_WPALLOWED), and each is copied once, as without
    # residency.
    p, on = run(tmp_path, "fresh")
    assert p.returncode == 0 and "fresh ok" in p.stdout, p.stdout + p.stderr
    _, off = run(tmp_path, "fresh", GPU_OFFLOAD_RESIDENT=0)
    assert on == off, (on, off)


@needs_tracking
def test_operands_below_the_minimum_are_not_kept(tmp_path):
    # The default minimum (4 MiB) leaves the 2 MiB matrix alone: copied
    # every call, as with residency off.
    p, on = run(tmp_path, "small", GPU_OFFLOAD_RESIDENT_MIN="")
    # ... and the tracker opened no descriptor (residcheck looks).
    assert p.returncode == 0 and "small ok" in p.stdout, p.stdout + p.stderr
    _, off = run(tmp_path, "reuse", GPU_OFFLOAD_RESIDENT=0)
    assert on == off == 8, (on, off)
    p, on = run(tmp_path, "reuse", GPU_OFFLOAD_RESIDENT_MIN=2 << 20)
    assert on == 6, on


@needs_tracking
def test_report_shows_bytes_moved_and_saved(tmp_path):
    # gpu-offload report: per operation and in total, what the GPU calls
    # copied and what residency did not copy; together they are what the
    # same program copies with residency off.
    import re
    got = {}
    for mode, extra in (("on", {}), ("off", {"GPU_OFFLOAD_RESIDENT": 0})):
        tr = tmp_path / ("tr-" + mode)
        p, _ = run(tmp_path, "reuse", GPU_OFFLOAD_TRACE=str(tr), **extra)
        assert p.returncode == 0, p.stdout + p.stderr
        rep = subprocess.run([str(F.BUILD / "gpu-offload"), "report", str(tr)],
                             capture_output=True, text=True, timeout=60)
        assert rep.returncode == 0, rep.stdout + rep.stderr
        head = next(l for l in rep.stdout.splitlines() if l.startswith("op "))
        row = next(l for l in rep.stdout.splitlines() if l.startswith("dgemm "))
        m = re.search(r"copies: ([0-9.]+) MB moved; ([0-9.]+) MB saved", rep.stdout)
        assert m, rep.stdout
        got[mode] = (float(m.group(1)), float(m.group(2)))
        assert head.split()[11:15] == ["moved", "MB", "saved", "MB"], head
        assert float(row.split()[8]) == got[mode][0], rep.stdout
        assert float(row.split()[9]) == got[mode][1], rep.stdout
    a_mb = 512 * 512 * 8 / 1e6
    assert got["off"][1] == 0, got
    assert got["on"][1] == pytest.approx(2 * a_mb, abs=1e-3), got
    assert got["on"][0] + got["on"][1] == pytest.approx(got["off"][0], abs=2e-3), got
