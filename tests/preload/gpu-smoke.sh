#!/bin/sh
# gpu-smoke.sh - manual check of libgpumutex.so against a real NVIDIA driver
# (not part of the pytest suite, which uses the fake driver). Run from the
# repository root on a GPU machine; builds into $OUT (default
# /tmp/gpu-smoke) with the standalone build line, without make.
set -u
OUT=${OUT:-/tmp/gpu-smoke}
B=$OUT/build
mkdir -p "$B"
uname -m; ldd --version | head -1; nvidia-smi -L || true
cc -shared -fPIC -fvisibility=hidden -O2 -o "$B/libgpumutex.so" \
    src/preload/*.c src/lease/*.c -Isrc/lease -ldl -lpthread || exit 1
cc -O2 -o "$B/cuprobe" tests/preload/cuprobe.c -ldl -lpthread || exit 1
L=$B/libgpumutex.so
export GPUMUTEX_VISIBLE_DEVICES=0 GPUMUTEX_LOCK_DIR="$OUT/lock" GPUMUTEX_TIMEOUT=60
for m in dlopen default "gpa2 2000 0" "gpa2 12000 2" "self 11030" "self 12000" \
         fallback "threads 8" errno fds; do
    echo "== cuprobe $m"
    # shellcheck disable=SC2086
    LD_PRELOAD=$L "$B/cuprobe" $m
done
echo "== a second job waits, then times out"
LD_PRELOAD=$L "$B/cuprobe" hold < /dev/zero > "$OUT/hold.out" &
HOLD=$!
while ! grep -q ready "$OUT/hold.out"; do sleep 0.1; done
GPUMUTEX_TIMEOUT=1 LD_PRELOAD=$L "$B/cuprobe" dlopen
kill "$HOLD"; wait "$HOLD" 2>/dev/null
if [ -x /usr/local/cuda/bin/nvcc ]; then
    /usr/local/cuda/bin/nvcc -o "$B/cudart-static" tests/preload/cudart_probe.cu &&
    /usr/local/cuda/bin/nvcc --cudart shared -o "$B/cudart-shared" \
        tests/preload/cudart_probe.cu -Xlinker -rpath -Xlinker /usr/local/cuda/lib64 &&
    for p in cudart-static cudart-shared; do
        echo "== $p"; "$B/$p"; LD_PRELOAD=$L "$B/$p"
    done
fi
echo "== python"
LD_PRELOAD=$L python3 -c 'import ctypes, os; print("rc", ctypes.CDLL("libcuda.so.1").cuInit(0), os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("GPUMUTEX_JOB"))'
LD_PRELOAD=$L python3 -c 'import torch, os; torch.zeros(1, device="cuda"); print("torch ok", torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))' 2>&1 | tail -2
echo "== done"
