"""Exact GPU time per lease (GPUMUTEX_GPU_TIME=1; docs/preload.md, "GPU
time"; the records: docs/report.md): the library's CUPTI collector against
the fake CUPTI (tests/fakecupti), whose activity records, clock, version
and failures the tests choose, and a probe (tests/preload/gtprobe.c) that
does CUDA work and may play a profiler in the same process."""
import json
import os
import subprocess
import sys

import pytest

from preloadlib import B, LIB, T, TIMEOUT, cli, make, built, env  # noqa: F401

FAKECUPTI = B / "tests" / "fakecupti"
S = 1_000_000_000  # ns


@pytest.fixture(scope="module", autouse=True)
def cupti_built(built):  # noqa: F811
    make("fakecupti", "preload-tests")


def gt_env(env, tmp_path, records="", clock=(S, 2 * S), **extra):  # noqa: F811
    e = dict(env, GPUMUTEX_VISIBLE_DEVICES="0", GPUMUTEX_GPU_TIME="1",
             LD_LIBRARY_PATH=env["LD_LIBRARY_PATH"] + ":" + str(FAKECUPTI),
             FAKECUPTI_JOURNAL=str(tmp_path / "cupti"),
             FAKECUPTI_RECORDS=records,
             FAKECUPTI_CLOCK=",".join(str(c) for c in clock))
    e.update(extra)
    return e


def probe(e, *steps, linked=False, preload=True):
    x = dict(e)
    if preload:
        x["LD_PRELOAD"] = str(LIB)
    prog = T / ("gtprobe-linked" if linked else "gtprobe")
    return subprocess.run([str(prog), *steps], env=x, capture_output=True,
                          text=True, timeout=TIMEOUT)


def records(e, kind="gputime"):
    out = []
    root = os.path.join(e["GPUMUTEX_LOCK_DIR"], "job")
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if f.startswith("events.log"):
                with open(os.path.join(d, f)) as fh:
                    for line in fh:
                        w = line.split()
                        if len(w) > 1 and w[1] == kind:
                            out.append(dict(x.split("=", 1) for x in w[2:]
                                            if "=" in x))
    return out


def calls(e):
    p = e["FAKECUPTI_JOURNAL"]
    if not os.path.exists(p):
        return []
    with open(p) as fh:
        return [line.split() for line in fh]


def lines(stderr):
    return [x for x in stderr.splitlines() if x.startswith("gpumutex:")]



def rec(kind, dev, start, end):
    return f"{kind}:{dev}:{start}:{end}"


# Two overlapping kernels and a copy in a lease of 1 s (CUPTI clock
# 1 s .. 2 s): busy 0.4 s (the union), kernels 0.4 s, copy 0.1 s, and the
# longest stretch with nothing running 0.4 s (1.6 s to the end).
BASIC = ",".join([rec("k", 0, 1_100_000_000, 1_300_000_000),
                  rec("k", 0, 1_200_000_000, 1_400_000_000),
                  rec("c", 0, 1_500_000_000, 1_600_000_000)])


def test_records_written_at_the_leases_end(env, tmp_path):
    e = gt_env(env, tmp_path, BASIC)
    r = probe(e, "work")
    assert r.returncode == 0 and "work=0" in r.stdout, r.stderr
    assert lines(r.stderr) == []
    (g,) = records(e)
    (grant,) = records(e, "grant")
    assert g["lease"] == grant["lease"] and g["pid"] == grant["pid"]
    assert g["dev"] == "0"
    assert (g["held"], g["busy"], g["gpubusy"], g["kernel"], g["copy"],
            g["idlemax"], g["final"], g["why"]) == (
        str(S), "400000000", "400000000", "400000000", "100000000",
        "400000000", "1", "exit")


