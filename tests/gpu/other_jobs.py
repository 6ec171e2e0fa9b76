#!/usr/bin/env python3
"""JAX, CuPy and numba jobs of the GPU scenario set (tests/gpu/run.sh);
Triton's is tests/gpu/triton_job.py (its kernel must be a module global).

    other_jobs.py jax|cupy|numba

Same journal as torch_jobs.py (tests/gpu/gj.py): `begin` after the first
GPU work is synchronised, `end` after the last, `result ok=1` only if the
job checked its results on the GPU (never a silent CPU fallback).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gj  # noqa: E402


def mode_jax():
    import jax
    import jax.numpy as jnp
    import numpy as np
    t_pre = gj.now()
    jnp.ones(4).block_until_ready()
    gj.begin(pre=t_pre)
    backend = jax.default_backend()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    hi = jax.lax.Precision.HIGHEST
    c = jnp.matmul(jnp.asarray(a), jnp.asarray(b), precision=hi)
    ok = bool(np.allclose(np.asarray(c), a @ b, rtol=1e-4, atol=1e-3))
    x = jnp.asarray(rng.standard_normal((4096, 4096)).astype(np.float32))
    f = jax.jit(lambda m: jnp.tanh(m @ m))
    stop = time.monotonic() + 0.5
    while time.monotonic() < stop:
        x = f(x).block_until_ready()
        gj.tick()
    ok = ok and bool(jnp.isfinite(x).all())
    gj.end()
    return gj.result(ok and backend == "gpu", backend=backend,
                     devices=len(jax.devices()))


def mode_cupy():
    import cupy as cp
    import numpy as np
    t_pre = gj.now()
    cp.ones(4)
    cp.cuda.Device().synchronize()
    gj.begin(pre=t_pre)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((512, 512))
    b = rng.standard_normal((512, 512))
    c = cp.asnumpy(cp.asarray(a) @ cp.asarray(b))
    ok = bool(np.allclose(c, a @ b, rtol=1e-12, atol=1e-12))
    x = cp.random.standard_normal((4096, 4096), dtype=cp.float32)
    stop = time.monotonic() + 0.5
    while time.monotonic() < stop:
        x = cp.tanh(x @ x)
        cp.cuda.Device().synchronize()
        gj.tick()
    ok = ok and bool(cp.isfinite(x).all())
    cp.cuda.Device().synchronize()
    gj.end()
    return gj.result(ok, ndev=cp.cuda.runtime.getDeviceCount())


def _driver_memset_check(val=0x3C3C0001, n=1 << 20):
    """cuda-python's driver bindings: memset on the device, copy back."""
    import numpy as np
    from cuda.bindings import driver as cu
    ok0 = cu.CUresult.CUDA_SUCCESS

    def chk(r):
        err = r[0]
        if err != ok0:
            raise RuntimeError(f"cuda.bindings.driver: {err}")
        return r[1] if len(r) > 1 else None

    chk(cu.cuInit(0))
    dev = chk(cu.cuDeviceGet(0))
    ctx = chk(cu.cuDevicePrimaryCtxRetain(dev))
    chk(cu.cuCtxSetCurrent(ctx))
    ptr = chk(cu.cuMemAlloc(n * 4))
    chk(cu.cuMemsetD32(ptr, val, n))
    chk(cu.cuCtxSynchronize())
    host = np.zeros(n, dtype=np.uint32)
    chk(cu.cuMemcpyDtoH(host.ctypes.data, ptr, n * 4))
    chk(cu.cuMemFree(ptr))
    return bool((host == val).all())


def mode_numba():
    """numba.cuda with a @cuda.jit kernel if numba-cuda can compile one;
    otherwise numba.cuda device arrays plus cuda.bindings.driver, and the
    result says which path ran and why."""
    import numpy as np
    t_pre = gj.now()
    notes = {}
    try:
        from numba import cuda
        d = cuda.to_device(np.arange(1 << 20, dtype=np.float32))
        cuda.synchronize()
    except Exception as e:  # numba itself unusable: driver bindings only
        notes["numba_err"] = type(e).__name__ + ":" + str(e)[:120]
        ok = _driver_memset_check()
        gj.begin(pre=t_pre)
        ok = _driver_memset_check() and ok
        gj.end()
        return gj.result(ok, path="cuda.bindings.driver", **notes)
    gj.begin(pre=t_pre)
    host = np.arange(1 << 20, dtype=np.float32)
    try:
        @cuda.jit
        def affine(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = a[i] * 2.0 + 1.0

        affine[(d.size + 255) // 256, 256](d)
        cuda.synchronize()
        ok = bool(np.array_equal(d.copy_to_host(), host * 2 + 1))
        path = "numba.cuda.jit"
    except Exception as e:
        notes["jit_err"] = type(e).__name__ + ":" + str(e)[:120]
        back = d.copy_to_host()
        ok = bool(np.array_equal(back, host)) and _driver_memset_check()
        path = "numba.cuda-device-arrays+cuda.bindings.driver"
    cuda.synchronize()
    gj.end()
    return gj.result(ok, path=path, gpus=len(cuda.gpus), **notes)


def mode_cupy_query():
    """CuPy's runtime queries only (no context): the runtime's cuInit and
    private functions; journals the time and its pid."""
    import cupy
    t0 = gj.now()
    n = cupy.cuda.runtime.getDeviceCount()
    p = cupy.cuda.runtime.getDeviceProperties(0)
    t1 = gj.now()
    gj.info(stage="queried", qpid=os.getpid(), call_ns=t1 - t0, count=n)
    return gj.result(n == 1 and p["major"] >= 7, count=n,
                     call_ms=f"{(t1 - t0) / 1e6:.0f}")


MODES = {"jax": mode_jax, "cupy": mode_cupy, "numba": mode_numba,
         "cupy-query": mode_cupy_query}

if __name__ == "__main__":
    sys.exit(MODES[sys.argv[1]]())
