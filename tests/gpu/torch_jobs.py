#!/usr/bin/env python3
"""PyTorch jobs of the GPU scenario set (tests/gpu/run.sh, bench/gpu_bench.py).

    torch_jobs.py MODE [ARGS]

Every job journals (tests/gpu/gj.py) `begin` right after its first CUDA
work is synchronised, `tick`s while it works, `end` after its last CUDA
work is synchronised, and `result ok=1` only if it checked what it computed.

Modes:
  mm [--seconds S] [--size N]  bf16 matmuls for S seconds (checked: A @ I == A
                               exactly), then a float64 matmul against the CPU
  avail                        only torch.cuda.is_available() and
                               device_count() (with PYTORCH_NVML_BASED_CUDA_CHECK=1
                               they use NVML and never call cuInit)
  subproc                      uses CUDA, then runs two children that use CUDA
                               too (subprocess.run): a torch one with the
                               default env=None (C environment) and a ctypes
                               libcuda one with env=dict(os.environ); both must
                               join this job's lease (GPUMUTEX_TIMEOUT=30 is
                               set for them, so a child that queues fails)
  child-torch JOB, child-ctypes JOB   the children (JOB: the parent's job id)
  mp                           torch.multiprocessing.spawn, 2 workers; the
                               parent never touches CUDA; the workers meet at
                               a barrier after their first CUDA work, which is
                               only possible if both are members of one lease
  dataloader                   CUDA first, then a DataLoader with 2 forked
                               workers (CPU dataset), two epochs
  holdloop [--seconds S]       matmuls with a tick every few ms until killed
  query KIND [--stdin]         device queries only, no context: KIND avail
                               (is_available + device_count), props
                               (get_device_name/properties/capability),
                               cuinit (is_available with the NVML check off:
                               the runtime's cuInit and private queries);
                               journals info with its pid and the time the
                               queries took; --stdin: then waits for EOF on
                               stdin, holding nothing
  qcg                          queries, then 1 s of CPU work, then GPU work:
                               journals info stage=queried and stage=cpu-done
                               before its first CUDA work
  compile                      torch.compile of a small function on the GPU,
                               checked against eager
  graphs                       a CUDA graph captured and replayed 100 times,
                               checked
  launches [--n N]             N tiny kernel launches, timed inside (the
                               launch-heavy loop of bench/gpu_bench.py)
"""

import ctypes
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gj  # noqa: E402


def arg(name, default):
    if name in sys.argv:
        return type(default)(sys.argv[sys.argv.index(name) + 1])
    return default


def cuda_start(torch):
    """cuInit (where gpumutex queues), then the first work; journal begin."""
    t_pre = gj.now()
    torch.cuda.init()
    t_init = gj.now()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    gj.begin(pre=t_pre, init=t_init)


def reference_check(torch):
    """A float64 matmul on the GPU against the CPU."""
    g = torch.Generator().manual_seed(1234)
    a = torch.randn(256, 256, dtype=torch.float64, generator=g)
    b = torch.randn(256, 256, dtype=torch.float64, generator=g)
    c = (a.cuda() @ b.cuda()).cpu()
    return bool(torch.allclose(c, a @ b, rtol=1e-12, atol=1e-12))


def matmuls(torch, seconds, n):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    eye = torch.eye(n, device="cuda", dtype=torch.bfloat16)
    stop = time.monotonic() + seconds
    iters = 0
    while True:
        for _ in range(10):
            c = a @ b
        torch.cuda.synchronize()
        iters += 10
        gj.tick()
        if time.monotonic() >= stop:
            break
    ok_id = bool(torch.equal(a @ eye, a)) and bool(torch.isfinite(c).all())
    ok_ref = reference_check(torch)
    torch.cuda.synchronize()
    return ok_id and ok_ref, iters


def mode_mm():
    import torch
    cuda_start(torch)
    ok, iters = matmuls(torch, arg("--seconds", 1.0), arg("--size", 8192))
    gj.end()
    return gj.result(ok, iters=iters)


def mode_avail():
    import torch
    t0 = gj.now()
    avail = torch.cuda.is_available()
    count = torch.cuda.device_count()
    t1 = gj.now()
    nvml = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1"
    # No context: the process holds no lease (docs/preload.md, "When the
    # lease is taken"), so it journals no holding.
    gj.info(avail=int(avail), count=count, call_ns=t1 - t0, nvml=int(nvml))
    return gj.result(avail and count == 1, avail=int(avail), count=count,
                     call_ms=f"{(t1 - t0) / 1e6:.0f}")


