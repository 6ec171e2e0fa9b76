#!/usr/bin/env bash
# tests/gpu/run.sh OUTDIR - the GPU scenario set of gpumutex, on real GPUs.
#
# Builds what it needs (make all; tests/gpu/cujob.c with -lcuda; and, with
# nvcc, tests/gpu/cuda_job.cu with static and shared cudart), runs each
# scenario with all its jobs started together under build/gpumutex-run
# (GPU 0 only, a private lock directory per scenario), then
# tests/gpu/check.py proves from the jobs' journal that no two jobs used the
# GPU at once and that every job checked its own results. Prints a table;
# logs, journals and OUTDIR/summary.md stay in OUTDIR (default
# build/gpu-check). Exit status 0 only if every scenario passed (or there is
# no NVIDIA GPU: then it says so and skips).
#
#   1-torch   4 matmul jobs, is_available()/device_count() only, a job whose
#             subprocess.run children use CUDA, torch.multiprocessing spawn
#             (2 workers, one job), a DataLoader forking workers after CUDA
#   2-frameworks  JAX, CuPy, numba.cuda, Triton
#   3-native  nvcc programs (static and shared cudart), a C program -lcuda
#   4-sigkill a torch holder SIGKILLed mid-run while the next job queues
#   5-no-cuda python3 -c pass, nvidia-smi, import torch, NVML-based
#             is_available() under the preload while another job holds the
#             GPU: they must not wait (the holder is released only after they
#             all returned), and a CUDA job started meanwhile must queue
#   6-queries device queries while another job holds the GPU (torch
#             is_available with and without the NVML check, device
#             properties, CuPy, an nvcc program): no waiting line, done while
#             held; a torch job waiting at its first context and one that
#             queries, works on the CPU and only then queues; NVML's list of
#             the GPU's compute processes holds only the holder meanwhile
#             (nothing else touched the GPU); two query processes idle
#             afterwards and a third job runs while they do (not delayed)
#
# Environment: GPU_PYTHON (python with the frameworks; default python3),
# NVCC (default /usr/local/cuda/bin/nvcc), GPU_SCENARIOS (e.g. "1 4"),
# GPU_LOCKS (keep the lock directories there).
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO" || exit 1
OUTDIR=${1:-build/gpu-check}
PY=${GPU_PYTHON:-python3}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
SCENARIOS=${GPU_SCENARIOS:-1 2 3 4 5 6}
# These scenarios prove queueing and exclusion with holders that idle on
# purpose while others wait: idle suspension (tests/gpu/suspend.sh tests
# it) would serve those waiters early, so it is off here unless asked for.
export GPUMUTEX_IDLE_SUSPEND_MS=${GPUMUTEX_IDLE_SUSPEND_MS:-0}
B=$REPO/build/gpu
RUN=$REPO/build/gpumutex-run
mkdir -p "$OUTDIR" "$B" && OUTDIR=$(cd "$OUTDIR" && pwd) || exit 1
rm -rf "$OUTDIR"/[1-9]-* "$OUTDIR"/summary.md "$OUTDIR"/env.txt "$OUTDIR"/harness.log

if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
	echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L lists none): skipped"
	exit 0
fi

# ---- build -------------------------------------------------------------------
LOG=$OUTDIR/build.log
: >"$LOG"
make -s all >>"$LOG" 2>&1 || { cat "$LOG"; echo "gpu-check: make all failed"; exit 1; }
culib=""
for d in /usr/local/cuda/lib64/stubs /usr/local/cuda/targets/x86_64-linux/lib/stubs; do
	[ -e "$d/libcuda.so" ] && culib="-L$d -lcuda" && break
done
if [ -z "$culib" ]; then
	so=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
	[ -n "$so" ] && culib="-L$(dirname "$so") -l:libcuda.so.1"
fi
newer() { [ -x "$1" ] && [ "$1" -nt "$2" ] && [ "$1" -nt tests/gpu/gjournal.h ]; }
# shellcheck disable=SC2086
newer "$B/cujob" tests/gpu/cujob.c ||
	cc -std=c11 -O2 -Wall -Wextra -o "$B/cujob" tests/gpu/cujob.c $culib >>"$LOG" 2>&1 ||
	echo "gpu-check: cannot build tests/gpu/cujob.c (see $LOG)"
NVCC_SKIP=""
if [ -x "$NVCC" ]; then
	lib64=$(dirname "$NVCC")/../lib64
	for v in static shared; do
		newer "$B/cuda_job_$v" tests/gpu/cuda_job.cu && continue
		"$NVCC" -O2 -arch=native --cudart "$v" -o "$B/cuda_job_$v" tests/gpu/cuda_job.cu \
			-Xlinker -rpath -Xlinker "$lib64" >>"$LOG" 2>&1 ||
		"$NVCC" -O2 --cudart "$v" -o "$B/cuda_job_$v" tests/gpu/cuda_job.cu \
			-Xlinker -rpath -Xlinker "$lib64" >>"$LOG" 2>&1 ||
		echo "gpu-check: nvcc failed for --cudart $v (see $LOG)"
	done
