#!/bin/bash
# gemm_device.sh OUT - the large calls of issue 16 on a GPU machine, one
# run, side by side: build the libraries and xfertest; xfertest against
# the real driver (the copy engine's byte checks, prefault included); then
# bench/offload/work.py's dgemm 8192, sgemm 8192 and solve 4096 forced to
# the GPU with the pool's bound and the prefault on ("new"), both off
# (GPU_OFFLOAD_CUDA_POOL=fixed GPU_OFFLOAD_CUDA_PREFAULT=0: as before),
# the pool's bound alone, and "new" again (the spread); per call the
# trace's copy times (tracecalls.py) and `gpu-offload report`; numpy's
# dgemm 8192 checked against the CPU's (dgemm_e2e.py); the CPU alone.
set -u
OUT=${1:?usage: gemm_device.sh OUT}
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
OPS=${OPS:-dgemm:8192,sgemm:8192,solve:4096}
export OPENBLAS_NUM_THREADS=${THREADS:-16}
T=tests/offload/cuda
mkdir -p "$OUT"
exec > >(tee "$OUT/device.log") 2>&1
t0=$(date +%s)
if ! make -s -j16 build/libgpuoffload.so build/libgpuoffload-cuda.so \
    build/gpu-offload build/tests/offload/cuda/xfertest > "$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log"; exit 1
fi
echo "== build: $(( $(date +%s) - t0 )) s"
build/tests/offload/cuda/xfertest > "$OUT/xfertest.txt" 2>&1
echo "== xfertest (real driver): rc $?: $(grep -c FAIL "$OUT/xfertest.txt") FAIL lines"
grep -E "FAIL|xfertest:" "$OUT/xfertest.txt" | head -10
run() {     # NAME ENV... : one process, every op
    local name=$1; shift
    rm -rf "$OUT/t-$name"
    echo "== $name: $*"
    env "$@" GPU_OFFLOAD_FORCE=gpu timeout 50 build/gpu-offload run --summary \
        --backend build/libgpuoffload-cuda.so --profile docs/profile-h200.txt \
        --trace "$OUT/t-$name" -- "$PY" bench/offload/work.py --ops "$OPS" \
        --warmup 1 --reps 3 > "$OUT/$name.json" 2> "$OUT/$name.err"
    echo "rc $?"
    cat "$OUT/$name.json"
    tail -3 "$OUT/$name.err"
    "$PY" $T/tracecalls.py "$OUT/t-$name"
    build/gpu-offload report "$OUT/t-$name" > "$OUT/report-$name.txt" 2>&1
    head -12 "$OUT/report-$name.txt"
}
run new
run off GPU_OFFLOAD_CUDA_POOL=fixed GPU_OFFLOAD_CUDA_PREFAULT=0
run pool GPU_OFFLOAD_CUDA_PREFAULT=0
run new2
echo "== dgemm 8192 checked against the CPU"
timeout 30 "$PY" $T/dgemm_e2e.py "$OUT/dgemm-cpu.npy" 1
GPU_OFFLOAD_FORCE=gpu timeout 30 build/gpu-offload run -- \
    "$PY" $T/dgemm_e2e.py "$OUT/dgemm-gpu.npy" 3
"$PY" -c "import numpy as np; a=np.load('$OUT/dgemm-cpu.npy'); b=np.load('$OUT/dgemm-gpu.npy'); print('largest difference relative to the largest value', abs(a-b).max()/abs(a).max())"
echo "== CPU alone"
timeout 40 "$PY" bench/offload/work.py --ops "$OPS" --warmup 1 --reps 2
echo "== done: $(( $(date +%s) - t0 )) s"
