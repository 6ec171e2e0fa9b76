"""The jobs of tests/gpu/suspend.sh (idle suspension on a real GPU).

  torch-holder GIB OUT   a "notebook": GIB GiB of tensors and a CUDA graph,
                         checksums taken, then idle (no CUDA call) until
                         OUT/release exists; then its next operations:
                         resume time, checksums again, graph replayed
  jax-holder GIB OUT     the same with a JAX array (GIB: preallocation)
  cupy-holder GIB OUT    the same with a CuPy array
  bench OUT [SECONDS]    a waiting job: time to its first CUDA operation,
                         then its solo bf16 matmul TFLOP/s; touches
                         OUT/release when done
  waiter OUT             a small waiting job (one allocation), then touches
                         OUT/release
  exit-holder GIB OUT    a torch holder of GIB GiB that, once OUT/release
                         exists, exits without another CUDA call of its own
                         (its teardown alone: does it wait for its GPU?)
  bench-hold OUT SECONDS a waiting job that touches OUT/release at its
                         first CUDA operation, then keeps the GPU busy for
                         SECONDS
  probe CASE             without gpumutex: set up CASE, then lock and
                         checkpoint this process from a side thread, restore
                         and unlock; prints what each step returned

Each writes one JSON line to stdout.
"""
import ctypes
import json
import os
import sys
import threading
import time

T0 = time.time()


def wait_release(out):
    path = os.path.join(out, "release")
    while not os.path.exists(path):
        time.sleep(0.05)  # idle: no CUDA call


def touch_release(out):
    with open(os.path.join(out, "release"), "w"):
        pass


def emit(d):
    print(json.dumps(d), flush=True)


