#!/bin/bash
# gemv_device.sh OUT - gemv on the GPU with its matrix resident (issue 31,
# level 2), on a GPU machine, from the repository root after `make`; about
# 3 minutes. 1. gemvcheck (tests/offload/gemvcheck.c: every trans,
# increment and alpha/beta case, Fortran and CBLAS, d and z; a matrix
# changed by a write, read(2), MADV_DONTNEED) with the CUDA backend forced
# to the GPU, every result compared with the CPU library's (relative
# 1e-10 for d, z; the file sizes equal) and the summary's forced-gpu count
# above 0. 2. bench/offload/reswork.py matvec 8192 100 and cg 8192 200 on
# the CPU, and forced to the GPU with residency off and on (the default
# level needs gemv curves in the profile, which calibrate does not
# measure yet). Prints "gemv_device: ok" or "gemv_device: FAIL ..." last;
# exit 0 only when every check passed.
set -u
OUT=${1:?usage: gemv_device.sh OUT}
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$OUT"
exec > >(tee "$OUT/gemv_device.log") 2>&1
fail=0
if ! make -s -j16 build/libgpuoffload.so build/libgpuoffload-cuda.so \
    build/tests/offload/gemvcheck > "$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log"; echo "gemv_device: FAIL build"; exit 1
fi
G=build/tests/offload/gemvcheck
gpu_env=(GPU_OFFLOAD_FORCE=gpu GPU_OFFLOAD_BACKEND=build/libgpuoffload-cuda.so
         GPU_OFFLOAD_RESIDENT_MIN=0 GPU_OFFLOAD_MIN_FLOPS=0 GPU_OFFLOAD_SUMMARY=1
         LD_PRELOAD=build/libgpuoffload.so)
for c in cases fresh write read dontneed; do
    "$G" "$OUT/$c.cpu" "$c" > /dev/null || { echo "FAIL $c: cpu run"; fail=1; continue; }
    env "${gpu_env[@]}" timeout 120 "$G" "$OUT/$c.gpu" "$c" > /dev/null 2> "$OUT/$c.err" ||
        { echo "FAIL $c: gpu run"; cat "$OUT/$c.err"; fail=1; continue; }
    off=$(sed -n 's/.*forced-gpu=\([0-9]*\).*/\1/p' "$OUT/$c.err" | tail -1)
    if ! python3 - "$OUT/$c.cpu" "$OUT/$c.gpu" <<'EOF'
import array, sys
a, b = array.array("d"), array.array("d")
a.frombytes(open(sys.argv[1], "rb").read())
b.frombytes(open(sys.argv[2], "rb").read())
bad = [i for i in range(len(a)) if not abs(a[i] - b[i]) <= 1e-10 * (1 + abs(a[i]))]
print("  %d values, %d differ" % (len(a), len(bad)))
sys.exit(1 if bad or len(a) != len(b) or not a else 0)
EOF
    then echo "FAIL $c: results differ from the CPU library's"; fail=1; fi
    echo "$c: ${off:-0} gemv calls on the GPU; $(grep residency: "$OUT/$c.err")"
    [ "${off:-0}" -gt 0 ] || { echo "FAIL $c: nothing offloaded"; fail=1; }
done
for w in "matvec 8192 100" "cg 8192 200"; do
    # shellcheck disable=SC2086
    echo "== $w: CPU $(timeout 120 "$PY" bench/offload/reswork.py $w)"
    for r in 0 1; do
        # shellcheck disable=SC2086
        echo "== $w: GPU, residency $r: $(env GPU_OFFLOAD_RESIDENT=$r GPU_OFFLOAD_FORCE=gpu \
            GPU_OFFLOAD_BACKEND=build/libgpuoffload-cuda.so GPU_OFFLOAD_SUMMARY=1 \
            LD_PRELOAD=build/libgpuoffload.so timeout 180 "$PY" bench/offload/reswork.py $w 2>&1 |
            tr '\n' ' ')"
    done
done
[ $fail = 0 ] && echo "gemv_device: ok" || echo "gemv_device: FAIL (above)"
exit $fail