else
	NVCC_SKIP="no nvcc at $NVCC"
fi

now() {
	if [ -x "$B/cujob" ]; then "$B/cujob" now
	else "$PY" -c 'import time; print(time.monotonic_ns())'; fi
}

{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "host: $(uname -srm), $(nproc) CPUs, $(ldd --version | head -1)"
	nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader |
		sed 's/^/gpu: /'
	[ -x "$NVCC" ] && echo "nvcc: $("$NVCC" --version | tail -2 | head -1)"
	"$PY" - <<'EOF'
import importlib.metadata as m, platform
v = []
for p in ("torch", "jax", "jaxlib", "cupy-cuda13x", "cupy-cuda12x", "numba",
          "numba-cuda", "cuda-bindings", "triton", "numpy"):
    try:
        v.append(f"{p} {m.version(p)}")
    except m.PackageNotFoundError:
        pass
print(f"python: {platform.python_version()}; " + ", ".join(v))
EOF
} >"$OUTDIR/env.txt" 2>&1

# GPU_LOCKS=DIR keeps the scenarios' lock directories (DIR/<scenario>),
# event logs included, for `gpumutex report` (tests/gpu/report.sh).
if [ -n "${GPU_LOCKS:-}" ]; then
	LOCKS=$GPU_LOCKS
	mkdir -p "$LOCKS"
else
	LOCKS=$(mktemp -d /tmp/gm-gpu-check.XXXXXX)
	trap 'rm -rf "$LOCKS"' EXIT
fi
PIDS=()

# launch SCEN TAG EXPECT TIMEOUT WHAT -- [VAR=VALUE...] CMD [ARGS...]
# Starts one job in the background under gpumutex-run (fresh job id), with
# stdin from $STDIN (default /dev/null); its exit status goes to TAG.rc.
# timeout(1) signals the job's whole process group.
launch() {
	local scen=$1 tag=$2 expect=$3 to=$4 what=$5 d=$OUTDIR/$1
	shift 5
	[ "${1-}" = -- ] && shift
	printf '%s\t%s\t%s\n' "$tag" "$expect" "$what" >>"$d/jobs.tsv"
	(
		exec 7>&-
		GM_TAG=$tag GM_JOURNAL=$d/journal timeout -k 10 "$to" \
			"$RUN" --visible-devices 0 --lock-dir "$LOCKS/$scen" -- env "$@" \
			<"${STDIN:-/dev/null}" >"$d/$tag.out" 2>"$d/$tag.err"
		echo $? >"$d/$tag.rc"
	) 2>>"$OUTDIR/harness.log" & # (bash's "Killed" notice of scenario 4)
	PIDS+=($!)
}

# skipjob SCEN TAG EXPECT WHAT REASON: a row that says why it did not run.
skipjob() {
	printf '%s\t%s\t%s\n' "$2" "$3" "$4" >>"$OUTDIR/$1/jobs.tsv"
	echo "skip: $5" >"$OUTDIR/$1/$2.rc"
}

# wait_for SECONDS CMD...: poll (harness only; no claim rests on timing).
wait_for() {
	local end=$((SECONDS + $1))
	shift
	until "$@"; do
		[ $SECONDS -ge $end ] && return 1
		sleep 0.1
	done
}

