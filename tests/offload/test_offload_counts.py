"""The exit summary's per-reason counts (GPU_OFFLOAD_SUMMARY=1), which
small and nested calls keep per thread (src/offload/count.h): exact for a
single-threaded program, for threads that exited before the summary, and
in a fork child (which counts its own calls only); the same counts when
traced (the full path, every call recorded). countcheck also checks the
results and errno (the real function's) on every call."""
import re
import subprocess

import pytest

import ofront as F

pytestmark = F.needs_lapack

COUNTCHECK = str(F.T / "countcheck")
GPU_OFFLOAD = str(F.BUILD / "gpu-offload")


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()


def summaries(err):
    out = []
    for ln in err.splitlines():
        m = re.match(r"gpu-offload: summary: (\d+) calls seen, 0 decided, "
                     r"0 offloaded .*; reasons:(.*)$", ln)
        assert m, err
        out.append((int(m.group(1)), dict(
            (k, int(v)) for k, v in (kv.split("=") for kv in m.group(2).split()))))
    return out


def expect(rounds):
    """A round: ddot_ and dgetrs_ (small), dgetrs_'s 3 ddot_ and 1
    dgemm_ (nested), a dgeqrf_ workspace query."""
    n = {"small": 2 * rounds, "nested": 4 * rounds, "workspace": rounds}
    return (7 * rounds, {k: v for k, v in n.items() if v})


@pytest.mark.parametrize("args", [(1025, 0, 0, 0), (1500, 2000, 700, 333)],
                         ids=["one-thread", "threads-and-fork"])
@pytest.mark.parametrize("traced", [False, True], ids=["light", "traced"])
def test_summary_counts_every_call_exactly(tmp_path, args, traced):
    a, r, c, d = args
    extra = {"GPU_OFFLOAD_TRACE": str(tmp_path / "tr")} if traced else {}
    p = subprocess.run([COUNTCHECK] + [str(x) for x in args],
                       env=F.env(tmp_path, "", GPU_OFFLOAD_SUMMARY="1", **extra),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stdout + p.stderr
    # The child's summary comes first (the parent waits for it), then the
    # parent's: main thread, exited threads, its calls after the fork.
    assert summaries(p.stderr) == [expect(c), expect(a + 3 * r + d)]
    if traced:
        rep = subprocess.run([GPU_OFFLOAD, "report", str(tmp_path / "tr")],
                             capture_output=True, text=True, timeout=300)
        assert rep.returncode == 0, rep.stderr
        # (a child that made no call wrote no trace file)
        assert "%d processes, %d calls" % (2 if c else 1, 7 * (a + 3 * r + c + d)) \
            in rep.stdout
