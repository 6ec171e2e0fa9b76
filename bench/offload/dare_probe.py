"""dare_probe.py [J] - where scipy's TestSolveDiscreteAre case J (11: the
one test of scipy.linalg's suite that fails with every call forced to the
GPU, a residual over its absolute tolerance) loses its tolerance: the
solution X computed on the CPU or on the GPU, and the test's residual of
it computed on the CPU or on the GPU (gpu_offload_pause switches between
them inside one process), four ways; then each X's residual in extended
precision (numpy's long double loops, no BLAS at all), which says how
good each X really is, whatever computes the check.

Run it under `gpu-offload run` with GPU_OFFLOAD_FORCE=gpu (and
GPU_OFFLOAD_MIN_FLOPS=0, as the suites' forced runs); without the
library every line is the CPU's. The case and its tolerance come from
the installed scipy's own test class (scipy 1.11 on: cases, max_tol or
min_decimal); where that class is absent, a small built-in case stands in
so that the probe itself runs.
"""
import ctypes
import sys

import numpy as np
from scipy.linalg import solve, solve_discrete_are


def load(j):
    """(a, b, q, r, atol, where) of case j."""
    try:
        from scipy.linalg.tests import test_solvers as M
        T = M.TestSolveDiscreteAre
        n = len(T.min_decimal)
        # the cases are the class's own, or (some versions) the module's
        # list of as many as the class's tolerances
        cases = getattr(T, "cases", None)
        if cases is None or len(cases) != n:
            cases = getattr(M, "cases", None)
        if cases is None or len(cases) != n:
            raise AttributeError("no case list of %d" % n)
        a, b, q, r = cases[j][:4]
        tol = getattr(T, "max_tol", None)
        atol = tol[j] if tol else 1.5 * 10.0 ** -T.min_decimal[j]
        return a, b, q, r, atol, "scipy's TestSolveDiscreteAre case %d" % j
    except (ImportError, AttributeError, IndexError, TypeError):
        a = np.array([[4.0, 3.0], [-4.5, -3.5]])
        b = np.array([[1.0], [-1.0]])
        q = np.array([[9.0, 6.0], [6.0, 4.0]])
        r = np.array([[1.0]])
        return a, b, q, r, 1e-12, "a built-in case (no TestSolveDiscreteAre here)"


def residual(a, b, q, r, x):
    """The test's residual: A'XA - X + Q - A'XB (R + B'XB)^-1 B'XA."""
    bh = b.conj().T
    xa, xb = x @ a, x @ b
    res = a.conj().T @ xa - x + q
    res -= a.conj().T @ xb @ (solve(r + bh @ xb, bh) @ xa)
    return res


def exact_residual(a, b, q, r, x):
    """The same in long double, numpy's own loops (no BLAS): the inverse
    through a long double Gauss-Jordan of the small R + B'XB."""
    t = np.clongdouble if np.iscomplexobj(a) or np.iscomplexobj(x) else np.longdouble
    a, b, q, r, x = (np.asarray(m, dtype=t) for m in (a, b, q, r, x))
    bh = b.conj().T
    xa, xb = x @ a, x @ b
    m = r + bh @ xb
    n = m.shape[0]
    aug = np.concatenate([m, np.eye(n, dtype=t)], axis=1)
    for i in range(n):
        p = i + int(np.argmax(np.abs(aug[i:, i])))
        aug[[i, p]] = aug[[p, i]]
        aug[i] /= aug[i, i]
        for k in range(n):
            if k != i:
                aug[k] -= aug[k, i] * aug[i]
    inv = aug[:, n:]
    return a.conj().T @ xa - x + q - a.conj().T @ xb @ (inv @ (bh @ xa))


def main():
    j = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    a, b, q, r, atol, where = load(j)
    try:
        sw = ctypes.CDLL(None).gpu_offload_pause
        sw.argtypes, sw.restype = [ctypes.c_int], ctypes.c_int
    except AttributeError:
        sw = None
    print("%s: a %s %s, atol %.2e; switch %s" % (
        where, a.shape, a.dtype, atol, "found" if sw else "absent (all on the CPU)"))

    def on(where):
        if sw:
            sw(1 if where == "cpu" else 0)

    xs = {}
    for xd in ("cpu", "gpu"):
        on(xd)
        xs[xd] = solve_discrete_are(a, b, q, r)
        for rd in ("cpu", "gpu"):
            on(rd)
            m = float(np.abs(residual(a, b, q, r, xs[xd])).max())
            print("X on the %s, residual on the %s: max |res| %.3e  %s"
                  % (xd, rd, m, "ok" if m <= atol else "OVER atol"))
    on("cpu")
    for xd in ("cpu", "gpu"):
        e = float(np.abs(exact_residual(a, b, q, r, xs[xd])).max())
        print("X on the %s, residual in long double: max |res| %.3e  %s"
              % (xd, e, "ok" if e <= atol else "OVER atol"))
    d = float(np.abs(xs["gpu"] - xs["cpu"]).max() / np.abs(xs["cpu"]).max())
    print("X: GPU against CPU, largest difference relative to the largest value %.2e" % d)
    on("gpu")


if __name__ == "__main__":
    main()