def torch_holder(gib, out):
    import torch
    n = int(gib * (1 << 30) // 4 // (1 << 24))  # chunks of 64 MiB floats
    g = torch.Generator(device="cuda").manual_seed(1)
    chunks = [torch.randn(1 << 24, device="cuda", generator=g)
              for _ in range(max(n, 1))]
    before = [float(c.double().sum()) for c in chunks]
    x = torch.randn(1024, 1024, device="cuda")
    w = torch.randn(1024, 1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = x @ w
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x @ w
    graph.replay()
    torch.cuda.synchronize()
    graph_before = float(y.double().sum())
    used = torch.cuda.memory_reserved()
    t_idle = time.time()
    emit({"ready": True, "t_idle": t_idle, "reserved": used})
    wait_release(out)
    t1 = time.time()
    torch.cuda.synchronize()          # the first call: waits, restores
    t2 = time.time()
    after = [float(c.double().sum()) for c in chunks]
    y.zero_()
    graph.replay()
    torch.cuda.synchronize()
    emit({"job": "torch-holder", "gib": gib, "reserved": used,
          "t_idle": t_idle, "t_release": t1,
          "resume_first_call_s": t2 - t1,
          "checksums_equal": before == after,
          "graph_replay_equal": float(y.double().sum()) == graph_before})


def jax_holder(gib, out):
    import jax
    import jax.numpy as jnp
    n = int(gib * (1 << 30) // 4)
    a = jax.random.normal(jax.random.PRNGKey(0), (n,), dtype=jnp.float32)
    before = float(jnp.sum(a.astype(jnp.float32)))
    emit({"ready": True, "t_idle": time.time()})
    wait_release(out)
    t1 = time.time()
    after = float(jnp.sum(a.astype(jnp.float32)))
    t2 = time.time()
    emit({"job": "jax-holder", "gib": gib, "resume_first_op_s": t2 - t1,
          "checksums_equal": before == after})


def cupy_holder(gib, out):
    import cupy as cp
    n = int(gib * (1 << 30) // 4)
    a = cp.random.default_rng(0).standard_normal(n, dtype=cp.float32)
    before = float(a.sum(dtype=cp.float64))
    emit({"ready": True, "t_idle": time.time()})
    wait_release(out)
    t1 = time.time()
    after = float(a.sum(dtype=cp.float64))
    t2 = time.time()
    emit({"job": "cupy-holder", "gib": gib, "resume_first_op_s": t2 - t1,
          "checksums_equal": before == after})


def bench(out, seconds=5.0):
    t_start = time.time()
    import torch
    t_import = time.time()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t_first = time.time()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    n, t = 0, time.time()
    while time.time() - t < seconds:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        n += 10
    dt = time.time() - t
    touch_release(out)
    emit({"job": "bench", "t_start": t_start, "t_import": t_import,
          "t_first": t_first, "tflops": 2 * 8192 ** 3 * n / dt / 1e12})


def waiter(out):
    t_start = time.time()
    import torch
    t_import = time.time()
    torch.ones(1 << 20, device="cuda").sum().item()
    t_first = time.time()
    touch_release(out)
    emit({"job": "waiter", "t_start": t_start, "t_import": t_import,
          "t_first": t_first})


def exit_holder(gib, out):
    import torch
    n = int(gib * (1 << 30) // 4 // (1 << 24))
    chunks = [torch.ones(1 << 24, device="cuda") for _ in range(max(n, 1))]
    torch.cuda.synchronize()
    emit({"ready": True, "t_idle": time.time(), "chunks": len(chunks)})
    wait_release(out)
    emit({"job": "exit-holder", "t_exit": time.time()})
    # Python's finalisation and the CUDA teardown follow, from here.


def bench_hold(out, seconds):
    t_start = time.time()
    import torch
    t_import = time.time()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t_first = time.time()
    touch_release(out)
    while time.time() - t_first < seconds:
        for _ in range(50):
            a @ a
        torch.cuda.synchronize()
    emit({"job": "bench-hold", "t_start": t_start, "t_import": t_import,
          "t_first": t_first, "t_end": time.time()})


# ---- Probes: what the driver itself declines -----------------------------

def ckpt_self(extra=None):
    """Lock, checkpoint, restore, unlock this process from a side thread;
    the return codes and times of each step."""
    cu = ctypes.CDLL("libcuda.so.1")
    pid = os.getpid()
    res = {}

    class LockArgs(ctypes.Structure):
        _fields_ = [("timeoutMs", ctypes.c_uint), ("r0", ctypes.c_uint),
                    ("r1", ctypes.c_ulonglong * 7)]

    def run():
        la = LockArgs(timeoutMs=3000)
        for name, fn, arg in (("lock", cu.cuCheckpointProcessLock,
                               ctypes.byref(la)),
                              ("checkpoint", cu.cuCheckpointProcessCheckpoint,
                               None),
                              ("restore", cu.cuCheckpointProcessRestore, None),
                              ("unlock", cu.cuCheckpointProcessUnlock, None)):
            t = time.time()
            rc = fn(pid, arg)
            res[name] = rc
            res[name + "_s"] = round(time.time() - t, 3)
            if rc and name in ("lock", "checkpoint"):
                if name == "checkpoint":
                    res["undo_unlock"] = cu.cuCheckpointProcessUnlock(pid,
                                                                      None)
                break
            if name == "lock" and extra:
                extra(res)
    th = threading.Thread(target=run)
    th.start()
    th.join()
    st = ctypes.c_int(-1)
    res["state_after"] = (cu.cuCheckpointProcessGetState(pid,
                                                         ctypes.byref(st)),
                          st.value)
    return res


def probe(case):
    out = {"probe": case}
    if case == "baseline":
        import torch
        a = torch.ones(1 << 28, device="cuda")
        out.update(ckpt_self())
        out["intact"] = float(a.sum()) == float(1 << 28)
    elif case == "managed":
        import cupy as cp
        m = cp.cuda.malloc_managed(1 << 28)
        a = cp.ndarray((1 << 26,), dtype=cp.float32, memptr=m)
        a.fill(1)
        out.update(ckpt_self())
        out["intact"] = float(a.sum()) == float(1 << 26)
    elif case == "two-contexts":
        import torch
        torch.ones(1, device="cuda")
        cu = ctypes.CDLL("libcuda.so.1")
        ctx = ctypes.c_void_p()
        cur = ctypes.c_void_p()
        cu.cuCtxGetCurrent(ctypes.byref(cur))
        out["create"] = cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0)
        cu.cuCtxSetCurrent(cur)
        out.update(ckpt_self())
    elif case == "ipc-exporter":
        import torch
        import torch.multiprocessing as mp
        a = torch.ones(1 << 20, device="cuda")
        q = mp.get_context("spawn").SimpleQueue()
        p = mp.get_context("spawn").Process(target=_ipc_child, args=(q, a))
        p.start()
        out["child_sum"] = q.get()
        out.update(ckpt_self())
        q.put("done")
        p.join()
    elif case == "inflight":
        # Does the lock wait for an API call in flight (a synchronize of a
        # long kernel in another thread)? Lock with a 3 s timeout.
        import torch
        torch.cuda._sleep(int(3e9))  # about 2 s of spinning on an H100
        th = threading.Thread(target=torch.cuda.synchronize)
        th.start()
        time.sleep(0.1)
        out.update(ckpt_self())
        th.join()
    elif case == "call-while-locked":
        # How a call made while locked behaves: it blocks until unlock?
        import torch
        a = torch.ones(1 << 20, device="cuda")
        took = {}

        def during_lock(res):
            def call():
                t = time.time()
                took["sum"] = float(a.sum())
                took["call_s"] = round(time.time() - t, 3)
            c = threading.Thread(target=call)
            c.start()
            time.sleep(1.0)
            res["call_done_while_locked"] = "sum" in took
            c.join(0.01)
            res["_thread"] = c
        r = ckpt_self(during_lock)
        r.pop("_thread").join()
        out.update(r)
        out.update(took)
    elif case == "queries-while-suspended":
        # The library hands the pure queries out unwrapped: do they block
        # (until the restore) while the process is checkpointed? Each in
        # its own thread; which returned within 1 s, and how long each took.
        import torch
        torch.ones(1, device="cuda")
        cu = ctypes.CDLL("libcuda.so.1")
        took = {}

        def q(name, fn):
            t = time.time()
            rc = fn()
            took[name] = (rc, round(time.time() - t, 3))

        def during(res):
            if cu.cuCheckpointProcessCheckpoint(os.getpid(), None):
                res["checkpoint_failed"] = True
                return
            v = ctypes.c_int()
            c = ctypes.c_void_p()
            fl = ctypes.c_uint()
            act = ctypes.c_int()
            qs = {"cuDriverGetVersion": lambda: cu.cuDriverGetVersion(ctypes.byref(v)),
                  "cuDeviceGetCount": lambda: cu.cuDeviceGetCount(ctypes.byref(v)),
                  "cuDeviceGetAttribute": lambda: cu.cuDeviceGetAttribute(ctypes.byref(v), 16, 0),
                  "cuCtxGetCurrent": lambda: cu.cuCtxGetCurrent(ctypes.byref(c)),
                  "cuDevicePrimaryCtxGetState": lambda: cu.cuDevicePrimaryCtxGetState(0, ctypes.byref(fl), ctypes.byref(act))}
            ths = [threading.Thread(target=q, args=(n, f)) for n, f in qs.items()]
            for t in ths:
                t.start()
            time.sleep(1.0)
            res["returned_while_checkpointed"] = sorted(took)
            res["blocked_while_checkpointed"] = sorted(set(qs) - set(took))
            rc = cu.cuCheckpointProcessRestore(os.getpid(), None)
            res["restore_in_probe"] = rc
            res["_ths"] = ths
        # ckpt_self's own checkpoint then finds the process checkpointed
        # already (it reports the error); the restore above undid ours.
        r = ckpt_self(during)
        for t in r.pop("_ths", []):
            t.join(5)
        out.update(r)
        out["query_times"] = took
    emit(out)


def _ipc_child(q, a):
    q.put(float(a.sum()))
    q.get()


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "torch-holder":
        torch_holder(float(sys.argv[2]), sys.argv[3])
    elif cmd == "jax-holder":
        jax_holder(float(sys.argv[2]), sys.argv[3])
    elif cmd == "cupy-holder":
        cupy_holder(float(sys.argv[2]), sys.argv[3])
    elif cmd == "bench":
        bench(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 5.0)
    elif cmd == "waiter":
        waiter(sys.argv[2])
    elif cmd == "exit-holder":
        exit_holder(float(sys.argv[2]), sys.argv[3])
    elif cmd == "bench-hold":
        bench_hold(sys.argv[2], float(sys.argv[3]))
    elif cmd == "probe":
        probe(sys.argv[2])
    else:
        sys.exit(f"unknown job {cmd}")
