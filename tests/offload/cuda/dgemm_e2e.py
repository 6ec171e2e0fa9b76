"""dgemm_e2e.py OUT.npy REPS - numpy's dgemm at n=8192 (float64), timed
per call, end to end (copies included); a sample of the product is saved
so that a run under gpu-offload can be compared with a plain one (run by
tests/offload/cuda/device.sh)."""
import sys
import time

import numpy as np

n = 8192
rng = np.random.default_rng(3)
a = rng.standard_normal((n, n))
b = rng.standard_normal((n, n))
c = None
for i in range(int(sys.argv[2])):
    t = time.perf_counter()
    c = a @ b
    print(f"dgemm_e2e: n={n} call {i}: {1e3 * (time.perf_counter() - t):.1f} ms", flush=True)
np.save(sys.argv[1], c[::97, ::89].copy())
