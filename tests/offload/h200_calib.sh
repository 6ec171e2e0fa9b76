#!/bin/bash
# tests/offload/h200_calib.sh OUTDIR [BUDGET_S] - on the H200 machine (one
# NVIDIA GPU, numpy with its bundled OpenBLAS): build, the policy's NVML
# reading against the real NVML (idle, and while a torch job outside
# gpumutex keeps the GPU busy: a numpy program under gpu-offload stays on
# the CPU with the reason gpu-busy, and offloads once the GPU is idle),
# then `gpu-offload calibrate` with the CUDA backend and numpy's OpenBLAS,
# timed (OPS=dgemm,... limits its curves). Results in OUTDIR (log.txt,
# profile-h200.txt). Nothing here is
# a pass/fail test: the log is read and the figures go to the docs.
set -u
OUT=${1:?usage: h200_calib.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-300}
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
export GPU_OFFLOAD_PYTHON=$PY
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
T=$(mktemp -d)
stamp() { echo "== $(date -u +%T) $*"; }

stamp build
make -s -j16 build/libgpuoffload.so build/libgpuoffload-cuda.so \
    build/libgpuoffload-test.so build/gpu-offload build/gpu-offload-calib 2>&1 |
    grep -v '^gate: ok' | tail -20
BE=${BACKEND:-build/libgpuoffload-cuda.so}
env | grep -E '^(CUDA_|GPUMUTEX_|NVIDIA_)' || true
nvidia-smi --query-gpu=index,pci.bus_id,utilization.gpu,memory.used,memory.total \
    --format=csv 2>&1 || true

# The policy's own NVML reader (src/offload/onvml.c), as the library
# runs it: util, free and total of the GPU it would compute on.
cat > "$T/probe.c" <<'EOF'
#include <stdio.h>
#include "onvml.h"
int main(void)
{
	struct gpo_nvml_reading r;
	char m[512];
	int rc = gpo_nvml_read(&r, m, sizeof m);
	printf("nvml-probe: rc=%d util=%s%u%% free=%llu total=%llu msg='%s'\n",
	       rc, r.have_util ? "" : "unknown ", r.util,
	       (unsigned long long)r.free, (unsigned long long)r.total, m);
	return 0;
}
EOF
cc -O2 -Isrc/offload -o "$T/probe" "$T/probe.c" src/offload/onvml.c -ldl

# A GPU so fast and cheap to start that every dgemm the model sees pays.
cat > "$T/fast.prof" <<'EOF'
gpu-offload-profile 1
source h200_calib.sh (synthetic: every dgemm offloads)
startup 0.001
h2d 0 1e10
d2h 0 1e10
cpu dgemm 1e6:1e9
gpu dgemm 1e6:1e14
EOF
cat > "$T/np.py" <<'EOF'
import numpy as np
a = np.random.rand(1024, 1024)
for _ in range(12):
    b = a @ a
print("numpy done", float(b[0, 0]) > 0)
EOF
cat > "$T/busy.py" <<'EOF'
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda")
b = a @ a
torch.cuda.synchronize()
open(sys.argv[1], "w").write("ready\n")
end = time.time() + float(sys.argv[2])
while time.time() < end:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
EOF
under() {  # the numpy program under gpu-offload, its summary line
    build/gpu-offload run --summary --profile "$T/fast.prof" --backend "$BE" \
        -- "$PY" "$T/np.py" 2>&1 | grep -E 'gpu-offload|numpy done'
}

stamp "nvml idle"
"$T/probe"
under
stamp "nvml busy: torch outside gpumutex"
"$PY" "$T/busy.py" "$T/ready" 12 &
BUSYPID=$!
for _ in $(seq 1 300); do [ -e "$T/ready" ] && break; sleep 0.1; done
sleep 1.5  # NVML's sample period sees the load
"$T/probe"
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader 2>&1 || true
under
"$T/probe"
kill "$BUSYPID" 2>/dev/null
wait "$BUSYPID" 2>/dev/null
sleep 2
stamp "nvml idle again"
"$T/probe"
under

stamp "calibrate (budget $BUDGET s)"
s0=$(date +%s.%N)
# shellcheck disable=SC2086 # OPS: one word or none
build/gpu-offload calibrate --backend "$BE" --cpu-library numpy \
    --budget "$BUDGET" ${OPS:+--ops "$OPS"} --output "$OUT/profile-h200.txt"
rc=$?; echo "calibrate: rc=$rc wall $(awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
GPU_OFFLOAD_PROFILE="$OUT/profile-h200.txt" build/gpu-offload profile | head -8
stamp "finished"
rm -rf "$T"
