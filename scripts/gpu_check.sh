#!/usr/bin/env bash
# The GPU side of iotrace on a CUDA host, as one script of under 5 minutes (issue 38), as root:
#
#   scripts/gpu_check.sh            python3 with torch (CUDA), pynvml, pyarrow, pandas, psutil,
#                                   rich; tracer/bpf/*.bpf.o built (make build); libbpf.so.1
#                                   (the system's, or IOTRACE_LIBBPF + LD_LIBRARY_PATH)
#
# 0. the CUDA driver uprobes against the real libcuda (scripts/cuda_probe_check.py);
# then iotrace --gpu auto traces five cases of tracer/workloads/train.py (--device cuda) and
# checks what it says against what should hold:
# 1. starved: one DataLoader worker with a heavy CPU transform: the GPU's idle time after the
#    start-up goes to data_wait_cpu;
# 2. checkpoint: torch.save + fsync of ~1.5 GB of bf16 CUDA tensors every 6 steps: the trace's
#    checkpoint time >= 85 % of the job's own clock of its saves, the idle time -> checkpoint,
#    checkpoint_stall leads;
# 3. gpu_bound: 8192^2 bf16 matmuls each step then .item(): gpu_wait leads the loop's split,
#    not_io_bound says so, the GPU idles little;
# 4. launch_bound: thousands of tiny kernels each step: host_bound, compute (host) leads;
# 5. startup: in each run, the GPU's idle time before the first batch is `startup`.
# Prints PASS/FAIL per case with its numbers; exits 1 if any failed. With OUT set (the device
# tool's folder), the traces and the jobs' output come back as one file, $OUT/traces.tar.gz
# (the tool returns 8 files at most, 2 folders deep: a trace directory is more), and the
# script's output as $OUT/gpu_check.log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID   # CUDA's device numbering = NVML's
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TRACES=$WORK/traces
mkdir -p "$TRACES"
[ -n "${OUT:-}" ] && exec > >(tee "$OUT/gpu_check.log") 2>&1
fail=0
started=$(date +%s)

[ "$(id -u)" = 0 ] || { echo "FAIL needs root (loads BPF programs)"; exit 1; }
ls tracer/bpf/*.bpf.o >/dev/null 2>&1 || { echo "FAIL tracer/bpf/*.bpf.o missing (make build)"; exit 1; }
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || { echo "FAIL $PY has no torch with a CUDA device"; exit 1; }
"$PY" -c "import pynvml, pyarrow, pandas, psutil, rich" || { echo "FAIL $PY lacks a module"; exit 1; }
echo "python: $PY, torch $("$PY" -c 'import torch; print(torch.__version__)'), kernel $(uname -r)"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L

# -- 0. the uprobes on the real driver --------------------------------------------------------
if timeout 60 "$PY" scripts/cuda_probe_check.py; then echo "PASS uprobes"; else echo "FAIL uprobes"; fail=1; fi

DATA="$WORK/data"
"$PY" -c "from tracer.workloads.dataset import make_dataset as m; m('$DATA', 96, 192)" >/dev/null

# run_case NAME SECONDS TRAIN-ARGS...: iotrace launches the training; then scripts/gpu_judge.py
# judges the trace (and the job's own output: without a terminal it is iotrace's).
run_case() {
    local name=$1 limit=$2; shift 2
    local t0; t0=$(date +%s)
    timeout "$limit" "$PY" -m tracer.cli --gpu auto --no-tui -i 1 -o "$TRACES/$name" -- \
        "$PY" -m tracer.workloads.train --data "$DATA" --device cuda "$@" \
        > "$WORK/$name.out" 2> "$WORK/$name.err"
    local rc=$?
    echo "      $name: iotrace exited $rc after $(( $(date +%s) - t0 )) s"
    if [ $rc -ne 0 ]; then
        echo "FAIL $name: iotrace exited $rc"; tail -5 "$WORK/$name.err"; fail=1; return
    fi
    cat "$WORK/$name.out" "$WORK/$name.err" > "$TRACES/$name.job.log"
    timeout 120 "$PY" scripts/gpu_judge.py "$name" "$TRACES/$name" "$TRACES/$name.job.log" || fail=1
}

run_case starved 75 --num-workers 1 --transform heavy --transform-rounds 20 --epochs 1
run_case checkpoint 120 --num-workers 2 --persistent-workers --epochs 3 \
    --checkpoint-every 6 --checkpoint-mb 1500 --checkpoint-device cuda \
    --checkpoint-dir "$WORK/ckpt"
rm -rf "$WORK/ckpt"
run_case gpu_bound 75 --num-workers 2 --persistent-workers --epochs 3 \
    --gpu-work matmul --gpu-rounds 150
run_case launch_bound 75 --num-workers 2 --persistent-workers --epochs 3 \
    --gpu-work tiny --gpu-rounds 20000

if [ -n "${OUT:-}" ]; then
    tar -czf "$OUT/traces.tar.gz" -C "$WORK" traces 2>/dev/null \
        && [ "$(stat -c %s "$OUT/traces.tar.gz")" -gt $((15 << 20)) ] \
        && { rm -f "$OUT/traces.tar.gz"; echo "note: traces.tar.gz over 15 MiB, left out"; }
fi
echo "gpu_check: $([ $fail -eq 0 ] && echo PASS || echo FAIL) in $(( $(date +%s) - started )) s"
exit $fail
