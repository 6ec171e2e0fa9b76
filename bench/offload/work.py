#!/usr/bin/env python3
"""The numpy workload of the gpu-offload benchmark (bench/offload/run.py).

    work.py --ops OP:N[,OP:N...] [--warmup W] [--reps R]
    work.py --ops OP:N --count C | --seconds T        (one timed loop)
    work.py --ops OP:N --until-eof                    (loop until stdin EOF)
    work.py --ops OP:N --serve                        (calls on request)
    work.py --ops OP:N --until-gpu M [--until-gpu-s S] [--warmup W] [--reps R]
    work.py ... --hold                                (then wait for EOF)
    work.py --ops OP:N --inproc R [--rep-s S] [--warm-s W] (paused/active)

Runs under whatever python has numpy (plain, under `gpu-offload run`, with
NVBLAS preloaded: the caller decides) and prints ONE JSON line on stdout:
per OP:N the seconds of each timed call (warm mode: W untimed calls, then
R timed ones) or of the whole loop (loop mode: C calls, or as many as fit
in T seconds, and the count, so that another process can run exactly as
many), and which libraries were mapped into the process at the end:
libcuda.so.1 (proof that cuInit cannot have happened when absent) and the
gpu-offload backend (the GPU path started). Inputs are built before any
timing and are the same in every process (fixed seed).

--serve (one OP:N): a long-lived process that another drives over its
pipes: it builds the inputs, prints {"ready": ...}, then for each line C
read from stdin makes C calls and prints {"t": seconds, "gpu": mapped},
gpu telling whether the backend is mapped after them (the GPU started);
at EOF the usual JSON line. The sweep runs a plain and an offloaded one
side by side and alternates between them.

--until-gpu M: first calls until the backend is mapped after one (the
GPU started in it: the ski-rental rule keeps the first calls of a
program on the CPU), at most M calls or S seconds, each timed ("pre":
the times, "started", "calls_before": the calls before the one that
started it); then the warm-up and timed calls as usual.

--inproc R (one OP:N, under `gpu-offload run`): the in-process
comparison of the never-slower sweep. Warm-up: calls with the offloader
active until the GPU started in one (the backend mapped after it) or W
seconds passed (at least one call); then, paused (gpu_offload_pause
through ctypes), calls until a rep of `count` calls takes about S
seconds (or --count C calls a rep); then R rounds, each one rep paused
and one active (the same
`count` calls), in ABBA order (paused first in even rounds): "inproc":
the reps' seconds, which side ran first, after which active rep the GPU
was first seen started, and the calls made in each phase, so that the
summary's counts can be divided out. Without the switch (the library not
loaded) both sides are the same plain calls, and "switch" says so.

OPs: dgemm sgemm (A @ B), solve (A X = B, B n x n), eigh, svd (full
matrices: gesdd), cholesky, dgemm32 (the Fortran dgemm_ with 32-bit
integers through ctypes' global lookup: what NVBLAS intercepts), qr,
inv, gemv (a vector times the n x n matrix), mixed (one round of many
small calls of every kind; N is ignored).

BENCH_INPROC_CONTROL=1 with --inproc: the method's control (A/A), both
sides paused, so that the ratio shows the method's own bias.
"""
import argparse
import ctypes
import json
import os
import sys
import time

import numpy as np


def inputs(op, n):
    rng = np.random.default_rng(16)
    if op == "mixed":
        return {k: rng.random((k, k)) for k in (8, 16, 24, 32, 48, 64, 200)}
    dt = np.float32 if op == "sgemm" else np.float64
    a = rng.random((n, n), dtype=dt)
    if op in ("dgemm", "sgemm", "dgemm32"):
        return (a, rng.random((n, n), dtype=dt))
    if op == "solve":
        a += n * np.eye(n)
        return (a, rng.random((n, n)))
    if op in ("eigh", "cholesky"):
        # Symmetric, and diagonally dominant, so positive definite: cheap
        # to build at any size (A @ A.T would cost a gemm of its own).
        a = (a + a.T) / 2
        a += n * np.eye(n)
        return (a,)
    if op in ("svd", "qr"):
        return (a,)
    if op == "inv":
        return (a + n * np.eye(n),)
    if op == "gemv":
        return (a[0].copy(), a)
    raise SystemExit("work.py: unknown op %s" % op)


