"""One workload of the benchmark's resident section (resident.py), timed
inside the process after a warm-up; prints one JSON line
{"s": seconds, "check": float} or {"skip": why}.

    reswork.py matvec N K     K products A @ x_k, one N x N float64 A,
                              a new x_k each time
    reswork.py cg N ITERS     dense conjugate gradient on an N x N
                              symmetric positive definite system, ITERS
                              iterations (numpy only)
    reswork.py ridge M N      scikit-learn Ridge (solver cholesky) on an
                              M x N X, fitted for 20 alphas
    reswork.py pca M N        scikit-learn PCA(50, svd_solver=randomized)
                              on an M x N X, 3 fits
check: a number the three contenders must agree on (the section compares
them: a wrong result is a failure, whatever the speed).
"""
import json
import sys
import time

import numpy as np


def matvec(n, k):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n))
    xs = rng.standard_normal((k, n))
    a @ xs[0]                       # warm-up
    t = time.perf_counter()
    s = 0.0
    for x in xs:
        s += float((a @ x)[0])
    return {"s": time.perf_counter() - t, "check": s}


def cg(n, iters):
    rng = np.random.default_rng(1)
    r0 = rng.standard_normal((n, n)) / np.sqrt(n)
    a = (r0 + r0.T) / 2 + 4 * np.eye(n)     # SPD: eigenvalues near 4
    b = rng.standard_normal(n)
    a @ b                           # warm-up
    t = time.perf_counter()
    x = np.zeros(n)
    r = b - a @ x
    p = r.copy()
    rr = r @ r
    for _ in range(iters):
        ap = a @ p
        alpha = rr / (p @ ap)
        x += alpha * p
        r -= alpha * ap
        rr_new = r @ r
        p = r + (rr_new / rr) * p
        rr = rr_new
    return {"s": time.perf_counter() - t, "check": float(np.linalg.norm(x))}


def ridge(m, n):
    try:
        from sklearn.linear_model import Ridge
    except ImportError:
        return {"skip": "scikit-learn is not installed"}
    rng = np.random.default_rng(2)
    X = rng.standard_normal((m, n))
    y = X @ rng.standard_normal(n) + rng.standard_normal(m)
    Ridge(alpha=1.0, solver="cholesky").fit(X[:64], y[:64])   # warm-up
    t = time.perf_counter()
    s = 0.0
    for alpha in np.logspace(-3, 3, 20):
        s += float(Ridge(alpha=alpha, solver="cholesky").fit(X, y).coef_[0])
    return {"s": time.perf_counter() - t, "check": s}


def pca(m, n):
    try:
        from sklearn.decomposition import PCA
    except ImportError:
        return {"skip": "scikit-learn is not installed"}
    rng = np.random.default_rng(3)
    X = rng.standard_normal((m, n)) @ np.diag(np.linspace(1, 10, n))
    PCA(n_components=5, svd_solver="randomized", random_state=0).fit(X[:256])
    t = time.perf_counter()
    s = 0.0
    for _ in range(3):
        p = PCA(n_components=min(50, n // 2), svd_solver="randomized",
                random_state=0).fit(X)
        s += float(p.explained_variance_[:10].sum())
    return {"s": time.perf_counter() - t, "check": s}


def main():
    kind, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = {"matvec": matvec, "cg": cg, "ridge": ridge, "pca": pca}[kind](a, b)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
