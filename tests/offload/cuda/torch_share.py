"""torch_share.py - the CUDA backend next to the program's own CUDA use
(run by tests/offload/cuda/device.sh under gpu-offload, GPU forced): torch
creates its context (the device's primary one) and loads cuBLAS from its
wheels; an offloaded numpy dgemm must then reuse that cuBLAS (one copy
mapped), share the context, and leave the thread's current context as it
was; torch keeps working after it."""
import ctypes

import numpy as np
import torch

x = torch.ones(1024, 1024, device="cuda", dtype=torch.float64)
y = (x @ x).sum().item()
cu = ctypes.CDLL("libcuda.so.1")
before = ctypes.c_void_p()
cu.cuCtxGetCurrent(ctypes.byref(before))
a = np.full((2048, 2048), 0.5)
c = a @ a
after = ctypes.c_void_p()
cu.cuCtxGetCurrent(ctypes.byref(after))
z = (x @ x).sum().item()
maps = {line.split()[-1] for line in open("/proc/self/maps") if "libcublas.so" in line}
print(f"torch_share: dgemm ok: {bool(c[0, 0] == 512.0)}; current context "
      f"unchanged: {before.value == after.value} ({before.value:#x}); torch "
      f"after: {z == y}; cuBLAS mapped from {sorted(maps)}")
