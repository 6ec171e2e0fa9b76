#!/bin/bash
# copy_device.sh [TREE] - the CPU copy engine's figures on the H200 machine
# (docs/offload.md, "The CPU copy engine"), in one run of under 3 minutes:
# build TREE (default: .), bench/offload/copy_bench.c against numpy's
# bundled OpenBLAS, then numpy's solve and eigh of n = 4096 plain, under
# `gpu-offload run` forced to the CPU (the engine alone: default and 16
# threads, and off), and forced to the GPU. Results also go to $OUT.
cd "${1:-.}" || exit 1
OUT=${OUT:-/tmp/copy-device}
mkdir -p "$OUT"
PY=/opt/torch/.venv/bin/python3
export OPENBLAS_NUM_THREADS=16
t0=$(date +%s)
el() { echo "t $(( $(date +%s) - t0 )) s"; }
W=(bench/offload/work.py --ops "solve:4096,eigh:4096" --warmup 1 --reps 3)
RUN=(build/gpu-offload run --summary)
echo "== build"; nproc
timeout 60 make -s -j16 build/libgpuoffload.so build/libgpuoffload-cuda.so \
    build/gpu-offload build/bench/copy_bench >"$OUT/build.txt" 2>&1
echo "build rc $?"; tail -3 "$OUT/build.txt"; el
BLAS=$(find /opt/torch/.venv/lib/python3.12/site-packages/numpy.libs \
    -name 'libscipy_openblas64_*.so' | head -1)
echo "blas $BLAS"
echo "== copy_bench"
timeout 45 build/bench/copy_bench --lib "$PWD/build/libgpuoffload.so" \
    --blas "$BLAS" --sizes 4096,1024 --threads 1,2,4,8,12,16 --rounds 2 2>&1 |
    tee "$OUT/copy_bench.txt"; el
echo "== plain"
timeout 30 "$PY" "${W[@]}" 2>&1 | tee "$OUT/plain.txt"; el
echo "== cpu (engine, default threads)"
GPU_OFFLOAD_FORCE=cpu timeout 25 "${RUN[@]}" -- "$PY" "${W[@]}" 2>&1 |
    tee "$OUT/cpu.txt"; el
echo "== cpu (engine, 16 threads)"
GPU_OFFLOAD_COPY_THREADS=16 GPU_OFFLOAD_FORCE=cpu timeout 20 "${RUN[@]}" -- \
    "$PY" "${W[@]}" 2>&1 | tee "$OUT/cpu16.txt"; el
echo "== gpu (engine, default threads)"
GPU_OFFLOAD_FORCE=gpu timeout 25 "${RUN[@]}" --backend build/libgpuoffload-cuda.so \
    --profile docs/profile-h200.txt -- "$PY" "${W[@]}" 2>&1 | tee "$OUT/gpu.txt"; el
echo "== cpu (engine off)"
GPU_OFFLOAD_COPY_THREADS=0 GPU_OFFLOAD_FORCE=cpu \
    timeout $(( 170 - ($(date +%s) - t0) )) "${RUN[@]}" -- "$PY" "${W[@]}" 2>&1 |
    tee "$OUT/cpu0.txt"; el