def _dgemm32():
    """dgemm_ by the global lookup (a preloaded NVBLAS answers it), with
    LP64 integers; None when no loaded object defines it."""
    try:
        f = ctypes.CDLL(None).dgemm_
    except AttributeError:
        return None
    f.restype = None
    return f


def call(op, x):
    if op in ("dgemm", "sgemm"):
        return x[0] @ x[1]
    if op == "solve":
        return np.linalg.solve(x[0], x[1])
    if op == "eigh":
        return np.linalg.eigh(x[0])
    if op == "svd":
        return np.linalg.svd(x[0])
    if op == "cholesky":
        return np.linalg.cholesky(x[0])
    if op == "qr":
        return np.linalg.qr(x[0])
    if op == "inv":
        return np.linalg.inv(x[0])
    if op == "gemv":
        return x[0] @ x[1]
    if op == "dgemm32":
        a, b = x
        n = a.shape[0]
        c = np.empty((n, n), order="F")
        f = DGEMM32
        ni, one, zero = ctypes.c_int(n), ctypes.c_double(1), ctypes.c_double(0)
        p = ctypes.c_void_p
        f(b"N", b"N", ctypes.byref(ni), ctypes.byref(ni), ctypes.byref(ni),
          ctypes.byref(one), p(a.ctypes.data), ctypes.byref(ni),
          p(b.ctypes.data), ctypes.byref(ni), ctypes.byref(zero),
          p(c.ctypes.data), ctypes.byref(ni), ctypes.c_size_t(1),
          ctypes.c_size_t(1))
        return c
    if op == "mixed":
        # One round: what a program of many small linear-algebra calls does.
        m = x
        m[64] @ m[64]
        m[200] @ m[200]
        m[8] @ m[8]
        s = m[32] + 32 * np.eye(32)
        np.linalg.solve(s, m[32])
        np.linalg.inv(s)
        h = (m[48] + m[48].T) / 2 + 48 * np.eye(48)
        np.linalg.cholesky(h)
        np.linalg.eigh((m[24] + m[24].T) / 2)
        np.linalg.svd(m[16])
        np.linalg.qr(m[32])
        m[200][0] @ m[200]
        return None
    raise SystemExit("work.py: unknown op %s" % op)


def maps():
    try:
        with open("/proc/self/maps") as f:
            text = f.read()
    except OSError:
        return {}
    libs = sorted({line.split()[-1] for line in text.splitlines()
                   if "/" in line and ".so" in line})
    return {
        "libcuda": any("/libcuda.so" in p for p in libs),
        "backend": [p for p in libs if "libgpuoffload-" in p],
        "nvblas": any("libnvblas" in p for p in libs),
    }


DGEMM32 = None


def _switch():
    """libgpuoffload.so's gpu_offload_pause when loaded, else None."""
    try:
        f = ctypes.CDLL(None).gpu_offload_pause
    except AttributeError:
        return None
    f.argtypes, f.restype = [ctypes.c_int], ctypes.c_int
    return f


def inproc(op, x, rounds, rep_s, warm_s, count=None):
    """--inproc: warm-up, the count, then `rounds` ABBA rounds of one
    paused and one active rep (module docstring)."""
    sw = _switch()
    # BENCH_INPROC_CONTROL=1: the control of the method itself (A/A): the
    # "active" reps paused too, so the ratio shows the method's own bias.
    control = os.environ.get("BENCH_INPROC_CONTROL") == "1"

    def pause(on):
        if sw:
            sw(1 if on else 0)

    def rep(count):
        t = time.perf_counter()
        for _ in range(count):
            call(op, x)
        return time.perf_counter() - t

    # Warm-up, active: until the GPU started or warm_s passed. The maps
    # are read at most every 10 ms (a read costs more than a small call).
    pause(False)
    t0 = time.perf_counter()
    warm, gpu, seen = 0, False, t0
    while True:
        call(op, x)
        warm += 1
        now = time.perf_counter()
        if now - seen >= 0.01 or now - t0 >= warm_s:
            seen = now
            gpu = bool(maps().get("backend"))
        if gpu or now - t0 >= warm_s:
            break
    warm_t = time.perf_counter() - t0
    # The count (unless given), paused: calls until they fill a quarter
    # of rep_s.
    pause(True)
    calib = 0
    if not count:
        calib, t = 1, rep(1)
        while t < rep_s / 4:
            more = calib
            t += rep(more)
            calib += more
        count = max(1, int(round(rep_s / (t / calib))))
    out = {"switch": sw is not None, "control": control, "count": count, "warm_calls": warm,
           "warm_s": warm_t, "gpu_after_warm": gpu, "calib_calls": calib,
           "paused": [], "active": [], "first": [], "gpu_round": None}
    for r in range(rounds):
        order = ("paused", "active") if r % 2 == 0 else ("active", "paused")
        for side in order:
            pause(side == "paused" or control)
            out[side].append(rep(count))
            if side == "active" and not gpu and out["gpu_round"] is None:
                gpu = bool(maps().get("backend"))
                if gpu:
                    out["gpu_round"] = r
        out["first"].append(order[0])
    pause(False)
    out["paused_calls"] = calib + rounds * count
    out["active_calls"] = warm + rounds * count
    return out


