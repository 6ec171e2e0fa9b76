"""The copy engine of libgpuoffload-cuda.so (src/offload/cuda/xfer.c,
xpool.c) against the fake driver tests/offload/cuda/fakedev.c: chunked,
multi-buffered 2-D copies of every shape, staged results with commit and
discard, injected copy failures, registration, the staging bound and
trim, worker threads gone after stop (xfertest.c checks each byte)."""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
T = REPO / "build" / "tests" / "offload" / "cuda"


def run(prog):
    subprocess.run(["make", "-C", str(REPO), "-s", "xfer-tests"], check=True,
                   stdout=subprocess.DEVNULL)
    env = dict(os.environ, LD_LIBRARY_PATH=str(T / "fakedev"),
               ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")
    return subprocess.run([str(T / prog)], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("prog", ["xfertest", "xfertest-san"])
def test_copy_engine_moves_exactly_the_bytes_it_should(prog):
    p = run(prog)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "fake driver" in p.stdout and " 0 failed" in p.stdout, p.stdout
    assert "ERROR: AddressSanitizer" not in p.stderr
    assert "runtime error" not in p.stderr, p.stderr