finish() {
	[ ${#PIDS[@]} -gt 0 ] && wait "${PIDS[@]}"
	PIDS=()
}

jw() { echo "$2 t=$(now)" >>"$OUTDIR/$1/journal"; }
note() { echo "$2" >>"$OUTDIR/$1/notes.txt"; echo "gpu-check: $1: $2"; }
began() { grep -q "^ev=begin .* tag=$2 " "$OUTDIR/$1/journal" 2>/dev/null; }
queued() { grep -q "gpumutex: pid [0-9]* waits for" "$OUTDIR/$1/$2.err" 2>/dev/null; }

T=tests/gpu/torch_jobs.py
O=tests/gpu/other_jobs.py

scenario_1() {
	local s=1-torch i
	for i in 1 2 3 4; do
		launch $s mm$i gpu 300 "torch bf16 matmuls 1 s, checked (A@I, float64 vs CPU)" -- "$PY" $T mm
	done
	launch $s avail result 300 "torch.cuda.is_available() + device_count() only (holds nothing)" -- "$PY" $T avail
	launch $s compile gpu 300 "torch.compile of a small function, checked against eager" -- \
		TORCHINDUCTOR_CACHE_DIR="$OUTDIR/$s/inductor-cache" TRITON_CACHE_DIR="$OUTDIR/$s/triton-cache" "$PY" $T compile
	launch $s graphs gpu 300 "CUDA graph captured and replayed 100 times, checked" -- "$PY" $T graphs
	launch $s subproc gpu 300 "CUDA, then subprocess.run children using CUDA (torch, env=None; ctypes libcuda, env=os.environ)" -- "$PY" $T subproc
	launch $s mp-spawn gpu 300 "torch.multiprocessing.spawn, 2 workers meeting at a barrier after CUDA init" -- "$PY" $T mp
	launch $s dataloader gpu 300 "CUDA, then DataLoader num_workers=2 forked (2 epochs)" -- "$PY" $T dataloader
	finish
}

scenario_2() {
	local s=2-frameworks
	launch $s jax gpu 300 "jax.numpy matmul vs numpy, jit loop" -- \
		XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 "$PY" $O jax
	launch $s cupy gpu 300 "CuPy float64 matmul vs numpy, loop" -- "$PY" $O cupy
	launch $s numba gpu 300 "numba.cuda kernel (or device arrays + cuda.bindings.driver)" -- "$PY" $O numba
	launch $s triton gpu 300 "Triton vector-add kernel vs torch (cold cache)" -- \
		TRITON_CACHE_DIR="$OUTDIR/$s/triton-cache" "$PY" tests/gpu/triton_job.py
	finish
}

scenario_3() {
	local s=3-native i v
	for i in 1 2; do
		for v in static shared; do
			if [ -n "$NVCC_SKIP" ]; then
				skipjob $s $v-$i gpu "nvcc --cudart $v, saxpy kernel" "$NVCC_SKIP"
			elif [ ! -x "$B/cuda_job_$v" ]; then
				skipjob $s $v-$i gpu "nvcc --cudart $v, saxpy kernel" "build failed (build.log)"
			else
				launch $s $v-$i gpu 120 "nvcc --cudart $v, saxpy kernel x4000, checked exactly" -- "$B/cuda_job_$v"
			fi
		done
		launch $s culink-$i gpu 120 "C -lcuda (PLT cuInit): memset/copy 256 MiB, checked" -- "$B/cujob" job
	done
	finish
}

scenario_4() {
	local s=4-sigkill hp
	launch $s holder killed 300 "torch matmul loop, SIGKILLed mid-run" -- "$PY" $T holdloop
	wait_for 200 began $s holder || note $s "holder never began"
	launch $s next gpu,mustwait 300 "torch mm job, queued behind the holder" -- "$PY" $T mm
	wait_for 200 queued $s next || note $s "next job never queued"
	hp=$(sed -n 's/^ev=begin pid=\([0-9]*\) .* tag=holder .*/\1/p' "$OUTDIR/$s/journal" | head -1)
	if [ -n "$hp" ]; then
		jw $s "ev=kill pid=$hp job=- tag=holder role=harness"
		kill -KILL "$hp"
	fi
	finish
}

# nowait SCEN TAG EXPECT WHAT -- [VAR=VALUE...] CMD...: run in the foreground
# under gpumutex-run while the holder holds; journal start and finish.
nowait() {
	local scen=$1 tag=$2 expect=$3 what=$4 d=$OUTDIR/$1
	shift 5
	printf '%s\t%s\t%s\n' "$tag" "$expect" "$what" >>"$d/jobs.tsv"
	jw "$scen" "ev=cmd-start pid=$$ job=- tag=$tag role=harness"
	GM_TAG=$tag GM_JOURNAL=$d/journal timeout -k 5 60 \
		"$RUN" --visible-devices 0 --lock-dir "$LOCKS/$scen" -- env "$@" \
		</dev/null >"$d/$tag.out" 2>"$d/$tag.err" 7>&-
	echo $? >"$d/$tag.rc"
	jw "$scen" "ev=cmd-done pid=$$ job=- tag=$tag role=harness"
}

scenario_5() {
	local s=5-no-cuda d=$OUTDIR/5-no-cuda
	mkfifo "$d/hold.fifo"
	STDIN=$d/hold.fifo launch $s holder gpu,holder 300 "C -lcuda job holding the GPU until its stdin closes" -- "$B/cujob" hold
	exec 7>"$d/hold.fifo" # the holder's stdin; closing it releases the holder
	wait_for 60 began $s holder || note $s "holder never began"
	launch $s cuda-waiter gpu,mustwait 300 "C -lcuda job started while held (must queue)" -- "$B/cujob" job
	wait_for 60 queued $s cuda-waiter || note $s "cuda-waiter never queued"
	nowait $s py-pass nowait "python3 -c pass" -- "$PY" -c pass
	if command -v nvidia-smi >/dev/null; then
		nowait $s nvidia-smi nowait "nvidia-smi (NVML)" -- nvidia-smi
	else
		skipjob $s nvidia-smi nowait "nvidia-smi (NVML)" "nvidia-smi not found"
	fi
	nowait $s import-torch nowait "python3 -c 'import torch' (dlsym's cuInit, never calls it)" -- "$PY" -c "import torch"
	nowait $s torch-nvml nowait,result "is_available()/device_count() with PYTORCH_NVML_BASED_CUDA_CHECK=1" -- \
		PYTORCH_NVML_BASED_CUDA_CHECK=1 "$PY" $T avail
	exec 7>&-
	finish
}

# nvml SCEN WHY WANT: journal NVML's list of the GPU's compute processes
# (check.py: it must hold exactly WANT processes).
nvml() {
	local apps
	apps=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null |
		tr -d ' ' | paste -sd: -)
	jw "$1" "ev=nvml pid=$$ job=- tag=nvml role=harness apps=${apps:--} want=$3 why=$2"
}
stage() { grep -q "^ev=info .* tag=$2 .*stage=$3" "$OUTDIR/$1/journal" 2>/dev/null; }
done_rc() { [ -s "$OUTDIR/$1/$2.rc" ]; }

scenario_6() {
	local s=6-queries d=$OUTDIR/6-queries
	mkfifo "$d/hold.fifo" "$d/idle.fifo"
	STDIN=$d/hold.fifo launch $s holder gpu,holder 300 "C -lcuda job holding the GPU until its stdin closes" -- "$B/cujob" hold
	exec 7>"$d/hold.fifo"
	wait_for 60 began $s holder || note $s "holder never began"
	launch $s waiter gpu,mustwait 300 "torch mm started while held: waits at its first context" -- "$PY" $T mm
	launch $s qcg gpu,mustwait 300 "queries, 1 s of CPU work, then GPU work: queues only at the GPU work" -- "$PY" $T qcg
	nowait $s q-avail nowait,result "is_available() + device_count() (gpumutex-run sets the NVML check)" -- "$PY" $T query avail
	nowait $s q-cuinit nowait,result "is_available() with PYTORCH_NVML_BASED_CUDA_CHECK=0: the runtime's cuInit and private queries" -- "$PY" $T query cuinit
	nowait $s q-props nowait,result "get_device_name/properties/capability (runtime cuInit)" -- "$PY" $T query props
	nowait $s q-cupy nowait,result "CuPy getDeviceCount + getDeviceProperties" -- "$PY" $O cupy-query
	if [ -x "$B/cuda_job_static" ]; then
		nowait $s q-nvcc nowait,result "nvcc program (static cudart): cudaGetDeviceCount + cudaGetDeviceProperties" -- "$B/cuda_job_static" query
	else
		skipjob $s q-nvcc nowait "nvcc program queries" "no nvcc build"
	fi
	STDIN=$d/idle.fifo launch $s idle-props result 300 "get_device_properties, then idles until the end" -- "$PY" $T query props --stdin
	STDIN=$d/idle.fifo launch $s idle-cuinit result 300 "is_available() with the runtime's cuInit, then idles until the end" -- "$PY" $T query cuinit --stdin
	exec 8>"$d/idle.fifo"
	wait_for 120 queued $s waiter || note $s "waiter never queued"
	wait_for 120 stage $s qcg cpu-done || note $s "qcg never finished its CPU work"
	wait_for 60 queued $s qcg || note $s "qcg never queued"
	wait_for 120 stage $s idle-props queried || note $s "idle-props never queried"
	wait_for 120 stage $s idle-cuinit queried || note $s "idle-cuinit never queried"
	nvml $s "held:_waiter_and_qcg_queued,_two_query_processes_idle" 1
	jw $s "ev=release pid=$$ job=- tag=holder role=harness"
	exec 7>&-
	wait_for 300 done_rc $s waiter
	wait_for 300 done_rc $s qcg
	wait_for 60 done_rc $s holder
	nvml $s "only_the_idle_query_processes_left" 0
	launch $s third gpu,whileidle 300 "torch mm started while the two query processes idle: not delayed" -- "$PY" $T mm
	wait_for 300 done_rc $s third
	jw $s "ev=idle-end pid=$$ job=- tag=harness role=harness"
	exec 8>&-
	finish
}

declare -A DIRS=([1]=1-torch [2]=2-frameworks [3]=3-native [4]=4-sigkill [5]=5-no-cuda [6]=6-queries)
for n in $SCENARIOS; do
	[ -n "${DIRS[$n]-}" ] || { echo "gpu-check: no scenario $n"; exit 2; }
	mkdir -p "$OUTDIR/${DIRS[$n]}"
	t0=$SECONDS
	"scenario_$n"
	echo "gpu-check: scenario ${DIRS[$n]} done in $((SECONDS - t0)) s"
done

echo
cat "$OUTDIR/env.txt"
echo
"$PY" tests/gpu/check.py "$OUTDIR"
