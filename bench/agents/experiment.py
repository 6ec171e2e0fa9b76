#!/usr/bin/env python3
"""One experiment of a simulated agent (bench/agents/agents.py).

    experiment.py --journal FILE --tag TAG [--prep S] [--gpu S] [--post S]
                  [--size N] [--fake] [--mem BYTES]

CPU preparation for PREP seconds (counted from the process's start, so
`import torch` is part of it), GPU work for GPU seconds, CPU
post-processing for POST seconds, then exit: the whole life of a job
that an agent starts. The GPU work is bf16 matmuls of N x N matrices in
torch (--fake: launches and synchronisations on the fake driver, through
ctypes, holding MEM bytes of device memory).

Appends one line to FILE (one write(2), O_APPEND, so lines of concurrent
jobs never interleave), times in CLOCK_MONOTONIC nanoseconds:

  ev=exp tag= pid= start= call= begin= end= done= iters= flop= ok=

call: just before the first GPU call (where gpumutex queues the job);
begin: its first GPU work synchronised (the lease was granted and the
context made before it); end: its last GPU work synchronised; done:
post-processing finished, just before the interpreter exits. flop: the
floating-point operations between begin and end (0 under --fake).
"""

import argparse
import os
import sys
import time

T_START = time.monotonic_ns()


def spin(until_ns):
    """CPU work (not a sleep) until the monotonic clock reaches until_ns."""
    x = 0
    while time.monotonic_ns() < until_ns:
        for i in range(2000):
            x += i * i
    return x


def gpu_torch(seconds, n):
    import torch
    call = time.monotonic_ns()
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = a @ b
    torch.cuda.synchronize()
    begin = time.monotonic_ns()
    iters, batch = 0, 8
    stop = begin + int(seconds * 1e9)
    while True:
        for _ in range(batch):
            c = a @ b
        torch.cuda.synchronize()
        iters += batch
        end = time.monotonic_ns()
        if end >= stop:
            break
    ok = bool(torch.isfinite(c[0, :8].float()).all().item())
    return call, begin, end, iters, 2.0 * n ** 3 * iters, ok


def gpu_fake(seconds, mem):
    import ctypes
    cu = ctypes.CDLL("libcuda.so.1")
    call = time.monotonic_ns()
    ctx, dev, ptr = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint64()
    rc = cu.cuInit(0) or cu.cuDeviceGet(ctypes.byref(dev), 0) or \
        cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) or \
        cu.cuCtxSetCurrent(ctx)
    if not rc and mem:
        rc = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mem))
    if rc:
        sys.stderr.write(f"experiment: fake driver call failed ({rc})\n")
        return call, 0, 0, 0, 0.0, False
    cu.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    cu.cuCtxSynchronize()
    begin = time.monotonic_ns()
    iters = 0
    stop = begin + int(seconds * 1e9)
    while True:
        cu.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None)
        time.sleep(0.005)  # the "kernel" runs
        cu.cuCtxSynchronize()
        iters += 1
        end = time.monotonic_ns()
        if end >= stop:
            break
    return call, begin, end, iters, 0.0, True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--journal", required=True)
    ap.add_argument("--tag", default="-")
    ap.add_argument("--prep", type=float, default=3.0)
    ap.add_argument("--gpu", type=float, default=5.0)
    ap.add_argument("--post", type=float, default=1.0)
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--fake", action="store_true")
    ap.add_argument("--mem", type=int, default=0)
    o = ap.parse_args()
    if not o.fake:
        import torch  # noqa: F401  (part of the preparation)
    spin(T_START + int(o.prep * 1e9))
    if o.fake:
        call, begin, end, iters, flop, ok = gpu_fake(o.gpu, o.mem)
    else:
        call, begin, end, iters, flop, ok = gpu_torch(o.gpu, o.size)
    spin(time.monotonic_ns() + int(o.post * 1e9))
    line = (f"ev=exp tag={o.tag} pid={os.getpid()} start={T_START} "
            f"call={call} begin={begin} end={end} "
            f"done={time.monotonic_ns()} iters={iters} flop={flop:.6g} "
            f"ok={int(ok)}\n")
    fd = os.open(o.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, line.encode())
    os.close(fd)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
