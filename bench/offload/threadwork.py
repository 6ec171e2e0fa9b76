"""One threaded workload of the benchmark's threads section (threads.py),
timed inside the process after a warm-up; prints one JSON line:
{"s": seconds, ...} or {"skip": why}.

    threadwork.py gemm THREADS CALLS M K N   THREADS Python threads, each
                                             CALLS (MxK) @ (KxN) float64
    threadwork.py kmeans THREADS             scikit-learn KMeans on 20000x50
                                             (8 clusters, 3 inits), its
                                             OpenMP/BLAS threads THREADS
    threadwork.py joblib THREADS             joblib.Parallel(THREADS threads)
                                             over 8*THREADS tasks, each 10
                                             solves of 128x128 and 10 gemm
                                             256x128x64
"""
import json
import sys
import threading
import time

import numpy as np


def gemm(threads, calls, m, k, n):
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((m, k)), rng.standard_normal((k, n)))
            for _ in range(threads)]
    go = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)
    sums = [0.0] * threads

    def work(i):
        a, b = data[i]
        for _ in range(5):          # warm-up: caches, the first decisions
            a @ b
        go.wait()
        s = 0.0
        for _ in range(calls):
            s += float((a @ b)[0, 0])
        sums[i] = s
        done.wait()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    done.wait()
    s = time.perf_counter() - t0
    for t in ts:
        t.join()
    return {"s": s, "check": sum(sums)}


def kmeans(threads):
    try:
        from sklearn.cluster import KMeans
    except ImportError:
        return {"skip": "scikit-learn is not installed"}
    X = np.random.default_rng(0).standard_normal((20000, 50))
    KMeans(n_clusters=8, n_init=1, random_state=0, max_iter=5).fit(X[:2000])
    t0 = time.perf_counter()
    km = KMeans(n_clusters=8, n_init=3, random_state=0).fit(X)
    return {"s": time.perf_counter() - t0, "check": float(km.inertia_)}


def joblib_work(threads):
    try:
        from joblib import Parallel, delayed
    except ImportError:
        return {"skip": "joblib is not installed"}
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128)) + 128 * np.eye(128)
    b = rng.standard_normal((128, 4))
    x = rng.standard_normal((256, 128))
    y = rng.standard_normal((128, 64))

    def task(i):
        s = 0.0
        for _ in range(10):
            s += float(np.linalg.solve(a, b)[0, 0])
            s += float((x @ y)[0, 0])
        return s

    Parallel(n_jobs=threads, prefer="threads")(delayed(task)(i) for i in range(threads))
    t0 = time.perf_counter()
    r = Parallel(n_jobs=threads, prefer="threads")(
        delayed(task)(i) for i in range(8 * threads))
    return {"s": time.perf_counter() - t0, "check": sum(r)}


def main(argv):
    kind, threads = argv[0], int(argv[1])
    if kind == "gemm":
        out = gemm(threads, *(int(v) for v in argv[2:6]))
    elif kind == "kmeans":
        out = kmeans(threads)
    elif kind == "joblib":
        out = joblib_work(threads)
    else:
        raise SystemExit("threadwork.py: no workload %s" % kind)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