@pytest.mark.parametrize("pool", [False, True])
def test_cupti_that_calls_the_driver_while_it_starts(env, tmp_path, pool):
    """CUPTI calls the driver while it starts (through the library's
    hooks): with fixed devices the collector starts at the first device
    call, in a pool inside cuInit itself; neither may deadlock or queue
    again."""
    e = gt_env(env, tmp_path, BASIC, FAKECUPTI_CALLS_DRIVER="1")
    if pool:
        e.update(GPUMUTEX_VISIBLE_DEVICES="0,1", GPUMUTEX_NUM_DEVICES="1")
    r = probe(e, "work")
    assert r.returncode == 0 and "work=0" in r.stdout, r.stderr
    assert lines(r.stderr) == []
    assert [c[1:] for c in calls(e) if c[1] == "driver"] == [
        ["driver", "rc=0", "count=1"]]
    (g,) = records(e)
    assert g["busy"] == "400000000"
    assert len(records(e, "grant")) == 1


def test_busy_is_per_device_union_and_process_union(env, tmp_path):
    # Device 0 busy 0.1-0.3 s, device 1 0.2-0.4 s: the process was busy
    # 0.3 s (any GPU), its GPUs 0.4 GPU-seconds.
    recs = ",".join([rec("k", 0, 1_100_000_000, 1_300_000_000),
                     rec("c", 1, 1_200_000_000, 1_400_000_000)])
    e = gt_env(env, tmp_path, recs)
    assert probe(e, "work").returncode == 0
    (g,) = records(e)
    assert (g["busy"], g["gpubusy"], g["kernel"], g["copy"]) == (
        "300000000", "400000000", "200000000", "200000000")


def test_a_record_every_minute_of_gpu_time(env, tmp_path):
    # Kernels 10-70 s and 100-130 s after the grant, the lease ends at
    # 200 s: records at 70 s and 130 s (each a minute after the last),
    # then the final one.
    recs = ",".join([rec("k", 0, 11 * S, 71 * S), rec("k", 0, 101 * S, 131 * S)])
    e = gt_env(env, tmp_path, recs, clock=(S, 201 * S))
    assert probe(e, "work").returncode == 0
    got = [(g["held"], g["busy"], g["final"], g["why"]) for g in records(e)]
    assert got == [(str(70 * S), str(60 * S), "0", "minute"),
                   (str(130 * S), str(90 * S), "0", "minute"),
                   (str(200 * S), str(90 * S), "1", "exit")]
    assert records(e)[-1]["idlemax"] == str(70 * S)


def test_records_out_of_order(env, tmp_path):
    # 1500 one-microsecond kernels every 2 us and copies overlapping each,
    # handed over in reverse order: merged exactly.
    ks = [rec("k", 0, S + 2000 * i, S + 2000 * i + 1000) for i in range(1500)]
    ks += [rec("c", 0, S + 2000 * i + 500, S + 2000 * i + 1500)
           for i in range(1500)]
    e = gt_env(env, tmp_path, ",".join(reversed(ks)))
    assert probe(e, "work").returncode == 0
    (g,) = records(e)
    assert g["busy"] == str(1500 * 1500)
    assert g["kernel"] == str(1500 * 1000) and g["copy"] == str(1500 * 1000)
    assert g["idlemax"] == str(2 * S - (S + 2000 * 1499 + 1500))


def test_many_records_from_concurrent_streams(env, tmp_path):
    # Two streams of 12000 records each (more than the collector keeps
    # before folding), one kernel and one copy stream overlapping by half,
    # plus a kernel stream on device 1: busy 18 ms of the process, 30 ms
    # of its GPUs.
    n = 12000
    recs = (f"g:k:0:{S}:1000:2000:{n},g:c:0:{S + 500}:1000:2000:{n},"
            f"g:k:1:{S}:1000:2000:{n}")
    e = gt_env(env, tmp_path, recs)
    assert probe(e, "work").returncode == 0
    (g,) = records(e)
    assert g["busy"] == str(n * 1500)
    assert g["gpubusy"] == str(n * 1500 + n * 1000)
    assert g["kernel"] == str(2 * n * 1000) and g["copy"] == str(n * 1000)
    assert g["idlemax"] == str(2 * S - (S + 2000 * (n - 1) + 1500))


