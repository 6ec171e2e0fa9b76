#!/usr/bin/env bash
# tests/gpu/uuid_metrics.sh OUTDIR - GPU UUIDs and `gpumutex metrics` with
# the real driver and NVML (issue 30). Run from the repository root after
# `make`; about one minute; writes OUTDIR/uuid_metrics.txt and exits 1 if a
# check failed.
#
#  1. `nvidia-smi -L`'s first GPU UUID given to gpumutex-run
#     --visible-devices: the child's CUDA_VISIBLE_DEVICES must be that
#     GPU's nvidia-smi index.
#  2. CUDA_VISIBLE_DEVICES=<UUID> inherited by a preloaded torch program
#     (skipped without torch): it sees one device, whose UUID is that one.
#  3. A MIG-... value is refused with the MIG message.
#  4. `gpumutex metrics` while a torch job holds the GPU (skipped without
#     torch): gpumutex_gpu_held 1 and NVML's utilisation and memory lines.
# The checks are eval'ed strings: their $ expand there, on purpose.
# shellcheck disable=SC2016
set -u
OUT=${1:-${OUT:-/tmp/gm-uuid-metrics}}
mkdir -p "$OUT"
log="$OUT/uuid_metrics.txt"
: >"$log"
fail=0
say() { echo "$*" | tee -a "$log"; }
check() { if eval "$2"; then say "ok    $1"; else say "FAIL  $1"; fail=1; fi; }

B=$PWD/build
locks=$(mktemp -d /tmp/gm-uuid-XXXXXX)
first=$(nvidia-smi -L | head -1)
uuid=$(echo "$first" | sed -n 's/.*(UUID: \(GPU-[0-9a-f-]*\)).*/\1/p')
index=$(echo "$first" | sed -n 's/^GPU \([0-9]*\):.*/\1/p')
say "first GPU: $first"

cvd=$("$B/gpumutex-run" --visible-devices "$uuid" --lock-dir "$locks/a" -- \
      sh -c 'echo "$CUDA_VISIBLE_DEVICES"' 2>>"$log")
check "gpumutex-run --visible-devices UUID gives index $index (got '$cvd')" \
      '[ "$cvd" = "$index" ]'
cvd=$("$B/gpumutex-run" --visible-devices "${uuid:0:12}" --lock-dir "$locks/a" -- \
      sh -c 'echo "$CUDA_VISIBLE_DEVICES"' 2>>"$log")
check "a UUID prefix (${uuid:0:12}) gives index $index too (got '$cvd')" \
      '[ "$cvd" = "$index" ]'

if python3 -c 'import torch' 2>/dev/null; then
    seen=$(CUDA_VISIBLE_DEVICES="$uuid" GPUMUTEX_VISIBLE_DEVICES="$index" \
           GPUMUTEX_LOCK_DIR="$locks/b" LD_PRELOAD="$B/libgpumutex.so" \
           python3 -c 'import torch; p = torch.cuda.get_device_properties(0); print(torch.cuda.device_count(), "GPU-" + str(p.uuid))' 2>>"$log")
    check "torch under CUDA_VISIBLE_DEVICES=UUID sees that GPU only ($seen)" \
          '[ "$seen" = "1 $uuid" ]'
else
    say "skip  torch not importable: the preloaded-program check"
fi

check "gpumutex-run with a MIG visible-devices value is refused" \
      '"$B/gpumutex-run" --visible-devices "MIG-x" --lock-dir "$locks/c" -- true 2>&1 | grep -q "names a MIG instance"'

if python3 -c 'import torch' 2>/dev/null; then
    "$B/gpumutex-run" --visible-devices "$index" --lock-dir "$locks/d" -- \
        python3 -c 'import torch, sys; torch.zeros(1, device="cuda"); print("ready", flush=True); sys.stdin.read()' \
        >"$OUT/holder.out" 2>>"$log" < <(sleep 20) &
    holder=$!
    for _ in $(seq 1 600); do grep -q ready "$OUT/holder.out" 2>/dev/null && break; sleep 0.1; done
    "$B/gpumutex" metrics --lock-dir "$locks/d" >"$OUT/metrics.prom" 2>>"$log"
    check "metrics: GPU $index held" "grep -q '^gpumutex_gpu_held{gpu=\"$index\"} 1\$' '$OUT/metrics.prom'"
    check "metrics: NVML utilisation of GPU $index" "grep -q '^gpumutex_gpu_utilization_ratio{gpu=\"$index\"} ' '$OUT/metrics.prom'"
    check "metrics: NVML memory of GPU $index" "grep -q '^gpumutex_gpu_memory_used_bytes{gpu=\"$index\"} [1-9]' '$OUT/metrics.prom'"
    wait "$holder" 2>/dev/null
else
    say "skip  torch not importable: the metrics check"
fi
rm -rf "$locks"
say "result: $([ $fail = 0 ] && echo ok || echo FAILED)"
exit $fail
