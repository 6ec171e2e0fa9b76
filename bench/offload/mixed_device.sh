#!/bin/bash
# mixed_device.sh OUT - where the in-process sweep's "mixed" point loses
# time on a GPU machine (run.py --sweep-mode inproc measured it at 1.17
# with nothing on the GPU): the in-process method (work.py --inproc, 16
# ABBA rounds) on mixed, on its A/A control (BENCH_INPROC_CONTROL=1, both
# sides paused: the method's own bias), and on each kind of call mixed
# makes, one process each, in alternation, ROUNDS times. One line per
# process: the median ratio (active / paused) and the rounds' ratios.
# Knobs: PYTHON, THREADS (16), ROUNDS (2), POINTS (lines "LABEL OP:N
# [VAR=VALUE...]": these points instead of the default list below).
set -u
OUT=${1:?usage: mixed_device.sh OUT}
ROUNDS=${ROUNDS:-2}
# shellcheck source=tests/offload/cuda/device_common.sh
. tests/offload/cuda/device_common.sh
dev_build

point() {       # LABEL OP:N ENV...
    local label=$1 op=$2; shift 2
    env "$@" timeout 120 build/gpu-offload run --summary \
        --backend build/libgpuoffload-cuda.so --profile docs/profile-h200.txt -- \
        "$PY" bench/offload/work.py --ops "$op" --inproc 16 --rep-s 0.05 --warm-s 1.0 \
        > "$OUT/p.json" 2> "$OUT/p.err"
    "$PY" - "$label" "$op" "$OUT/p.json" <<'PY'
import json, statistics as st, sys
label, op, path = sys.argv[1:4]
try:
    d = json.load(open(path))["results"][0]["inproc"]
except (OSError, ValueError, KeyError, IndexError) as e:
    print("%-8s %-12s failed: %s" % (label, op, e))
    sys.exit()
p, a = d["paused"], d["active"]
r = [x / y for x, y in zip(a, p)]
print("%-8s %-12s ratio %.3f  rounds above 1: %2d of %d  [%s]  paused %.0f us a call"
      % (label, op, st.median(a) / st.median(p), sum(x > 1 for x in r), len(r),
         " ".join("%.2f" % x for x in r), 1e6 * st.median(p) / d["count"]))
PY
    grep -o "reasons:.*" "$OUT/p.err" | head -1
}

# The points, one a line: LABEL OP:N [VAR=VALUE...] (POINTS replaces them).
DEFAULT_POINTS="mixed mixed:0
control mixed:0 BENCH_INPROC_CONTROL=1
$(for op in dgemm:8 dgemm:64 dgemm:200 solve:32 inv:32 cholesky:48 eigh:24 \
        svd:16 qr:32 gemv:200; do echo "part $op"; done)
control eigh:16 BENCH_INPROC_CONTROL=1
part eigh:16"
for r in $(seq 1 "$ROUNDS"); do
    echo "== round $r ($(elapsed))"
    while read -r label op env; do
        # shellcheck disable=SC2086 # ENV: words, one per variable
        [ -n "$label" ] && point "$label" "$op" $env < /dev/null
    done <<< "${POINTS:-$DEFAULT_POINTS}"
done
echo "== done: $(elapsed)"