@pytest.mark.parametrize("linked", [False, True])
def test_a_profiler_that_starts_later_gets_cupti(env, tmp_path, linked):
    """The probe subscribes to CUPTI after gpumutex did (dlsym or PLT):
    gpumutex writes what it measured, unsubscribes, says so once, and the
    profiler's subscription, callbacks and records are its own."""
    e = gt_env(env, tmp_path, BASIC + ";" + rec("k", 0, 3 * S, 4 * S))
    r = probe(e, "work", "profile", linked=linked)
    assert r.returncode == 0, r.stderr
    assert "work=0" in r.stdout
    assert "subscribe=0 enable=0 profiled=1" in r.stdout, r.stdout
    (line,) = lines(r.stderr)
    assert "profiler" in line and "cuptiSubscribe" in line
    (g,) = records(e)
    assert (g["why"], g["final"], g["busy"]) == ("profiler", "1", "400000000")
    seq = [c[1] for c in calls(e) if c[1].startswith("call=")]
    # gpumutex let go before the profiler's own subscription.
    i = seq.index("call=cuptiUnsubscribe")
    assert seq[i + 1] == "call=cuptiSubscribe"


@pytest.mark.parametrize("on", ["1", "0"])
def test_a_profiler_library_loaded_locally_gets_cupti(env, tmp_path, on):
    """As PyTorch's profiler is laid out: a library linked with CUPTI,
    loaded with RTLD_LOCAL, subscribing through its PLT (bound to
    gpumutex's hook, which must find the CUPTI that only that library's
    scope holds), with the option on and off."""
    e = gt_env(env, tmp_path, BASIC, GPUMUTEX_GPU_TIME=on)
    r = probe(e, "work", "local")
    assert r.returncode == 0, r.stderr
    assert "work=0" in r.stdout and "local=0" in r.stdout, r.stdout
    if on == "1":
        (line,) = lines(r.stderr)
        assert "cuptiSubscribe" in line
        assert [g["why"] for g in records(e)] == ["profiler"]
    else:
        assert lines(r.stderr) == [] and records(e) == []


def test_a_profiler_that_came_first_keeps_cupti(env, tmp_path):
    e = gt_env(env, tmp_path, rec("k", 0, 3 * S, 4 * S))
    r = probe(e, "profile", "work", linked=True)
    assert r.returncode == 0, r.stderr
    assert "subscribe=0 enable=0 profiled=1" in r.stdout, r.stdout
    assert "work=0" in r.stdout
    (line,) = lines(r.stderr)
    assert "a profiler uses CUPTI" in line
    assert records(e) == []
    # gpumutex never touched CUPTI: only the probe's own calls.
    assert [c[1] for c in calls(e) if c[1].startswith("call=")] == [
        "call=cuptiSubscribe", "call=cuptiActivityRegisterCallbacks",
        "call=cuptiActivityEnable", "call=cuptiActivityFlushAll"]


def test_a_profiler_without_a_subscription_keeps_its_records(env, tmp_path):
    """A profiler that uses only the activity API (no cuptiSubscribe)
    before the lease: gpumutex must not register its own callbacks, which
    would take the profiler's records."""
    e = gt_env(env, tmp_path, rec("k", 0, 3 * S, 4 * S))
    r = probe(e, "activity", "work", "flush")
    assert r.returncode == 0, r.stderr
    assert "activity=0" in r.stdout and "work=0" in r.stdout
    assert "profiled=1" in r.stdout, r.stdout + r.stderr
    (line,) = lines(r.stderr)
    assert "a profiler uses CUPTI" in line
    assert records(e) == []


