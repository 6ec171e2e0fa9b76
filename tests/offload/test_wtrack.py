"""Write tracking for gpu-offload's residency (src/offload/wtrack/,
docs/offload-residency.md): bench/offload/wtrack_probe.c's cases, each an
observable outcome (the tracker's answer after a real write, the data
read back, the program's own userfaultfd calls' results): writes by
another thread, read(2)/recv/pread into the range, fork (child and
parent), MADV_DONTNEED, munmap and a new mapping at the same address,
mremap, mprotect, shared memory refused, transparent huge pages, the
program's own userfaultfd, our descriptor closed by the program. Run as
root and as an unprivileged user (vm.unprivileged_userfaultfd=0 leaves
only user-mode-only userfaultfd: the kernel's own writes must still be
seen). Skipped where the kernel lacks the mechanism (before Linux 6.7)."""
import os
import shutil
import subprocess

import pytest

import ofront as F

PROBE = F.BUILD / "tests" / "offload" / "wtprobe"


@pytest.fixture(scope="module", autouse=True)
def _build():
    subprocess.run(["make", "-C", str(F.REPO), "-s",
                    str(PROBE.relative_to(F.REPO))],
                   check=True, stdout=subprocess.DEVNULL)


def run(prefix=()):
    p = subprocess.run([*prefix, str(PROBE), "--cases"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 77:
        pytest.skip(p.stdout.strip())
    return p


def test_every_case_seen():
    p = run()
    bad = [l for l in p.stdout.splitlines() if l.endswith("FAIL")]
    assert p.returncode == 0 and not bad, p.stdout + p.stderr
    # The cases the residency depends on were all run.
    for case in ("read(2): seen", "recv: seen", "pread: seen",
                 "fork: parent's write after fork seen",
                 "MADV_DONTNEED: seen",
                 "munmap + new mapping same address: not clean",
                 "mremap (moved or grown): old range not clean",
                 "MAP_SHARED anonymous refused", "THP write seen",
                 "write, other thread: seen"):
        assert any(l.startswith(case) and l.endswith(" ok")
                   for l in p.stdout.splitlines()), case


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to drop to an unprivileged user")
def test_unprivileged_user_kernel_writes_seen():
    p = run(("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "read(2): seen" in p.stdout and "recv: seen" in p.stdout
