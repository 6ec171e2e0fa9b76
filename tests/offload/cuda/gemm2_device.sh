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
OPS=${OPS:-dgemm:8192,sgemm:8192,dgemm:4096}
# shellcheck source=tests/offload/cuda/device_common.sh
. tests/offload/cuda/device_common.sh
dev_build
dev_run 30 14 on
dev_run 30 14 off GPU_OFFLOAD_CUDA_PANELS=0
echo "== products against the CPU ($(elapsed))"
timeout 40 "$PY" $T/gemm_check.py run /tmp/gc-cpu
GPU_OFFLOAD_FORCE=gpu timeout 40 build/gpu-offload run --summary -- \
    "$PY" $T/gemm_check.py run /tmp/gc-gpu 2>&1 | tail -3
"$PY" $T/gemm_check.py cmp /tmp/gc-cpu /tmp/gc-gpu
dev_run 30 14 on16 GPU_OFFLOAD_CUDA_PANELS=16
dev_run 30 14 on2
dev_xfertest
dev_dgemm_check
echo "== CPU alone, dgemm 8192 ($(elapsed))"
timeout 20 "$PY" bench/offload/work.py --ops dgemm:8192 --warmup 0 --reps 2
echo "== done: $(elapsed)"
