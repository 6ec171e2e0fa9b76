#!/usr/bin/env bash
# tests/gpu/report.sh OUTDIR - the GPU scenario set (tests/gpu/run.sh) with
# its event logs kept, NVML sampled while it runs (`gpumutex sample`, real
# libnvidia-ml.so.1), then one `gpumutex report` of the whole run: text,
# JSON, SVG and HTML in OUTDIR, and the scenario outputs as gc.tar.gz.
# GPU_TIME (seconds, default 150) bounds the scenario set.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO" || exit 1
OUT=${1:?usage: tests/gpu/report.sh OUTDIR}
mkdir -p "$OUT"
export GPU_LOCKS=/tmp/gm-gpu-report
rm -rf "$GPU_LOCKS" /tmp/gm-gpu-all
mkdir -p "$GPU_LOCKS"
make -s all >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
GM=$REPO/build/gpumutex
# The sampler: every second, each scenario's lock directory that exists.
(
	while :; do
		for d in "$GPU_LOCKS"/*/; do
			[ -d "$d" ] || continue
			"$GM" sample --lock-dir "${d%/}" --count 1 2>>"$OUT/sample.err"
			"$GM" status --json --lock-dir "${d%/}" 2>/dev/null |
				grep '"lease_memory": [0-9]' >>"$OUT/status-nvml.jsonl"
		done
		sleep 1
	done
) &
sampler=$!
timeout "${GPU_TIME:-150}" bash tests/gpu/run.sh "$OUT/gc"
echo "run.sh exit: $?"
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
tail -c 20000 "$OUT/status-nvml.jsonl" >"$OUT/status.tmp" 2>/dev/null
mv "$OUT/status.tmp" "$OUT/status-nvml.jsonl" 2>/dev/null
# One lock directory with every scenario's log (the reader sorts by time).
mkdir -p /tmp/gm-gpu-all/job/0
chmod 1777 /tmp/gm-gpu-all /tmp/gm-gpu-all/job
cat "$GPU_LOCKS"/*/job/0/events.log >/tmp/gm-gpu-all/job/0/events.log
"$GM" report --lock-dir /tmp/gm-gpu-all --since 1h --svg "$OUT/report.svg" \
	--html "$OUT/report.html" >"$OUT/report.txt"
"$GM" report --lock-dir /tmp/gm-gpu-all --since 1h --json >"$OUT/report.json"
"$GM" log --lock-dir /tmp/gm-gpu-all >"$OUT/log.txt"
cat "$OUT/report.txt"
tar -czf "$OUT/gc.tar.gz" -C "$OUT" gc sample.err build.log 2>/dev/null
rm -rf "$OUT/gc" "$OUT/sample.err" "$OUT/build.log"
ls -la "$OUT"