def serve(op, x):
    """Calls on request (--serve): one stdin line C, C calls, one JSON
    line back; returns the calls made when stdin ends."""
    print(json.dumps({"ready": True, "gpu": bool(maps().get("backend"))}), flush=True)
    calls = 0
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        c = int(line.strip() or 1)
        t = time.perf_counter()
        for _ in range(c):
            call(op, x)
        t = time.perf_counter() - t
        calls += c
        print(json.dumps({"t": t, "gpu": bool(maps().get("backend"))}), flush=True)
    return calls


def until_gpu(op, x, most, secs):
    """Calls until the GPU started in one (--until-gpu): their times."""
    ts, started, t0 = [], False, time.perf_counter()
    while len(ts) < most and time.perf_counter() - t0 < secs:
        t = time.perf_counter()
        call(op, x)
        ts.append(time.perf_counter() - t)
        if maps().get("backend"):
            started = True
            break
    return {"times": ts, "started": started,
            "calls_before": len(ts) - 1 if started else len(ts)}


def main():
    global DGEMM32
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", required=True)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--count", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--until-eof", action="store_true")
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--until-gpu", type=int)
    ap.add_argument("--until-gpu-s", type=float, default=60.0)
    ap.add_argument("--inproc", type=int)
    ap.add_argument("--rep-s", type=float, default=0.05)
    ap.add_argument("--warm-s", type=float, default=1.0)
    a = ap.parse_args()
    specs = []
    for s in a.ops.split(","):
        op, _, n = s.partition(":")
        specs.append((op, int(n or 0)))
    if any(op == "dgemm32" for op, _ in specs):
        DGEMM32 = _dgemm32()
        if DGEMM32 is None:
            print(json.dumps({"error": "no dgemm_ in the global scope"}))
            return 3
    out = {"results": []}
    for op, n in specs:
        x = inputs(op, n)
        r = {"op": op, "n": n}
        if a.inproc:
            r["inproc"] = inproc(op, x, a.inproc, a.rep_s, a.warm_s, a.count)
        elif a.serve:
            r["count"] = serve(op, x)
        elif a.until_eof:
            # Busy until the harness closes stdin; says once when the
            # GPU path has started (the backend is mapped), so the
            # harness can start a waiter against a holder for sure.
            import select
            said = False
            calls = 0
            while True:
                call(op, x)
                calls += 1
                if not said and maps().get("backend"):
                    print("gpu", flush=True)
                    said = True
                if select.select([sys.stdin], [], [], 0)[0]:
                    if not sys.stdin.read(1):
                        break
            r["count"] = calls
        elif a.count or a.seconds:
            t = time.perf_counter()
            c = 0
            while (a.count and c < a.count) or \
                  (not a.count and time.perf_counter() - t < a.seconds):
                call(op, x)
                c += 1
            r["loop_s"] = time.perf_counter() - t
            r["count"] = c
        else:
            if a.until_gpu:
                r["pre"] = until_gpu(op, x, a.until_gpu, a.until_gpu_s)
            for _ in range(a.warmup):
                call(op, x)
            ts, spans = [], []
            for _ in range(a.reps):
                w = time.time_ns()
                t = time.perf_counter()
                call(op, x)
                ts.append(time.perf_counter() - t)
                spans.append((w, time.time_ns()))
            r["times"] = ts
            # On CLOCK_REALTIME, the clock of a trace's records.
            r["spans"] = spans
        out["results"].append(r)
        del x
    if a.hold:
        print("done", flush=True)
        sys.stdin.read()
    out["maps"] = maps()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
