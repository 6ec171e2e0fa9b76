"""Jobs for tests/gpu/gpu_time.sh (GPUMUTEX_GPU_TIME=1 on a real GPU).

    gputime_jobs.py accuracy OUT.json
        Known work on one stream, every kernel and copy of the process
        between two CUDA events: fp16 matmuls back to back and pinned
        copies each way. Writes the events' elapsed time (ref_ms), which
        the lease's measured busy time must match within 1 %.
    gputime_jobs.py profile WHEN OUT.json
        torch.profiler around the same small workload, started "before"
        the process's first CUDA work or "after" it (the lease and the
        collector already running). Writes what the profiler saw: the
        number of kernel events and their total device time.
    gputime_jobs.py loop N OUT.json
        A launch-heavy loop: N tiny in-place adds on one small tensor
        (about 5 us of GPU each, so the CPU launch path dominates),
        timed from the first launch to the last kernel's end (wall_s).
"""
import json
import sys
import time

import torch


def matmuls(a, b, c, n):
    for _ in range(n // 2):  # one GEMM each, back to back
        torch.mm(a, b, out=c)
        torch.mm(c, b, out=a)


def accuracy(out):
    dev = torch.device("cuda")
    torch.cuda.init()
    # Allocations only (no kernel) before the first event.
    a = torch.empty(8192, 8192, dtype=torch.float16, device=dev)
    b = torch.empty(8192, 8192, dtype=torch.float16, device=dev)
    c = torch.empty(8192, 8192, dtype=torch.float16, device=dev)
    host = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    buf = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    e0.record()
    a.normal_()
    b.normal_().mul_(1.0 / 90.0)  # about 1/sqrt(8192): values stay finite
    matmuls(a, b, c, 400)
    for _ in range(4):
        buf.copy_(host, non_blocking=True)
        host.copy_(buf, non_blocking=True)
    matmuls(a, b, c, 400)
    e1.record()
    torch.cuda.synchronize()
    # Nothing runs on the GPU after e1: every kernel and copy of the
    # process lies between the events.
    json.dump({"ref_ms": e0.elapsed_time(e1)}, open(out, "w"))


def profile(when, out):
    from torch.profiler import ProfilerActivity, profile as tprof
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    dev = torch.device("cuda")
    if when == "after":
        # The lease, and with it the collector, start here.
        x = torch.ones(1024, 1024, device=dev)
        torch.cuda.synchronize()
    with tprof(activities=acts) as prof:
        a = torch.ones(2048, 2048, device=dev)
        for _ in range(20):
            a = a @ a / 2048.0
        torch.cuda.synchronize()
    kern = [e for e in prof.events()
            if getattr(e, "device_type", None) is not None
            and str(e.device_type).endswith("CUDA")]
    dev_us = sum(getattr(e, "device_time_total", 0) or 0 for e in kern)
    if when == "after":
        del x
    json.dump({"when": when, "kernel_events": len(kern),
               "device_us": dev_us}, open(out, "w"))


def loop(n, out):
    x = torch.zeros(16, device="cuda")
    for _ in range(1000):  # warm: the allocator, the kernel's module
        x.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    json.dump({"n": n, "wall_s": time.perf_counter() - t0,
               "value": float(x[0].item())}, open(out, "w"))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "accuracy":
        accuracy(sys.argv[2])
    elif mode == "profile":
        profile(sys.argv[2], sys.argv[3])
    elif mode == "loop":
        loop(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(f"unknown mode {mode}")
