"""Traces and reports (docs/offload.md, "Traces"): the record layout of
src/offload/trace.h, `gpu-offload report` with its avoidable-copies
estimate, and the exit summary (GPU_OFFLOAD_SUMMARY=1)."""

import glob
import os
import re
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import REPO  # noqa: E402
from policylib import BIG, GPU_OFFLOAD, GUARD, Driver, env  # noqa: E402

HEADER = 64
REC = 320


@pytest.fixture(scope="module", autouse=True)
def build():
    subprocess.run(["make", "-C", REPO, "-s", "all", "fakecuda"], check=True)


def report(d):
    r = subprocess.run([GPU_OFFLOAD, "report", str(d)], capture_output=True,
                       text=True, timeout=GUARD)
    assert r.returncode == 0, r.stderr
    return r.stdout


def row(text, name):
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == name:
            return f
    raise AssertionError(f"no row {name} in\n{text}")


def avoidable(text):
    m = re.search(r"avoidable copies .*: (\d+) copies, ([0-9.]+) MB", text)
    assert m, text
    return int(m.group(1)), float(m.group(2))


def test_records_have_the_documented_layout(tmp_path):
    tr = tmp_path / "trace"
    d = Driver(env(tmp_path, devices=None, GPU_OFFLOAD_TRACE=str(tr)))
    r = d.call(10)
    d.finish()
    files = glob.glob(str(tr / "gpo-*.trace"))
    assert len(files) == 1 and files[0].endswith(f"gpo-{d.pid}.trace")
    data = open(files[0], "rb").read()
    # 10 calls and one gpu-start event
    assert len(data) == HEADER + 11 * REC
    magic, ver, size, endian, pid = struct.unpack_from("<8sIIIi", data, 0)
    assert (magic, ver, size, endian, pid) == (b"GPOTRACE", 1, REC,
                                               0x01020304, d.pid)
    kinds = []
    for i in range(11):
        off = HEADER + i * REC
        kind, device, decided, prec = struct.unpack_from("<BBBc", data, off + 16)
        op, reason, fail = struct.unpack_from("<HHH", data, off + 24)
        name = data[off + 40:off + 56].rstrip(b"\0").decode()
        flops, bin_, bout = struct.unpack_from("<3d", data, off + 88)
        kinds.append((kind, name))
        if kind == 0:
            assert (name, prec, flops, bin_, bout) == ("gemm", b"d", 1.6e10,
                                                       9.6e7, 3.2e7)
            # buffers: ptr, bytes, fp_before, fp_after, in, out
            ptr, nbytes, fb, fa, bi, bo = struct.unpack_from(
                "<QQQQBB", data, off + 152)
            assert nbytes == 4.8e7 and (bi, bo) == (1, 0) and fa != 0
            assert reason in (5, 6), reason  # model-gpu, ski-rental
    assert (1, "gpu-start") in kinds


def test_report_counts_and_avoidable_copies(tmp_path):
    tr = tmp_path / "trace"
    d = Driver(env(tmp_path, devices=None, GPU_OFFLOAD_TRACE=str(tr)))
    a = d.call(6)   # ski-rental: on the CPU
    b = d.call(20)  # the GPU starts; 20 calls on the same buffers
    d.finish()
    gpu = a["gpu"] + b["gpu"]
    cpu = a["cpu"] + b["cpu"]
    text = report(tr)
    f = row(text, "dgemm")
    assert int(f[1]) == 26 and int(f[3]) == cpu and int(f[5]) == gpu, text
    assert "ski-rental:6" in f[-1] and f"model-gpu:{gpu}" in f[-1], text
    assert "GPU started 1 times" in text
    # A stays unchanged, C comes back from the GPU and goes in unchanged
    # (probes on the CPU do not change it in the driver): after the first
    # GPU call, both copies of every GPU call were avoidable.
    n, mb = avoidable(text)
    assert n == 2 * (gpu - 1) and mb == pytest.approx(n * 48.0), text


def test_changed_data_is_not_avoidable(tmp_path):
    tr = tmp_path / "trace"
    d = Driver(env(tmp_path, devices=None, GPU_OFFLOAD_TRACE=str(tr)))
    gpu = d.call(7)["gpu"]
    for _ in range(10):
        d.send("touch")   # the program changes A between calls
        gpu += d.call(1)["gpu"]
    d.finish()
    n, mb = avoidable(report(tr))
    # only C (in+out) each time after the first GPU call; A never
    assert gpu >= 10 and n == gpu - 1 and mb == pytest.approx(n * 48.0), \
        (n, gpu)


def test_one_file_per_process_and_a_bad_file(tmp_path):
    tr = tmp_path / "trace"
    for _ in range(2):
        d = Driver(env(tmp_path, devices=None, GPU_OFFLOAD_TRACE=str(tr)))
        d.call(3)
        d.finish()
    (tr / "gpo-1.trace").write_bytes(b"not a trace")
    r = subprocess.run([GPU_OFFLOAD, "report", str(tr)], capture_output=True,
                       text=True, timeout=GUARD)
    assert r.returncode == 1 and "gpo-1.trace is not a trace" in r.stderr
    assert "2 processes, 6 calls" in r.stdout


def test_summary_at_exit(tmp_path):
    d = Driver(env(tmp_path, devices=None, GPU_OFFLOAD_SUMMARY="1"))
    r = d.call(30)
    rc, err = d.finish()
    lines = err.splitlines()
    assert len(lines) == 1, err
    m = re.match(r"gpu-offload: summary: (\d+) calls seen, (\d+) decided, "
                 r"(\d+) offloaded \(GPU [0-9.]+ s, start-up [0-9.]+ s\), "
                 r"predicted time saved ([0-9.]+) s; reasons: (.*)$", lines[0])
    assert m, lines[0]
    assert int(m.group(1)) == 30 and int(m.group(3)) == r["gpu"]
    # saved per offloaded call: 0.16 - 0.013 s, less the start-up
    assert float(m.group(4)) > 0
    assert f"model-gpu={r['reasons']['model-gpu']}" in m.group(5)


def test_no_summary_unless_asked(tmp_path):
    d = Driver(env(tmp_path, devices=None))
    d.call(30)
    rc, err = d.finish()
    assert err == ""
