"""The copy engine reads only what the program handed over
(docs/offload.md, "What the library reads"): opcheck's every operation,
under another allocator (jemalloc, tcmalloc preloaded before the
library: other chunk layouts, no glibc malloc slack after a buffer) and
with every operand between inaccessible pages (OPCHECK_GUARD=1: it ends
where a PROT_NONE page begins): no crash, nothing outside an operand
written (CLOBBERED), the CPU path bit-identical to running without the
library, the GPU path (the CPU test backend) right."""
import os
import subprocess

import pytest

import ofront as F

pytestmark = F.needs_lapack

OPCHECK = str(F.T / "opcheck")
LIBDIR = "/usr/lib/x86_64-linux-gnu"
ALLOC = {"jemalloc": os.path.join(LIBDIR, "libjemalloc.so.2"),
         "tcmalloc": os.path.join(LIBDIR, "libtcmalloc_minimal.so.4")}


@pytest.fixture(scope="module", autouse=True)
def _build():
    F.build()


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    out = tmp / "ref"
    out.mkdir()
    p = subprocess.run([OPCHECK, str(out)], env=F.env(tmp), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p.stdout, out


def run(tmp, tag, mode, alloc, guard):
    if alloc and not os.path.exists(ALLOC[alloc]):
        pytest.skip(f"{ALLOC[alloc]} is not installed (.ci/packages)")
    extra = {"GPU_OFFLOAD_MIN_FLOPS": "0"} if mode == "gpu" else {}
    e = F.env(tmp, mode, **extra)
    if alloc:
        e["LD_PRELOAD"] = ALLOC[alloc] + ":" + e["LD_PRELOAD"]
    if guard:
        e["OPCHECK_GUARD"] = "1"
    out = tmp / tag
    out.mkdir()
    p = subprocess.run([OPCHECK, str(out)], env=e, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr)
    assert "CLOBBERED" not in p.stdout, p.stdout
    assert p.stderr == "", p.stderr
    return p.stdout, out


CASES = [("jemalloc", False), ("tcmalloc", False), (None, True),
         ("jemalloc", True)]


@pytest.mark.parametrize("alloc,guard", CASES)
def test_cpu_path_bit_identical(tmp_path, ref, alloc, guard):
    out, d = run(tmp_path, "cpu", "", alloc, guard)
    names = sorted(x.name for x in d.iterdir())
    assert names == sorted(x.name for x in ref[1].iterdir())
    assert [n for n in names
            if (d / n).read_bytes() != (ref[1] / n).read_bytes()] == []
    assert out == ref[0]


@pytest.mark.parametrize("alloc,guard", CASES)
def test_gpu_path_right(tmp_path, ref, alloc, guard):
    out, d = run(tmp_path, "gpu", "gpu", alloc, guard)
    assert F.compare(ref[1], d) == []
    assert len(F.runs(tmp_path)) > 100      # the calls ran on the "GPU"
