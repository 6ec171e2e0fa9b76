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
OPS=${OPS:-dgemm:8192,sgemm:8192,solve:4096}
# shellcheck source=tests/offload/cuda/device_common.sh
. tests/offload/cuda/device_common.sh
dev_build
dev_xfertest
dev_run 50 12 new
dev_run 50 12 off GPU_OFFLOAD_CUDA_POOL=fixed GPU_OFFLOAD_CUDA_PREFAULT=0
dev_run 50 12 pool GPU_OFFLOAD_CUDA_PREFAULT=0
dev_run 50 12 new2
dev_dgemm_check
echo "== CPU alone"
timeout 40 "$PY" bench/offload/work.py --ops "$OPS" --warmup 1 --reps 2
echo "== done: $(elapsed)"
