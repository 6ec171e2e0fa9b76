#!/bin/bash
# calib_device.sh OUT - issue 28's GPU-machine figures in one call of
# about 8 minutes (run after `make -j16`; it builds what is missing):
#   1. `gpu-offload calibrate` into OUT/profile, timed, with its lines on
#      where each pass's time went and the fit's predicted-vs-measured
#      error (OUT/calibrate.log);
#   2. the fresh profile against real calls: work.py's headline-sized
#      calls (dgemm 8192, sgemm 8192, solve/eigh/cholesky 4096, svd 2048,
#      and smaller ones) forced to the CPU and forced to the GPU, traced;
#      predcheck.py compares each call's predicted and measured time
#      (OUT/predcheck.txt), and the forced-GPU trace gives each call's
#      copy in, copy out and the rest (kernel, allocation, the CPU-side
#      gathers; tracecalls.py, OUT/breakdown.txt) and `gpu-offload
#      report` (OUT/report-gpu.txt): what caps solve and eigh;
#   3. the harness (bench/offload/run.py) with that profile: machine,
#      headline (plain, default level, forced, NVBLAS; the breakdown) and
#      threads (16 and 64 threads of small dgemm around the threshold
#      and the crossover, KMeans, joblib: plain vs default, <= 1.05x),
#      into OUT/bench (report.md, results.json).
# Knobs: PYTHON (/opt/torch/.venv/bin/python3), THREADS (16 BLAS threads),
# CALIB_ARGS (more calibrate options, e.g. --thorough for the old grid).
set -u
OUT=${1:?usage: calib_device.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
[ -x "$PY" ] || PY=python3
export OPENBLAS_NUM_THREADS=${THREADS:-16}
exec > >(tee "$OUT/device.log") 2>&1
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }
BE=build/libgpuoffload-cuda.so

echo "== build ($(elapsed))"
if ! make -s -j16 all > "$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log"; exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "== calibrate ($(elapsed))"
c0=$(date +%s)
# shellcheck disable=SC2086
timeout 240 build/gpu-offload calibrate --output "$OUT/profile" \
    --backend "$BE" ${CALIB_ARGS:-} > "$OUT/calibrate.log" 2>&1
echo "rc $? calibrate wall $(( $(date +%s) - c0 )) s"
grep -E "pass|fit|took" "$OUT/calibrate.log"
[ -s "$OUT/profile" ] || { echo "no profile: stop"; exit 1; }

OPS="dgemm:2048,dgemm:8192,sgemm:8192,solve:1024,solve:4096,eigh:1024,eigh:4096,cholesky:4096,svd:2048"
for mode in cpu gpu; do
    echo "== forced $mode, traced ($(elapsed))"
    rm -rf "$OUT/t-$mode"
    GPU_OFFLOAD_FORCE=$mode timeout 150 build/gpu-offload run --summary \
        --backend "$BE" --profile "$OUT/profile" --trace "$OUT/t-$mode" -- \
        "$PY" bench/offload/work.py --ops "$OPS" --warmup 1 --reps 1 \
        > "$OUT/work-$mode.json" 2> "$OUT/work-$mode.err"
    echo "rc $?"; tail -2 "$OUT/work-$mode.err"
done
"$PY" bench/offload/predcheck.py "$OUT/t-cpu" "$OUT/t-gpu" | tee "$OUT/predcheck.txt"
"$PY" tests/offload/cuda/tracecalls.py "$OUT/t-gpu" > "$OUT/breakdown.txt"
grep -E "gesv|syevd|potrf|getrf|getrs" "$OUT/breakdown.txt" | head -20
build/gpu-offload report "$OUT/t-gpu" > "$OUT/report-gpu.txt" 2>&1
cat "$OUT/report-gpu.txt"

echo "== harness: machine, headline, threads ($(elapsed))"
left=$(( 560 - ($(date +%s) - t0) ))
[ "$left" -lt 120 ] && left=120
"$PY" bench/offload/run.py --out "$OUT/bench" --python "$PY" \
    --profile "$OUT/profile" --sections machine,headline,threads \
    --section-s headline=$(( left * 55 / 100 )),threads=$(( left * 40 / 100 )) \
    --reps 2 --budget "$left"
sed -n '/## Headline/,/## /p' "$OUT/bench/report.md" | head -40
sed -n '/## Many threads/,$p' "$OUT/bench/report.md" | head -40
echo "== done ($(elapsed))"
