#!/bin/sh
# bench/offload/xfer_device.sh - the copy engine on a GPU machine, one run:
# xfertest against the real driver (the same byte checks as CI's fake
# driver, without the injected failures), then xfer_bench's table
# (docs/benchmarks.md, "gpu-offload: copies"). Results under $1.
set -u
out=${1:-build/xfer-device}
mkdir -p "$out"
make -s PYTHON="${PYTHON:-python3}" build/tests/offload/cuda/xfertest \
    build/bench/xfer_bench > "$out/build.txt" 2>&1 || { cat "$out/build.txt"; exit 1; }
{ nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1; } > "$out/machine.txt"
build/tests/offload/cuda/xfertest > "$out/xfertest.txt" 2>&1
echo "rc=$?" >> "$out/xfertest.txt"
build/bench/xfer_bench > "$out/bench.txt" 2>&1
echo "rc=$?" >> "$out/bench.txt"
cat "$out/machine.txt" "$out/xfertest.txt" "$out/bench.txt"
