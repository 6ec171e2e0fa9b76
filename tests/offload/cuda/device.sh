#!/bin/bash
# device.sh OUT - the CUDA backend on a machine with an NVIDIA GPU, in one
# go: build (make all), the in-tree declarations against the toolkit's
# headers, the correctness sweep (gpusweep.py: every operation, precision,
# option set, a few shapes, both integer widths; forced GPU against forced
# CPU, and verify mode), and numpy's dgemm n=8192 end to end under
# `gpu-offload run`. Logs and results go to OUT. PYTHON: a Python with
# NumPy and SciPy from PyPI (their bundled OpenBLAS: scipy_*_ and
# scipy_*_64_ names). SECTIONS: which of sweep, dgemm, idle, linalg to
# run after the build (default: all: sweep dgemm idle torch linalg).
set -u
SECTIONS=${SECTIONS:-sweep dgemm idle torch linalg}
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
OUT=${1:?usage: device.sh OUT}
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$OUT"
exec > >(tee "$OUT/device.log") 2>&1
T=tests/offload/cuda
nvidia-smi -L 2>&1 | head -2
echo "== build"
if ! make -s all offload-cuda-abi > "$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"; exit 1
fi
grep -h "gate: ok" "$OUT/build.log" | grep cuda
readelf -dW build/libgpuoffload-cuda.so | grep NEEDED
echo "== declarations"
build/tests/offload/cuda-abicheck
B=$PWD/build
run_env() {   # MODE: cpu, gpu, verify
    local e=(LD_PRELOAD="$B/libgpuoffload.so" GPU_OFFLOAD_MIN_FLOPS=0 GPU_OFFLOAD_PROFILE=none)
    case $1 in
    cpu) e+=(GPU_OFFLOAD_FORCE=cpu) ;;
    gpu) e+=(GPU_OFFLOAD_FORCE=gpu GPU_OFFLOAD_SUMMARY=1) ;;
    verify) e+=(GPU_OFFLOAD_VERIFY=1 GPU_OFFLOAD_SUMMARY=1) ;;
    esac
    printf '%s\n' "${e[@]}"
}
want sweep && for w in ${WIDTHS:-64 32}; do
    echo "== sweep, width $w"
    for m in cpu gpu verify; do
        mapfile -t E < <(run_env $m)
        t0=$(date +%s%N)
        extra=()
        [ $m = gpu ] && extra=(GPU_OFFLOAD_TRACE="$OUT/trace-$w")
        timeout 150 env "${E[@]}" "${extra[@]}" "$PY" $T/gpusweep.py run "$OUT/$m-$w.npz" $w \
            > "$OUT/$m-$w.log" 2>&1
        echo "$m: exit $? in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
        grep -v "^gpu-offload: verify:" "$OUT/$m-$w.log" | tail -3
        [ $m = verify ] && echo "verify mismatch lines: $(grep -c 'verify:' "$OUT/$m-$w.log")" &&
            grep 'verify:' "$OUT/$m-$w.log" | head -20
    done
    "$PY" $T/gpusweep.py compare "$OUT/cpu-$w.npz" "$OUT/gpu-$w.npz" > "$OUT/compare-$w.txt"
    tail -25 "$OUT/compare-$w.txt"
    build/gpu-offload report "$OUT/trace-$w" > "$OUT/report-$w.txt" 2>&1
    head -60 "$OUT/report-$w.txt"
done
if want dgemm; then
echo "== numpy dgemm n=8192 end to end"
timeout 60 "$PY" $T/dgemm_e2e.py "$OUT/dgemm-cpu.npy" 2
GPU_OFFLOAD_FORCE=gpu timeout 90 build/gpu-offload run --summary --trace "$OUT/trace-dgemm" -- \
    "$PY" $T/dgemm_e2e.py "$OUT/dgemm-gpu.npy" 4
"$PY" -c "import numpy as np; a=np.load('$OUT/dgemm-cpu.npy'); b=np.load('$OUT/dgemm-gpu.npy'); print('dgemm_e2e: largest difference relative to the largest value', abs(a-b).max()/abs(a).max())"
build/gpu-offload report "$OUT/trace-dgemm" 2>&1 | head -20
fi
if want idle; then
echo "== the pool's idle release"
GPU_OFFLOAD_FORCE=gpu timeout 60 build/gpu-offload run --summary -- "$PY" $T/idle.py
fi
if want torch; then
echo "== next to torch"
GPU_OFFLOAD_FORCE=gpu timeout 90 build/gpu-offload run --summary -- "$PY" $T/torch_share.py
fi
if want linalg; then
# Every call above the default threshold (1e6 flops) forced to the GPU.
echo "== numpy.linalg's tests, forced to the GPU"
GPU_OFFLOAD_FORCE=gpu timeout ${LINALG_S:-150} build/gpu-offload run --summary -- \
    "$PY" -m pytest -q -p no:cacheprovider --pyargs numpy.linalg > "$OUT/numpy-linalg.log" 2>&1
echo "exit $?"
grep -E "passed|failed|error|FAILED|summary" "$OUT/numpy-linalg.log" | tail -15
fi
echo "== done"
