"""Benchmarks of libgpumutex.so itself, on the fake driver (bench/bench.py
calls run()). Each figure compares runs with and without the preload,
interleaved in one run, as medians."""

import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
LIB = os.path.join(BUILD, "libgpumutex.so")
PROBE = os.path.join(BUILD, "bench", "cuprobe_bench")
FAKE = os.path.join(BUILD, "tests", "fakecuda")
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
import journal as J  # noqa: E402


def base_env(lockdir, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUMUTEX_") and k != "LD_PRELOAD"}
    env.update(GPUMUTEX_VISIBLE_DEVICES="0,1", GPUMUTEX_LOCK_DIR=lockdir,
               LD_LIBRARY_PATH=FAKE, GPUMUTEX_RECHECK_MS="0", **extra)
    return env


def with_preload(env):
    return dict(env, LD_PRELOAD=LIB)


def startup(argv, env, n, empty):
    """Median wall time of n runs each of argv without any preload, with
    an empty preloaded library (the cost of LD_PRELOAD itself), and with
    libgpumutex.so, interleaved."""
    a, b, c = [], [], []
    for _ in range(n):
        for out, e in ((a, env), (c, dict(env, LD_PRELOAD=empty)),
                       (b, with_preload(env))):
            t = time.perf_counter_ns()
            subprocess.run(argv, env=e, check=True)
            out.append(time.perf_counter_ns() - t)
    return statistics.median(a), statistics.median(b), statistics.median(c)


def run(tmp, row):
    subprocess.run(["make", "-C", REPO, "-s", "fakecuda",
                    "build/bench/cuprobe_bench"], check=True)
    lockdir = os.path.join(tmp, "preload-locks")
    env = base_env(lockdir)

    # As a user would preload it: no LD_LIBRARY_PATH (the fake driver's
    # directory would make the loader search it for libdl.so.2 too).
    plain = {k: v for k, v in env.items() if k != "LD_LIBRARY_PATH"}
    empty = os.path.join(tmp, "empty.so")
    with open(os.path.join(tmp, "empty.c"), "w") as f:
        f.write("int gm_bench_empty;\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", empty,
                    os.path.join(tmp, "empty.c")], check=True)
    for name, argv, n in (("/bin/true", ["/bin/true"], 300),
                          ("python3 -c pass", [sys.executable, "-c", "pass"], 60)):
        a, b, c = startup(argv, plain, n, empty)
        row(f"start-up of {name}: none / empty preload / libgpumutex.so "
            f"(median of {n})",
            f"{a / 1e6:.2f} / {c / 1e6:.2f} / {b / 1e6:.2f} ms",
            f"(gpumutex {(b - a) / a * 100:+.1f} % over none, "
            f"{(b - c) / a * 100:+.1f} % over an empty preload, "
            f"{b / c:.3f}x; target at most 1.03x)")
    # What the dynamic linker does for the library at every start: its
    # relative relocations (each a write to a page of its own, copied on
    # write) and the time it reports for relocating, empty preload vs ours.
    for label, lib in (("empty preload", empty), ("libgpumutex.so", LIB)):
        rel, cyc = [], []
        for _ in range(31):
            err = subprocess.run(["/bin/true"], env=dict(
                plain, LD_PRELOAD=lib, LD_DEBUG="statistics"),
                capture_output=True, text=True).stderr
            for ln in err.splitlines():
                if "number of relative relocations" in ln:
                    rel.append(int(ln.split(":")[-1]))
                elif "time needed for relocation" in ln:
                    cyc.append(int(ln.split(":")[-1].split()[0]))
        if rel and cyc:
            row(f"start-up of /bin/true with {label}: relative relocations, "
                "dynamic linker's relocation time (median of 31)",
                f"{statistics.median(rel):.0f}, "
                f"{statistics.median(cyc) / 1e3:.0f} k cycles",
                "LD_DEBUG=statistics")

    # Machine-wide mode (/etc/ld.so.preload): every program gets the
    # library with no GPUMUTEX_* variable at all (the settings are in
    # /etc/gpumutex.conf, read at the first cuInit only). The dynamic
    # linker loads an ld.so.preload entry as it loads an LD_PRELOAD one,
    # so this is measured with LD_PRELOAD in an emptied environment (this
    # machine's own /etc is not touched).
    bare = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for name, argv, n in (("/bin/true", ["/bin/true"], 300),
                          ("python3 -c pass", [sys.executable, "-c", "pass"], 60)):
        a, b, c = startup(argv, bare, n, empty)
        row(f"machine-wide mode, start-up of {name} (never uses CUDA, no "
            f"GPUMUTEX_* variables): libgpumutex.so / empty preload "
            f"(median of {n})", f"{b / c:.3f}",
            f"({c / 1e6:.2f} -> {b / 1e6:.2f} ms; target within 1 %)")

    libc = "libc.so.6"
    for label, name, lib in (("non-CUDA name (strlen)", "strlen", libc),
                             ("CUDA name (cuInit)", "cuInit",
                              os.path.join(FAKE, "libcuda.so.1"))):
        a, b = [], []
        for _ in range(7):
            for out, e in ((a, env), (b, with_preload(env))):
                r = subprocess.run([PROBE, "dlsym", name, lib, "200000"],
                                   env=e, capture_output=True, text=True,
                                   check=True)
                out.append(float(r.stdout))
        row(f"dlsym of a {label}, added per call",
            f"{statistics.median(b) - statistics.median(a):+.0f} ns",
            f"({statistics.median(a):.0f} -> {statistics.median(b):.0f} ns)")

    a, b = [], []
    for i in range(30):
        for out, e in ((a, env), (b, with_preload(env))):
            r = subprocess.run([PROBE, "cuinit"], env=e, capture_output=True,
                               text=True, check=True)
            out.append(int(r.stdout))
    row("uncontended acquire: cuInit through gpumutex minus the real cuInit "
        "(fake driver)",
        f"{(statistics.median(b) - statistics.median(a)) / 1e3:.0f} us",
        f"(real {statistics.median(a) / 1e3:.0f} us, through gpumutex "
        f"{statistics.median(b) / 1e3:.0f} us)")

    # Hand-off: a holder exits; the next job's real cuInit starts (the fake
    # driver journals "init" when its cuInit begins).
    journal = os.path.join(tmp, "handoff.journal")
    e = with_preload(dict(env, FAKECUDA_JOURNAL=journal,
                          GPUMUTEX_VISIBLE_DEVICES="0", GPUMUTEX_QUIET="1"))
    lat = []
    for i in range(40):
        holder = subprocess.Popen([PROBE, "hold"], env=e, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        waiter = subprocess.Popen([PROBE, "cuinit"], env=e,
                                  stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        # Wait until the waiter is queued: its ticket appears.
        qdir = os.path.join(lockdir, "queue")
        while len(os.listdir(qdir)) < 2:
            time.sleep(0.001)  # a benchmark may wait by polling; tests may not
        time.sleep(0.005)
        holder.stdin.close()
        t_exit = int(holder.stdout.readline())
        holder.wait()
        waiter.wait()
        inits = [x for x in J.parse(journal)
                 if x["ev"] == "init" and int(x["pid"]) == waiter.pid]
        lat.append(inits[0].t - t_exit)
    row("hand-off through the preload: holder exits -> next job's real cuInit "
        "starts (median)", f"{statistics.median(lat) / 1e3:.0f} us",
        f"(p90 {sorted(lat)[int(len(lat) * 0.9)] / 1e3:.0f} us)")
