#!/bin/bash
# gemm2_device.sh OUT - the gemm pipeline (src/offload/cuda/xgemm.c) on a
# GPU machine, one run, side by side (the most wanted first): build;
# bench/offload/work.py's dgemm 8192, sgemm 8192
# and dgemm 4096 forced to the GPU with the pipeline on (8 panels, the
# default), off (GPU_OFFLOAD_CUDA_PANELS=0: the frontend's flow), on with
# 16 panels, and on again (the spread); per call the trace's copy times
# (tracecalls.py: host time in copies, which the pipeline overlaps with
# the kernels) and `gpu-offload report`; products of every transpose,
# precision and beta != 0 checked against the CPU (gemm_check.py);
# xfertest on the real driver (staged parts included); numpy's dgemm
# 8192 checked (dgemm_e2e.py); the CPU alone for dgemm 8192.
set -u
OUT=${1:?usage: gemm2_device.sh OUT}
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
OPS=${OPS:-dgemm:8192,sgemm:8192,dgemm:4096}
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
run() {     # NAME ENV... : one process, every op
    local name=$1; shift
    rm -rf "$OUT/t-$name"
    echo "== $name: $* ($(( $(date +%s) - t0 )) s)"
    env "$@" GPU_OFFLOAD_FORCE=gpu timeout 30 build/gpu-offload run --summary \
        --backend build/libgpuoffload-cuda.so --profile docs/profile-h200.txt \
        --trace "$OUT/t-$name" -- "$PY" bench/offload/work.py --ops "$OPS" \
        --warmup 1 --reps 3 > "$OUT/$name.json" 2> "$OUT/$name.err"
    echo "rc $?"
    cat "$OUT/$name.json"
    tail -3 "$OUT/$name.err"
    "$PY" $T/tracecalls.py "$OUT/t-$name"
    build/gpu-offload report "$OUT/t-$name" > "$OUT/report-$name.txt" 2>&1
    head -14 "$OUT/report-$name.txt"
}
run on
run off GPU_OFFLOAD_CUDA_PANELS=0
echo "== products against the CPU ($(( $(date +%s) - t0 )) s)"
timeout 40 "$PY" $T/gemm_check.py run /tmp/gc-cpu
GPU_OFFLOAD_FORCE=gpu timeout 40 build/gpu-offload run --summary -- \
    "$PY" $T/gemm_check.py run /tmp/gc-gpu 2>&1 | tail -3
"$PY" $T/gemm_check.py cmp /tmp/gc-cpu /tmp/gc-gpu
run on16 GPU_OFFLOAD_CUDA_PANELS=16
run on2
echo "== xfertest ($(( $(date +%s) - t0 )) s)"
timeout 30 build/tests/offload/cuda/xfertest > "$OUT/xfertest.txt" 2>&1
echo "xfertest (real driver): rc $?: $(grep -c FAIL "$OUT/xfertest.txt") FAIL lines"
grep -E "FAIL|xfertest:" "$OUT/xfertest.txt" | head -10
echo "== dgemm 8192 checked against the CPU ($(( $(date +%s) - t0 )) s)"
timeout 30 "$PY" $T/dgemm_e2e.py "$OUT/dgemm-cpu.npy" 1
GPU_OFFLOAD_FORCE=gpu timeout 30 build/gpu-offload run -- \
    "$PY" $T/dgemm_e2e.py "$OUT/dgemm-gpu.npy" 3
"$PY" -c "import numpy as np; a=np.load('$OUT/dgemm-cpu.npy'); b=np.load('$OUT/dgemm-gpu.npy'); print('largest difference relative to the largest value', abs(a-b).max()/abs(a).max())"
echo "== CPU alone, dgemm 8192 ($(( $(date +%s) - t0 )) s)"
timeout 20 "$PY" bench/offload/work.py --ops dgemm:8192 --warmup 0 --reps 2
echo "== done: $(( $(date +%s) - t0 )) s"
