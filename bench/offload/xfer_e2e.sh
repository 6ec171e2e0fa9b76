#!/bin/sh
# bench/offload/xfer_e2e.sh - numpy dgemm n=8192 and solve n=4096 end to
# end under libgpuoffload.so, forced to the GPU, with this tree's copy
# engine and with the plain one it replaced (one cuMemcpy2DAsync per
# operand from pageable memory, malloc'd staging: PLAIN_XFER, a copy of
# that xfer.c), side by side in one run, against numpy's own BLAS.
# Needs `make all` done; results on stdout.
set -u
py=${PYTHON:-python3}
plain=${PLAIN_XFER:-}
if [ -n "$plain" ]; then
	d=$(mktemp -d)
	cp src/offload/cuda/*.c src/offload/cuda/*.h "$d/"
	rm -f "$d/xpool.c"
	cp "$plain" "$d/xfer.c"
	mkdir -p build/plain
	cc -std=c11 -O2 -fPIC -shared -fvisibility=hidden \
	    -include src/offload/compat.h -I"$d" -Isrc/offload -Ibuild/offload/gen \
	    -Wl,--version-script=build/offload/cuda-exports.map \
	    -o build/plain/libgpuoffload-cuda.so "$d"/*.c -ldl -lpthread || exit 1
fi
cat > /tmp/xfer_e2e.py <<'PY'
import sys, time
import numpy as np
rng = np.random.default_rng(1)
n = 8192
a = rng.random((n, n)); b = rng.random((n, n))
m = 4096
A = rng.random((m, m)) + m * np.eye(m); B = rng.random((m, m))
def best(f, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); r = f(); ts.append(time.perf_counter() - t)
    return min(ts), r
reps = int(sys.argv[1])
f1 = lambda: a @ b
f2 = lambda: np.linalg.solve(A, B)
if reps > 1:
    f1(); f2()          # warm-up: the backend starts, staging is allocated
t1, c = best(f1, reps)
t2, x = best(f2, reps)
ok1 = np.allclose(c[:64, :64], a[:64] @ b[:, :64])
ok2 = np.abs(A @ x[:, :8] - B[:, :8]).max() < 1e-8 * m
print(f"dgemm 8192 {t1*1e3:.1f} ms ok={ok1}  solve 4096 {t2*1e3:.1f} ms ok={ok2}")
PY
echo "cpu (numpy's own BLAS):"
"$py" /tmp/xfer_e2e.py 1
for be in build/libgpuoffload-cuda.so ${plain:+build/plain/libgpuoffload-cuda.so}; do
	echo "gpu-offload forced, backend $be:"
	LD_PRELOAD=$PWD/build/libgpuoffload.so GPU_OFFLOAD_FORCE=gpu \
	    GPU_OFFLOAD_SUMMARY=1 GPU_OFFLOAD_BACKEND=$PWD/$be "$py" /tmp/xfer_e2e.py 3
done
