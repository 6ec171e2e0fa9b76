"""dare_probe.py [J [K]] - where scipy's TestSolveDiscreteAre case J (11: the
one test of scipy.linalg's suite that fails with every call forced to the
GPU, a residual over its absolute tolerance) loses its tolerance: the
solution X computed on the CPU or on the GPU, and the test's residual of
it computed on the CPU or on the GPU (gpu_offload_pause switches between
them inside one process), four ways; then each X's residual in extended
precision (numpy's long double loops, no BLAS at all), which says how
good each X really is, whatever computes the check. With the switch
found, three more sections: a bisection (X with one callee of
solve_discrete_are on the GPU at a time), each callee's backward errors
on both devices for the same arguments, and the CPU alone with its
rounding disturbed at 2^-52 (the data, then every callee's arguments),
K runs each (200): how far a correct change of rounding moves the residual.
docs/benchmarks.md (the fifth run) has the H200's answer.

Run it under `gpu-offload run` with GPU_OFFLOAD_FORCE=gpu (and
GPU_OFFLOAD_MIN_FLOPS=0, as the suites' forced runs); without the
library every line is the CPU's. The case and its tolerance come from
the installed scipy's own test class (scipy 1.11 on: cases, max_tol or
min_decimal); where that class is absent, a small built-in case stands in
so that the probe itself runs.
"""
import contextlib
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
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 200
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
            m = worst(residual(a, b, q, r, xs[xd]))
            print("X on the %s, residual on the %s: max |res| %.3e  %s"
                  % (xd, rd, m, "ok" if m <= atol else "OVER atol"))
    on("cpu")
    for xd in ("cpu", "gpu"):
        e = worst(exact_residual(a, b, q, r, xs[xd]))
        print("X on the %s, residual in long double: max |res| %.3e  %s"
              % (xd, e, "ok" if e <= atol else "OVER atol"))
    d = _rel(xs["gpu"] - xs["cpu"], xs["cpu"])
    print("X: GPU against CPU, largest difference relative to the largest value %.2e" % d)
    if sw:
        bisect(a, b, q, r, atol, xs["cpu"], sw)
        accuracy(a, b, q, r, sw)
        perturbed(a, b, q, r, atol, sw, k)
    on("gpu")


# The functions solve_discrete_are calls by name from its own module (the
# products `@` and np.dot are the rest); the installed version's subset
# of them is wrapped. STAGES: those whose results X is built from.
CALLEES = ("solve", "solve_triangular", "matrix_balance", "lu", "qr", "ordqz",
           "svd", "inv", "norm", "cond", "schur", "lstsq")
STAGES = ("qr", "ordqz", "lu", "solve_triangular")


def present(names):
    """Those of NAMES that solve_discrete_are's module has, in order."""
    mod = sys.modules[solve_discrete_are.__module__]
    return [n for n in names if callable(getattr(mod, n, None))]


@contextlib.contextmanager
def patched(names, wrap):
    """Inside: each of NAMES (present ones) in solve_discrete_are's module
    replaced by wrap(name, original); yields {name: original}. The
    originals are back on the way out, whatever happened."""
    mod = sys.modules[solve_discrete_are.__module__]
    saved = {n: getattr(mod, n) for n in present(names)}
    for n, f in saved.items():
        setattr(mod, n, wrap(n, f))
    try:
        yield saved
    finally:
        for n, f in saved.items():
            setattr(mod, n, f)


def on_arrays(f, args):
    """ARGS with f applied to each ndarray among them."""
    return [f(x) if isinstance(x, np.ndarray) else x for x in args]


def worst(m):
    """The largest |element| of m, as a float."""
    return float(np.abs(m).max())


def bisect(a, b, q, r, atol, x_cpu, sw):
    """Which callee's GPU calls cost the tolerance: X computed with one
    callee on the GPU and all else on the CPU, for each callee, and once
    with every callee on the CPU and the rest (the products between them)
    on the GPU; each X checked on the CPU and in long double."""
    names = present(CALLEES)
    calls = {}

    def switched(paused):
        def wrap(n, f):
            def g(*args, **kw):
                calls[n] = calls.get(n, 0) + 1
                prev = sw(paused)
                try:
                    return f(*args, **kw)
                finally:
                    sw(prev)
            return g
        return wrap

    for only in names + [None]:
        calls.clear()
        with patched([only] if only else names, switched(0 if only else 1)):
            sw(1 if only else 0)
            try:
                x = solve_discrete_are(a, b, q, r)
            finally:
                sw(1)
        m = worst(residual(a, b, q, r, x))
        e = worst(exact_residual(a, b, q, r, x))
        what = ("only %s on the GPU (%d calls)" % (only, calls.get(only, 0)) if only
                else "only the rest on the GPU (%s on the CPU)" % ", ".join(names))
        print("bisect: %s: residual on the cpu %.3e %s, long double %.3e %s, "
              "X against the CPU's %.2e" % (what, m, "ok" if m <= atol else "OVER",
                                            e, "ok" if e <= atol else "OVER",
                                            _rel(x - x_cpu, x_cpu)))