def test_off_by_default_and_profilers_unaffected(env, tmp_path):
    e = gt_env(env, tmp_path, rec("k", 0, 3 * S, 4 * S))
    del e["GPUMUTEX_GPU_TIME"]
    r = probe(e, "work", "profile")
    assert r.returncode == 0, r.stderr
    assert "subscribe=0 enable=0 profiled=1" in r.stdout, r.stdout
    assert lines(r.stderr) == []
    assert records(e) == []
    # gpumutex itself never called CUPTI: only the probe's own calls.
    assert [c[1] for c in calls(e) if c[1].startswith("call=")] == [
        "call=cuptiSubscribe", "call=cuptiActivityRegisterCallbacks",
        "call=cuptiActivityEnable", "call=cuptiActivityFlushAll"]


@pytest.mark.parametrize("extra,words", [
    ({"GPUMUTEX_CUPTI": "/nonexistent/libcupti.so.13"}, "no CUPTI library"),
    ({"FAKECUPTI_VERSION": "140000"}, "API version 140000"),
    ({"FAKECUPTI_VERSION": "18"}, "API version 18"),
    ({"FAKECUPTI_FAIL": "cuptiGetVersion"}, "failed to initialise"),
    ({"FAKECUPTI_FAIL": "cuptiSubscribe"}, "failed to initialise"),
    ({"FAKECUPTI_FAIL": "cuptiActivityRegisterCallbacks"},
     "failed to initialise"),
    ({"FAKECUPTI_FAIL": "cuptiActivityEnable"}, "would not record"),
    ({"FAKECUPTI_SUBSCRIBED": "1"}, "another CUPTI client"),
    ({"CUDA_INJECTION64_PATH": "/opt/profiler/libinject.so"},
     "CUDA_INJECTION64_PATH"),
])
def test_declines_with_one_line(env, tmp_path, extra, words):
    e = gt_env(env, tmp_path, BASIC, **extra)
    r = probe(e, "work")
    assert r.returncode == 0 and "work=0" in r.stdout, r.stderr
    (line,) = lines(r.stderr)
    assert words in line, line
    assert records(e) == []
    # Everything else as without the option: the lease and its records.
    assert len(records(e, "grant")) == 1 and len(records(e, "exit")) == 1
    # Nothing left subscribed or enabled by gpumutex.
    subs = [c for c in calls(e) if c[1] == "call=cuptiSubscribe"]
    unsubs = [c for c in calls(e) if c[1] == "call=cuptiUnsubscribe"]
    ok = [c for c in subs if c[2] == "rc=0"]
    assert len(ok) == len(unsubs)


def test_malformed_value_fails_closed(env, tmp_path):
    e = gt_env(env, tmp_path, GPUMUTEX_GPU_TIME="yes")
    r = probe(e, "work")
    assert "work=1" in r.stdout, r.stdout  # CUDA_ERROR_INVALID_VALUE
    (line,) = lines(r.stderr)
    assert 'GPUMUTEX_GPU_TIME="yes"' in line


def test_config_file_key(env, tmp_path):
    conf = tmp_path / "my.conf"
    conf.write_text("visible_devices = 0\ngpu_time = yes\n")
    os.chmod(conf, 0o644)
    e = gt_env(env, tmp_path, BASIC, GPUMUTEX_CONFIG=str(conf))
    del e["GPUMUTEX_GPU_TIME"]
    del e["GPUMUTEX_VISIBLE_DEVICES"]
    r = probe(e, "work")
    assert r.returncode == 0 and "work=0" in r.stdout, r.stderr
    assert [g["busy"] for g in records(e)] == ["400000000"]
    # The environment overrides a file that does not enforce.
    e["GPUMUTEX_GPU_TIME"] = "0"
    probe(e, "work")
    assert len(records(e)) == 1


