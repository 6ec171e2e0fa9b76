"""gemm_check.py run DIR | cmp CPUDIR GPUDIR - products of the gemm
pipeline's shapes, for a GPU machine (gemm2_device.sh): `run` computes
each case (fixed seed) and saves it in DIR; run once plainly (the CPU)
and once under `gpu-offload run` forced to the GPU, then `cmp` prints each
case's largest difference relative to its largest value. Cases: A @ B,
A.T @ B, A @ B.T (op(B) = B^T: panels of B's rows) in float64 and float32
at n = 4096, complex128 and complex64 A @ B.conj().T at n = 2048, and
scipy's dgemm with beta = 2 (C read: staged panel by panel) at n = 4096
(GEMM_CHECK_N: another n)."""
import os
import pathlib
import sys

import numpy as np


def cases():
    rng = np.random.default_rng(7)
    big = int(os.environ.get("GEMM_CHECK_N", "4096"))
    for dt, n in ((np.float64, big), (np.float32, big)):
        a = rng.standard_normal((n, n)).astype(dt)
        b = rng.standard_normal((n, n)).astype(dt)
        p = np.dtype(dt).char
        yield f"{p}-nn", lambda a=a, b=b: a @ b
        yield f"{p}-tn", lambda a=a, b=b: a.T @ b
        yield f"{p}-nt", lambda a=a, b=b: a @ b.T
    for dt in (np.complex128, np.complex64):
        n = big // 2
        a = (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))).astype(dt)
        b = (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))).astype(dt)
        yield f"{np.dtype(dt).char}-nh", lambda a=a, b=b: a @ b.conj().T
    try:
        from scipy.linalg import blas
    except ImportError:
        return
    n = big
    a = np.asfortranarray(rng.standard_normal((n, n)))
    b = np.asfortranarray(rng.standard_normal((n, n)))
    c = np.asfortranarray(rng.standard_normal((n, n)))
    yield "d-beta2-nt", lambda: blas.dgemm(1.0, a, b, beta=2.0, c=c.copy(order="F"),
                                           trans_b=1)


def main():
    if sys.argv[1] == "run":
        out = pathlib.Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for name, f in cases():
            np.save(out / f"{name}.npy", f())
        return
    a, b = pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    for f in sorted(a.glob("*.npy")):
        x, y = np.load(f), np.load(b / f.name)
        print(f"gemm_check: {f.stem}: largest difference relative to the largest "
              f"value {abs(x - y).max() / abs(x).max():.3g}")


main()