def _ld(m):
    return np.asarray(m, dtype=np.clongdouble if np.iscomplexobj(m) else np.longdouble)


def _rel(m, ref):
    """max |m| / max |ref|, in long double."""
    return float(np.abs(_ld(m)).max() / max(np.abs(_ld(ref)).max(), np.finfo(float).tiny))


def _orth(u):
    u = _ld(u)
    return _rel(u.conj().T @ u - np.eye(u.shape[1]), np.ones(1))


def errors(name, args, kw, out):
    """The backward errors of one callee's result, in long double: each
    factorisation's reconstruction relative to its input, orthogonality
    of its unitary factors, a triangular solve's residual."""
    if name == "qr":
        a, (u, t) = args[0], out[:2]
        return {"|QR-A|": _rel(_ld(u) @ _ld(t) - _ld(a), a), "|Q'Q-I|": _orth(u)}
    if name == "lu":
        a, (p, l, u) = args[0], out
        return {"|PLU-A|": _rel(_ld(p) @ _ld(l) @ _ld(u) - _ld(a), a)}
    if name == "ordqz":
        a, b = args[:2]
        aa, bb, qq, zz = out[0], out[1], out[4], out[5]
        zh = _ld(zz).conj().T
        return {"|Q AA Z'-A|": _rel(_ld(qq) @ _ld(aa) @ zh - _ld(a), a),
                "|Q BB Z'-B|": _rel(_ld(qq) @ _ld(bb) @ zh - _ld(b), b),
                "|Q'Q-I|": _orth(qq), "|Z'Z-I|": _orth(zz)}
    if name == "solve_triangular":
        t, rhs = _ld(args[0]), _ld(args[1])
        t = np.tril(t) if kw.get("lower") else np.triu(t)
        if kw.get("unit_diagonal"):
            np.fill_diagonal(t, 1)
        x = _ld(out)
        return {"|TX-B|/(|T||X|)": _rel(t @ x - rhs, np.ones(1))
                / float(np.abs(t).max() * np.abs(x).max())}
    return {}


def accuracy(a, b, q, r, sw):
    """Each stage's first call of a CPU run of solve_discrete_are, made
    again on the CPU and on the GPU with the same (copied) arguments: the
    backward errors of both results side by side. Equal orders mean the
    GPU computes as well as the CPU and the difference in X is the
    problem's conditioning amplifying rounding; a larger GPU error is a
    defect of the GPU path."""
    seen = {}

    def spy(n, f):
        def g(*args, **kw):
            if n not in seen:
                seen[n] = (on_arrays(np.copy, args), dict(kw))
            return f(*args, **kw)
        return g

    sw(1)
    with patched(STAGES, spy) as saved:
        solve_discrete_are(a, b, q, r)
    for n, (args, kw) in seen.items():
        line = []
        for dev in ("cpu", "gpu"):
            sw(1 if dev == "cpu" else 0)
            try:
                out = saved[n](*on_arrays(np.copy, args), **kw)
            finally:
                sw(1)
            e = errors(n, args, kw, out)
            line.append("on the %s %s" % (dev, " ".join("%s %.2e" % kv for kv in e.items())))
        shape = "x".join(str(d) for d in np.shape(args[0]))
        print("accuracy: %s (%s): %s" % (n, shape, "; ".join(line)))


def perturbed(a, b, q, r, atol, sw, k=200):
    """The CPU alone on the same problem with its data changed at the
    level of rounding (each element times 1 + u, |u| <= 2^-52, Q and R
    kept symmetric, a fixed seed): the spread of the residual (long
    double, of each perturbed problem's own X) shows how far a correct
    change of rounding moves the test's measure. Then the same with the
    problem exact and every stage's array arguments changed at 2^-52
    (what a different, backward-stable implementation of each amounts
    to)."""
    rng = np.random.default_rng(11)
    eps = np.finfo(float).eps

    def jiggle(m, sym=False):
        if m.dtype.kind not in "fc":
            return m
        m = m * (1 + eps * rng.uniform(-1, 1, m.shape))
        return (m + m.conj().T) / 2 if sym else m

    def spread(what, res):
        res = sorted(res)
        print("perturbed: the CPU %s: long double residual min %.2e median %.2e max %.2e, "
              "%d over atol" % (what, res[0], res[k // 2], res[-1],
                                sum(x > atol for x in res)))

    sw(1)
    res = []
    for _ in range(k):
        p = (jiggle(a), jiggle(b), jiggle(q, True), jiggle(r, True))
        res.append(worst(exact_residual(*p, solve_discrete_are(*p))))
    spread("on %d problems within 2^-52 of this one" % k, res)

    def jiggled(n, f):
        return lambda *args, **kw: f(*on_arrays(jiggle, args), **kw)
    with patched(STAGES, jiggled) as saved:
        res = [worst(exact_residual(a, b, q, r, solve_discrete_are(a, b, q, r)))
               for _ in range(k)]
    spread("on this problem with %s's arguments within 2^-52 (%d runs)"
           % ("/".join(saved), k), res)

if __name__ == "__main__":
    main()