def _queries(torch, kind):
    if kind == "props":
        name = torch.cuda.get_device_name(0)
        p = torch.cuda.get_device_properties(0)
        cap = torch.cuda.get_device_capability(0)
        return bool(name) and p.total_memory > 0 and cap[0] >= 7, \
            dict(name=name.replace(" ", "_"), cc="%d.%d" % cap)
    avail = torch.cuda.is_available()
    count = torch.cuda.device_count()
    return avail and count == 1, dict(avail=int(avail), count=count)


def mode_query():
    kind = sys.argv[2]
    if kind == "cuinit":
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "0"
    import torch
    gj.info(stage="start", qpid=os.getpid())
    t0 = gj.now()
    ok, kw = _queries(torch, "avail" if kind == "cuinit" else kind)
    t1 = gj.now()
    gj.info(stage="queried", qpid=os.getpid(), call_ns=t1 - t0,
            nvml=os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK", "-"), **kw)
    if "--stdin" in sys.argv:
        sys.stdin.read()
    return gj.result(ok, call_ms=f"{(t1 - t0) / 1e6:.0f}", **kw)


def mode_qcg():
    import torch
    ok, kw = _queries(torch, "props")
    gj.info(stage="queried", qpid=os.getpid(), **kw)
    a = torch.randn(1024, 1024)
    stop = time.monotonic() + 1.0
    while time.monotonic() < stop:
        a = (a @ a).clamp_(-1, 1)
    gj.info(stage="cpu-done", qpid=os.getpid())
    cuda_start(torch)
    ok2, iters = matmuls(torch, 0.5, 4096)
    gj.end()
    return gj.result(ok and ok2, iters=iters)


def mode_compile():
    import torch
    cuda_start(torch)

    def f(x, y):
        return torch.sin(x) * torch.cos(y) + x * y

    g = torch.compile(f)
    x = torch.randn(4096, device="cuda")
    y = torch.randn(4096, device="cuda")
    ok = True
    for _ in range(3):
        ok &= bool(torch.allclose(g(x, y), f(x, y), atol=1e-5))
        torch.cuda.synchronize()
        gj.tick()
    gj.end()
    return gj.result(ok)


def mode_graphs():
    import torch
    cuda_start(torch)
    x = torch.zeros(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x.add_(1)  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        x.add_(1)
    for _ in range(100):
        graph.replay()
    torch.cuda.synchronize()
    gj.tick()
    ok = bool((x == 101).all())  # the warm-up and 100 replays (capture runs nothing)
    gj.end()
    return gj.result(ok, value=float(x[0]))


def mode_launches():
    import torch
    n = arg("--n", 20000)
    cuda_start(torch)
    x = torch.zeros(16, device="cuda")
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    t1 = time.perf_counter_ns()
    gj.end()
    ok = float(x[0]) == 1000 + n
    print("launch_ns=%d" % ((t1 - t0) // n))
    return gj.result(ok, launch_ns=(t1 - t0) // n)


def mode_subproc():
    import torch
    cuda_start(torch)
    job = gj.cenv("GPUMUTEX_JOB")
    me = os.path.abspath(__file__)
    # os.environ assignments reach the C environment too (putenv).
    os.environ["GPUMUTEX_TIMEOUT"] = "30"
    t = gj.now()
    r1 = subprocess.run([sys.executable, me, "child-torch", job], timeout=200)
    gj.info(child="child-torch", rc=r1.returncode, ms=(gj.now() - t) // 10**6)
    t = gj.now()
    r2 = subprocess.run([sys.executable, me, "child-ctypes", job],
                        env=dict(os.environ), timeout=100)
    gj.info(child="child-ctypes", rc=r2.returncode, ms=(gj.now() - t) // 10**6)
    ok, iters = matmuls(torch, 0.3, 4096)
    gj.end()
    return gj.result(ok and r1.returncode == 0 and r2.returncode == 0,
                     child_torch_rc=r1.returncode, child_ctypes_rc=r2.returncode)


def mode_child_torch():
    gj.ROLE = "child-torch"
    import torch
    cuda_start(torch)
    ok = reference_check(torch)
    torch.cuda.synchronize()
    gj.end()
    same = gj.cenv("GPUMUTEX_JOB") == sys.argv[2]
    return gj.result(ok and same, same_job=int(same))


def mode_child_ctypes():
    gj.ROLE = "child-ctypes"
    cu = ctypes.CDLL("libcuda.so.1")
    u64, sz = ctypes.c_uint64, ctypes.c_size_t
    cu.cuMemsetD32_v2.argtypes = [u64, ctypes.c_uint, sz]
    cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, u64, sz]
    n, val = 1 << 20, 0x5A5A1234
    t_pre = gj.now()
    rc = cu.cuInit(0)
    t_init = gj.now()
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), u64()
    steps = [rc, cu.cuDeviceGet(ctypes.byref(dev), 0),
             cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
             cu.cuCtxSetCurrent(ctx),
             cu.cuMemAlloc_v2(ctypes.byref(ptr), sz(n * 4)),
             cu.cuMemsetD32_v2(ptr, val, n), cu.cuCtxSynchronize()]
    if any(steps):
        return gj.result(False, rcs=",".join(map(str, steps)))
    gj.begin(pre=t_pre, init=t_init)
    host = (ctypes.c_uint * n)()
    rc = cu.cuMemcpyDtoH_v2(host, ptr, n * 4)
    gj.end()
    ok = rc == 0 and all(v == val for v in host)
    same = gj.cenv("GPUMUTEX_JOB") == sys.argv[2]
    return gj.result(ok and same, same_job=int(same))


def _mp_worker(i, barrier, parent_job):
    gj.ROLE = f"worker{i}"
    import torch
    cuda_start(torch)
    t = gj.now()
    barrier.wait(timeout=120)
    gj.info(barrier_ms=(gj.now() - t) // 10**6)
    ok, iters = matmuls(torch, 0.5, 4096)
    gj.end()
    same = gj.cenv("GPUMUTEX_JOB") == parent_job
    if gj.result(ok and same, same_job=int(same), iters=iters):
        raise SystemExit(1)


def mode_mp():
    import torch.multiprocessing as mp
    barrier = mp.get_context("spawn").Barrier(2)
    mp.spawn(_mp_worker, args=(barrier, gj.cenv("GPUMUTEX_JOB")), nprocs=2,
             join=True)
    # The parent never initialised CUDA (gpumutex-run sets
    # CUDA_VISIBLE_DEVICES in every job's environment, so ask torch).
    import torch
    init = torch.cuda.is_initialized()
    return gj.result(not init, workers=2, parent_cuda=int(init))


def mode_dataloader():
    import torch
    from torch.utils.data import DataLoader, Dataset, get_worker_info

    class Numbers(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            w = get_worker_info()
            return torch.full((1024,), float(i)), (w.id if w else -1), os.getpid()

    cuda_start(torch)
    ok = True
    pids = set()
    for epoch in range(2):
        dl = DataLoader(Numbers(), batch_size=8, num_workers=2,
                        multiprocessing_context="fork")
        total, wids, epids = 0.0, set(), set()
        for x, wid, pid in dl:
            total += x.cuda().sum().item()
            wids |= set(wid.tolist())
            epids |= set(pid.tolist())
            torch.cuda.synchronize()
            gj.tick()
        good = (total == 1024 * sum(range(64)) and wids == {0, 1}
                and os.getpid() not in epids)
        gj.info(epoch=epoch, total=total, workers=len(epids), ok=int(good))
        ok = ok and good
        pids |= epids
    ok = ok and reference_check(torch)
    torch.cuda.synchronize()
    gj.end()
    return gj.result(ok, worker_pids=len(pids))


def mode_holdloop():
    import torch
    cuda_start(torch)
    a = torch.randn(4096, 4096, device="cuda")
    stop = time.monotonic() + arg("--seconds", 180.0)
    while time.monotonic() < stop:
        for _ in range(5):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()
        gj.tick()
    gj.end()
    return gj.result(True)


MODES = {"mm": mode_mm, "avail": mode_avail, "subproc": mode_subproc,
         "child-torch": mode_child_torch, "child-ctypes": mode_child_ctypes,
         "mp": mode_mp, "dataloader": mode_dataloader,
         "holdloop": mode_holdloop, "query": mode_query, "qcg": mode_qcg,
         "compile": mode_compile, "graphs": mode_graphs,
         "launches": mode_launches}

if __name__ == "__main__":
    sys.exit(MODES[sys.argv[1]]())
