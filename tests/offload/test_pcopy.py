"""The CPU copy engine of libgpuoffload.so (src/offload/pcopy/,
docs/offload.md "The CPU copy engine"): strided ?copy calls through the
generated wrappers, done by worker threads instead of the CPU library.

copycheck (tests/offload/pcopy/copycheck.c) calls every ?copy name and
checks each byte against a reference loop; libfcopy.so, its CPU library,
counts the calls that reached it. pcunit is the engine alone, built
plain, with ASan/UBSan and with TSan. Needs no system BLAS."""
import os
import re
import subprocess

import pytest

import ofront as F

T = F.BUILD / "tests" / "offload" / "pcopy"
GPU_OFFLOAD = F.BUILD / "gpu-offload"


@pytest.fixture(scope="module", autouse=True)
def _build():
    subprocess.run(["make", "-C", str(F.REPO), "-s", "offload", "pcopy-tests",
                    str(GPU_OFFLOAD.relative_to(F.REPO))],
                   check=True, stdout=subprocess.DEVNULL)


def copycheck(tmp, mode, force="", **extra):
    """copycheck MODE under the library (force: GPU_OFFLOAD_FORCE, ""
    for the default policy, None for no library); its "key value" line
    fields as a dict of the first line starting with the key."""
    e = F.env(tmp, force, **extra)
    p = subprocess.run([str(T / "copycheck"), mode], env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def fields(line):
    f = line.split()
    return {f[i]: f[i + 1] for i in range(len(f) - 1)}


def exact(out):
    lines = out.splitlines()
    ex = fields(lines[-3])
    big = fields(lines[-2].replace("engine-shaped calls", "engine-shaped"))
    other = fields(lines[-1].replace("other calls", "other"))
    return (int(ex["failed"]), int(big["engine-shaped"]),
            int(big["reached-cpu-library"]), int(other["other"]),
            int(other["reached-cpu-library"]))


@pytest.mark.parametrize("force,extra", [
    ("", {}), ("cpu", {}), ("gpu", {}),
    ("", {"GPU_OFFLOAD_COPY_THREADS": "1"}),
    ("", {"GPU_OFFLOAD_COPY_THREADS": "5"}),
    ("", {"GPU_OFFLOAD_MIN_FLOPS": "0"}),
])
def test_strided_copies_are_exact_and_done_by_the_engine(tmp_path, force, extra):
    """Every precision (s d c z), integer width and name scheme, Fortran
    and CBLAS; n around the threshold; a page-strided side gathered or
    scattered with either sign on either side, and both strided: byte for
    byte the reference's, none reaching the CPU library. Small n, small
    strides, increment 0, n <= 0 and overlapping ranges all reach it.
    Whatever the policy (forced CPU or GPU: a CPU-side speed-up), and
    when copies are timed (GPU_OFFLOAD_MIN_FLOPS=0: measured)."""
    p = copycheck(tmp_path, "exact", force, **extra)
    failed, big, big_cpu, other, other_cpu = exact(p.stdout)
    assert failed == 0, p.stdout
    assert big == 480 and big_cpu == 0, p.stdout
    assert other == 240 and other_cpu == other, p.stdout
    assert p.stderr == ""


def test_copy_threads_0_leaves_every_call_to_the_cpu_library(tmp_path):
    p = copycheck(tmp_path, "exact", "", GPU_OFFLOAD_COPY_THREADS="0")
    failed, big, big_cpu, other, other_cpu = exact(p.stdout)
    assert failed == 0 and big_cpu == big and other_cpu == other, p.stdout
    t = fields(copycheck(tmp_path, "tasks", "", GPU_OFFLOAD_COPY_THREADS="0").stdout)
    assert t["after-qualifying"] == "1"
    # and the default: the engine takes them
    p = copycheck(tmp_path, "exact", "")
    assert exact(p.stdout)[2] == 0, p.stdout


def test_without_the_library_copycheck_reaches_its_cpu_library(tmp_path):
    """The reference run: copycheck itself right, every call to libfcopy."""
    p = copycheck(tmp_path, "exact", None)
    failed, big, big_cpu, other, other_cpu = exact(p.stdout)
    assert failed == 0 and big_cpu == big == 480 and other_cpu == other


def test_threads_only_after_a_qualifying_call(tmp_path):
    """No thread before, nor after calls that do not qualify; the
    workers (GPU_OFFLOAD_COPY_THREADS - 1) at the first that does; none
    with GPU_OFFLOAD_COPY_THREADS=1 (the caller copies alone)."""
    t = fields(copycheck(tmp_path, "tasks", "", GPU_OFFLOAD_COPY_THREADS="4").stdout)
    assert (t["start"], t["after-others"], t["after-qualifying"],
            t["copies-right"]) == ("1", "1", "4", "1"), t
    t = fields(copycheck(tmp_path, "tasks", "", GPU_OFFLOAD_COPY_THREADS="1").stdout)
    assert (t["after-others"], t["after-qualifying"]) == ("1", "1"), t


def test_default_thread_count_is_at_most_8_cpus_of_the_process(tmp_path):
    want = min(8, len(os.sched_getaffinity(0)))
    t = fields(copycheck(tmp_path, "tasks", "").stdout)
    assert t["after-others"] == "1" and t["after-qualifying"] == str(want), t
    # one CPU allowed: no worker
    e = F.env(tmp_path, "")
    cpu = min(os.sched_getaffinity(0))
    p = subprocess.run([str(T / "copycheck"), "tasks"], env=e,
                       preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    t = fields(p.stdout)
    assert t["after-qualifying"] == "1" and t["copies-right"] == "1", t


def test_many_threads_calling_at_once(tmp_path):
    """8 threads, 100 page-strided copies each: every copy right; one
    job at a time, the others copy by themselves (here: the CPU library)."""
    t = fields(copycheck(tmp_path, "threads", "", GPU_OFFLOAD_COPY_THREADS="3").stdout)
    assert t["wrong"] == "0"
    assert int(t["reached-cpu-library"]) < 800, t


def test_fork_child_and_its_child_copy_with_their_own_workers(tmp_path):
    p = copycheck(tmp_path, "fork", "", GPU_OFFLOAD_COPY_THREADS="3")
    lines = [fields(x) for x in p.stdout.splitlines() if x.startswith("depth")]
    assert [x["depth"] for x in lines] == ["0", "1", "2"], p.stdout
    for x in lines:
        # a child starts with no thread but its own (the parent's workers
        # are not there), makes its own, and copies right through them
        assert (x["tasks-before"], x["tasks-after"], x["copies-right"],
                x["reached-cpu-library"]) == ("1", "3", "1", "0"), p.stdout
    assert "child failed" not in p.stdout


def test_errno_is_preserved(tmp_path):
    t = fields(copycheck(tmp_path, "errno", "", GPU_OFFLOAD_COPY_THREADS="4").stdout)
    assert (t["kept"], t["copies-right"], t["reached-cpu-library"]) == ("1", "1", "0"), t


def test_workers_block_every_signal_and_sleep_when_idle(tmp_path):
    t = fields(copycheck(tmp_path, "idle", "", GPU_OFFLOAD_COPY_THREADS="4").stdout)
    assert (t["workers"], t["all-signals-blocked"], t["asleep"],
            t["copies-right"]) == ("3", "3", "3", "1"), t


def test_a_bad_thread_count_is_said_once_and_the_default_used(tmp_path):
    p = copycheck(tmp_path, "exact", "", GPU_OFFLOAD_COPY_THREADS="many")
    assert exact(p.stdout)[2] == 0
    assert p.stderr == ("gpu-offload: GPU_OFFLOAD_COPY_THREADS=many is not a "
                        "number from 0 to 64; using %d\n"
                        % min(8, len(os.sched_getaffinity(0))))


def test_summary_and_report_count_copy_engine_calls(tmp_path):
    tr = tmp_path / "trace"
    p = copycheck(tmp_path, "errno", "", GPU_OFFLOAD_SUMMARY="1",
                  GPU_OFFLOAD_TRACE=str(tr))
    m = re.search(r"reasons:.* copy-engine=(\d+)", p.stderr)
    assert m and int(m.group(1)) == 10, p.stderr
    r = subprocess.run([str(GPU_OFFLOAD), "report", str(tr)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^dcopy +10 .* copy-engine:10$", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("prog", ["pcunit", "pcunit-san", "pcunit-tsan"])
def test_engine_alone_under_sanitizers(prog):
    e = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
             TSAN_OPTIONS="halt_on_error=1")
    e.pop("GPU_OFFLOAD_COPY_THREADS", None)
    p = subprocess.run([str(T / prog)], env=e, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert " 0 failed" in p.stdout, p.stdout
    assert "ERROR: AddressSanitizer" not in p.stderr
    assert "runtime error" not in p.stderr, p.stderr
    assert "ThreadSanitizer" not in p.stderr, p.stderr


HUGE = "/sys/kernel/mm/transparent_hugepage/enabled"


@pytest.mark.skipif(not os.path.exists(HUGE), reason="no transparent huge pages")
@pytest.mark.parametrize("kind,off,advised,ahead", [
    ("fresh", False, True, True),     # numpy's fresh malloc'd buffer
    ("fresh", True, False, False),    # GPU_OFFLOAD_COPY_HUGEPAGE=0: never
    ("touched", False, False, None),  # pages resident: left alone
    ("reuse", False, True, True),     # the next call's buffer, same address
    ("file", False, False, False),    # a shared file mapping: neither
])
def test_fresh_destination_gets_huge_pages(kind, off, advised, ahead):
    """A gather into private anonymous memory nothing has written is
    advised MADV_HUGEPAGE (the kernel's VmFlags "hg" in /proc/self/smaps)
    and populated ahead of the calls that will write it (resident beyond
    the 8 MiB the gather writes), so the copy faults nothing; memory with
    resident pages is never advised, a file mapping neither advised nor
    populated beyond what the program's own copy writes; every byte is
    right either way."""
    e = dict(os.environ)
    e.pop("GPU_OFFLOAD_COPY_THREADS", None)
    if off:
        e["GPU_OFFLOAD_COPY_HUGEPAGE"] = "0"
    p = subprocess.run([str(T / "pchuge"), kind], env=e, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"advised (\d+) of 16 MiB, rss ([\d.]+) MiB, (\d+) checks, 0 failed",
                  p.stdout)
    assert m, p.stdout
    mib, rss = int(m.group(1)), float(m.group(2))
    # The 8 MiB destination lies in at least three whole 2 MiB regions
    # after its first one, each advised before its first byte was written.
    assert (mib >= 6) if advised else (mib == 0), p.stdout
    if ahead is not None:
        # Populated ahead: the gather's next regions inside the mapping.
        assert (rss >= 12) if ahead else (rss <= 8.1), p.stdout


@pytest.mark.skipif(not os.path.exists(HUGE), reason="no transparent huge pages")
@pytest.mark.parametrize("prog", ["pchuge", "pchuge-san"])
@pytest.mark.parametrize("kind,advised", [
    ("merged", True),         # malloc's mapping, a neighbour merged below
    ("merged-header", True),  # the same by hand, neighbours on both sides
    ("merged-own", False),    # the program's own mapping: where it begins
])                            # is unknown, so no hint
def test_merged_neighbours_are_left_alone(prog, kind, advised):
    """The kernel merges neighbouring anonymous mappings, so numpy's
    linearization buffer (malloc's own mapping) is often part of one
    mapping that begins below it: the buffer is still advised, by the
    chunk's bounds that malloc's header gives, and the neighbours are
    neither advised nor populated. The program's own mapping merged with
    a neighbour gets no hint (a hint on part of a mapping splits it where
    the program's own mapping may not end). Every byte right."""
    if prog == "pchuge-san" and kind == "merged":
        pytest.skip("ASan's allocator is not glibc's malloc: merged-header "
                    "has the same layout made by hand")
    e = dict(os.environ)
    e.pop("GPU_OFFLOAD_COPY_THREADS", None)
    p = subprocess.run([str(T / prog), kind], env=e, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    n = re.search(r"neighbours: merged (\d), advised (\d+) MiB, rss ([\d.]+) MiB",
                  p.stdout)
    m = re.search(r"advised (\d+) of (\d+) MiB, rss ([\d.]+) MiB, (\d+) checks, 0 failed",
                  p.stdout)
    assert n and m, p.stdout + p.stderr
    if n.group(1) != "1":
        pytest.skip("the kernel did not merge the neighbours: " + p.stdout)
    assert int(n.group(2)) == 0 and float(n.group(3)) == 0, p.stdout
    mib, rss = int(m.group(1)), float(m.group(3))
    if advised:
        assert mib >= 6 and rss >= 12, p.stdout
    else:
        assert mib == 0 and rss >= 8, p.stdout


@pytest.mark.parametrize("prog", ["pchuge", "pchuge-san"])
def test_anon_vma_reader(prog):
    """gpo_pcopy_anon_vma (vma.c), which decides where the engine may
    populate ahead: private anonymous memory (a mapping, the heap) with
    its exact bounds; never a file, shared or read-only memory, a guard
    page, the stack or an unmapped address."""
    e = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")
    p = subprocess.run([str(T / prog), "vma"], capture_output=True, env=e,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Sanitizer" not in p.stderr and "runtime error" not in p.stderr, p.stderr
    got = dict(line.split()[1:3] for line in p.stdout.splitlines()
               if line.startswith("vma "))
    # malloc's memory is the heap ("0h": said so) with glibc's allocator,
    # an anonymous mapping of its own under ASan's
    assert got.pop("heap") in ("0h" if prog == "pchuge" else "0", "0h"), p.stdout
    assert got == {"anon": "0", "guard": "-1", "file-private": "-1",
                   "anon-shared": "-1", "anon-readonly": "-1", "stack": "-1",
                   "unmapped": "-1"}, p.stdout


@pytest.mark.skipif(not os.path.exists(HUGE), reason="no transparent huge pages")
def test_populate_ahead_under_sanitizers():
    """The hint and the populate jobs (the engine's workers faulting in
    regions ahead of the copy) under ASan/UBSan: every byte right, memory
    populated ahead, no report."""
    e = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")
    e.pop("GPU_OFFLOAD_COPY_THREADS", None)
    p = subprocess.run([str(T / "pchuge-san"), "reuse"], capture_output=True, env=e,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Sanitizer" not in p.stderr and "runtime error" not in p.stderr, p.stderr
    m = re.search(r"rss ([\d.]+) MiB, 2 checks, 0 failed", p.stdout)
    assert m and float(m.group(1)) >= 12, p.stdout
