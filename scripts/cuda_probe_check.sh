#!/usr/bin/env bash
# The CUDA driver uprobes on a GPU host (issue 38 item 1): under a minute, as root.
#
#   scripts/cuda_probe_check.sh
#
# Needs tracer/bpf/iotrace.bpf.o (`make build` here; on a host without clang, carry the one
# built elsewhere), a python3 with torch and CUDA, and libbpf.so.1: the system's, or one put in
# build/gpu-libs/ with its libelf.so.1 (a host without them: on a Debian 12 machine,
# `mkdir -p build/gpu-libs && cp -L /usr/lib/x86_64-linux-gnu/lib{bpf,elf}.so.1 build/gpu-libs/`,
# and carry that folder). Runs scripts/cuda_probe_check.py: a tiny torch program's syncs and
# copies counted per thread through the real libcuda; prints PASS or FAIL; exits 1 on FAIL.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d build/gpu-libs ]; then
    export LD_LIBRARY_PATH="$PWD/build/gpu-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ -e build/gpu-libs/libbpf.so.1 ] && export IOTRACE_LIBBPF="$PWD/build/gpu-libs/libbpf.so.1"
fi
[ "$(id -u)" = 0 ] || { echo "FAIL needs root (loads BPF programs)"; exit 1; }
[ -e tracer/bpf/iotrace.bpf.o ] || { echo "FAIL tracer/bpf/iotrace.bpf.o is missing (make build)"; exit 1; }
PY=""
for cand in python3 .venv/bin/python python; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c \
        "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
        PY=$cand; break
    fi
done
[ -n "$PY" ] || { echo "FAIL no python with torch and a CUDA device"; exit 1; }
echo "python: $PY; kernel $(uname -r)"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L
timeout 60 "$PY" scripts/cuda_probe_check.py
