# device_common.sh - what the GPU-machine scripts of this folder share
# (sourced by gemm_device.sh and gemm2_device.sh, from the repository
# root, with OUT set): the python, the BLAS threads, the log in
# $OUT/device.log, the build, one forced work.py process with its trace,
# xfertest on the real driver, numpy's dgemm 8192 against the CPU's.
# shellcheck shell=bash
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
export OPENBLAS_NUM_THREADS=${THREADS:-16}
T=tests/offload/cuda
mkdir -p "$OUT"
exec > >(tee "$OUT/device.log") 2>&1
t0=$(date +%s)

elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

dev_build() {   # the libraries, the CLI and xfertest, or exit 1
    if ! make -s -j16 build/libgpuoffload.so build/libgpuoffload-cuda.so \
        build/gpu-offload build/tests/offload/cuda/xfertest > "$OUT/build.log" 2>&1; then
        tail -30 "$OUT/build.log"; exit 1
    fi
    echo "== build: $(elapsed)"
}

dev_run() {     # LIMIT LINES NAME ENV... : one forced process, every op of $OPS
    local limit=$1 lines=$2 name=$3; shift 3
    rm -rf "$OUT/t-$name"
    echo "== $name: $* ($(elapsed))"
    env "$@" GPU_OFFLOAD_FORCE=gpu timeout "$limit" build/gpu-offload run --summary \
        --backend build/libgpuoffload-cuda.so --profile docs/profile-h200.txt \
        --trace "$OUT/t-$name" -- "$PY" bench/offload/work.py --ops "$OPS" \
        --warmup 1 --reps 3 > "$OUT/$name.json" 2> "$OUT/$name.err"
    echo "rc $?"
    cat "$OUT/$name.json"
    tail -3 "$OUT/$name.err"
    "$PY" $T/tracecalls.py "$OUT/t-$name"
    build/gpu-offload report "$OUT/t-$name" > "$OUT/report-$name.txt" 2>&1
    head -"$lines" "$OUT/report-$name.txt"
}

dev_xfertest() {        # the copy engine's byte checks on the real driver
    echo "== xfertest ($(elapsed))"
    timeout 30 build/tests/offload/cuda/xfertest > "$OUT/xfertest.txt" 2>&1
    echo "xfertest (real driver): rc $?: $(grep -c FAIL "$OUT/xfertest.txt") FAIL lines"
    grep -E "FAIL|xfertest:" "$OUT/xfertest.txt" | head -10
}

dev_dgemm_check() {     # numpy's dgemm 8192 forced, against the CPU's
    echo "== dgemm 8192 checked against the CPU ($(elapsed))"
    timeout 30 "$PY" $T/dgemm_e2e.py "$OUT/dgemm-cpu.npy" 1
    GPU_OFFLOAD_FORCE=gpu timeout 30 build/gpu-offload run -- \
        "$PY" $T/dgemm_e2e.py "$OUT/dgemm-gpu.npy" 3
    "$PY" -c "import numpy as np; a=np.load('$OUT/dgemm-cpu.npy'); b=np.load('$OUT/dgemm-gpu.npy'); print('largest difference relative to the largest value', abs(a-b).max()/abs(a).max())"
}