def test_gpumutex_run_flag(env, tmp_path):
    e = gt_env(env, tmp_path, BASIC)
    del e["GPUMUTEX_GPU_TIME"]
    r = subprocess.run([str(B / "gpumutex-run"), "--gpu-time", "--",
                        str(T / "gtprobe"), "work"], env=e,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert [g["busy"] for g in records(e)] == ["400000000"]
    r = subprocess.run([str(B / "gpumutex-run"), "--gpu-time=2", "--",
                        "true"], env=e, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 2 and "--gpu-time" in r.stderr
    r = subprocess.run([str(B / "gpumutex-run"), "--", "true"],
                       env=dict(e, GPUMUTEX_GPU_TIME="on"),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 2 and "GPUMUTEX_GPU_TIME" in r.stderr


def test_python_keyword():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..",
                                    "python"))
    import gpumutex
    e = gpumutex.environ(visible_devices="0", env={}, gpu_time=True)
    assert e["GPUMUTEX_GPU_TIME"] == "1"
    e = gpumutex.environ(visible_devices="0", env={}, gpu_time=False)
    assert e["GPUMUTEX_GPU_TIME"] == "0"
    with pytest.raises(TypeError, match="gpu_time"):
        gpumutex.environ(visible_devices="0", env={}, gpu_time=1)
    with pytest.raises(ValueError, match="GPUMUTEX_GPU_TIME"):
        gpumutex.environ(visible_devices="0",
                         env={"GPUMUTEX_GPU_TIME": "yes"})


def test_report_log_and_metrics(env, tmp_path):
    e = gt_env(env, tmp_path, BASIC)
    assert probe(e, "work").returncode == 0
    doc = json.loads(cli(e, "report", "--json"))
    (lease,) = doc["leases"]
    gt = lease["gpu_time"]
    assert gt["processes"] == 1
    assert gt["busy_pct"] == 40.0  # 0.4 s of the 1 s measured
    assert (gt["kernel_s"], gt["copy_s"], gt["longest_idle_s"]) == (
        0.4, 0.1, 0.4)
    assert gt["busy_gpu_s"] == pytest.approx(0.4 * gt["held_gpu_s"],
                                             abs=1e-6)
    for who in (doc["users"][0], doc["jobs"][0]):
        assert who["busy_pct"] == 40.0
        assert who["gpu_hours_measured"] == pytest.approx(who["gpu_hours"])
    text = cli(e, "report")
    section = text.split("GPU time measured in leases")[1]
    assert " 40.0%" in section and "0.40s" in section
    svg = tmp_path / "r.svg"
    cli(e, "report", "--svg", str(svg))
    assert "GPU busy 40.0% of the lease (measured)" in svg.read_text()
    html = tmp_path / "r.html"
    cli(e, "report", "--html", str(html))
    table = html.read_text().split('id="gputime-table"')[1]
    assert "<td>40.0%</td>" in table.split("</table>")[0]
    assert "busy 0.40s of 1.00s held" in cli(e, "log")
    m = cli(e, "metrics").splitlines()
    assert "gpumutex_gpu_time_processes_total 1" in m
    assert "gpumutex_gpu_time_held_seconds_total 1.000" in m
    assert "gpumutex_gpu_time_busy_seconds_total 0.400" in m
    assert "gpumutex_gpu_time_kernel_seconds_total 0.400" in m
    assert "gpumutex_gpu_time_copy_seconds_total 0.100" in m


def test_report_without_records_is_unchanged(env, tmp_path):
    e = gt_env(env, tmp_path, BASIC)
    del e["GPUMUTEX_GPU_TIME"]
    assert probe(e, "work").returncode == 0
    assert "GPU time measured" not in cli(e, "report")
    doc = json.loads(cli(e, "report", "--json"))
    assert doc["leases"][0]["gpu_time"] is None
    assert doc["users"][0]["busy_pct"] is None


def test_library_has_no_cupti_dependency():
    r = subprocess.run(["readelf", "-d", str(LIB)], capture_output=True,
                       text=True, check=True)
    assert "cupti" not in r.stdout


def test_declarations_match_the_toolkits_headers():
    """src/preload/cuptiapi.h against CUPTI's own headers, where the
    toolkit is installed (the library itself builds without them)."""
    if not any(os.path.exists(os.path.join(d, "cupti.h")) for d in (
            "/usr/local/cuda/extras/CUPTI/include",
            "/usr/local/cuda/targets/x86_64-linux/include",
            "/usr/local/cuda/include")):
        pytest.skip("the CUDA toolkit's CUPTI headers are not installed")
    make("cupti-abi")


def test_a_given_back_lease_gets_its_final_record(env, tmp_path):
    """A process that destroys its context gives its lease back (docs/
    preload.md, "Giving the GPU back"): that lease's record is final
    (why=give-back), and its next lease, taken when it works again, is
    measured on its own. Another job waiting for the GPU orders it: it
    gets the GPU only once the first lease is given back."""
    from preloadlib import Holder
    e = gt_env(env, tmp_path, BASIC + ";" + rec("k", 0, 3_200_000_000,
                                                3_500_000_000),
               clock=(S, 2 * S, 3 * S, 4 * S), GPUMUTEX_GIVE_BACK_MS="0")
    e["LD_PRELOAD"] = str(LIB)
    a = subprocess.Popen([str(T / "lazyprobe"), "dlsym", "init", "create",
                          "work", "destroy", "line", "create", "work", "eof"],
                         env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        while "waiting" not in a.stdout.readline():
            assert a.poll() is None, a.stderr.read()
        b = Holder(dict(e, GPUMUTEX_GPU_TIME="0"))  # waits for the give-back
        assert b.release() == 0
        out, err = a.communicate("go\n", timeout=TIMEOUT)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert a.returncode == 0, err
    assert lines(err) == []
    mine = [g for g in records(e) if g["pid"] == str(a.pid)]
    grants = [g["lease"] for g in records(e, "grant")
              if g["pid"] == str(a.pid)]
    assert len(grants) == 2 and grants[0] != grants[1]
    assert [(g["lease"], g["why"], g["final"], g["held"], g["busy"])
            for g in mine] == [
        (grants[0], "give-back", "1", str(S), "400000000"),
        (grants[1], "exit", "1", str(S), "300000000")]


def test_a_suspended_lease_gets_its_final_record(env, tmp_path):
    """Idle suspension (docs/suspend.md) with the option on: the records
    are flushed before the checkpoint, the suspended lease's record is
    final (why=suspend) and written without calling CUPTI, and the resumed
    lease is measured on its own."""
    from test_suspend import ready, start
    e = gt_env(env, tmp_path, BASIC + ";" + rec("k", 0, 3_200_000_000,
                                                3_500_000_000),
               clock=(S, 3 * S, 4 * S), GPUMUTEX_IDLE_SUSPEND_MS="1")
    holder = start(e, job="holder")
    ready(holder)
    waiter = start(dict(e, GPUMUTEX_GPU_TIME="0"), job="waiter")
    out, err = waiter.communicate("go\nquit\n", timeout=TIMEOUT)
    assert waiter.returncode == 0, err
    out, err = holder.communicate("go\nquit\n", timeout=TIMEOUT)
    assert holder.returncode == 0, err
    assert "sync=0" in out
    assert lines(err) == []
    mine = [g for g in records(e) if g["pid"] == str(holder.pid)]
    grants = [g["lease"] for g in records(e, "grant")
              if g["pid"] == str(holder.pid)]
    assert len(grants) == 2
    # The first lease ends at the last work CUPTI reported (1.6 s): the
    # process is checkpointed by then, and CUPTI is not called.
    assert [(g["lease"], g["why"], g["final"], g["held"], g["busy"])
            for g in mine] == [
        (grants[0], "suspend", "1", "600000000", "400000000"),
        (grants[1], "exit", "1", str(S), "300000000")]
