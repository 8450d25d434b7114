#!/usr/bin/env bash
# GPU check for tracer/gpu/ on a machine with an NVIDIA GPU (offline is fine; about a minute).
#
#   scripts/gpu_check.sh            run from anywhere; uses the repo's .venv when it has pynvml,
#                                   else the system python3 with pynvml, else the system python3
#                                   with a copy of .venv/.../pynvml.py (or $PYNVML_PY) alone
#
# 1. python -m pytest -q tests/test_gpu.py (the real-NVML test runs instead of skipping);
# 2. a live check: opens NvmlSource, prints the devices, polls for the length of a small CUDA
#    matmul load (busy 2 s, paused 1.5 s, busy 1.5 s; run by whichever python has torch with CUDA,
#    skipped when none has) and prints the calibrated NVML clock, the rows and the idle spans; the
#    pause must come out as an idle span on the load's GPU, the busy phases must not.
# 3. iotrace end to end (root, BPF objects built, torch with CUDA): a CUDA training loop with a
#    starved DataLoader (idle spans attributed to data wait), then a healthy one (little idle).
# Prints PASS/FAIL/SKIP lines; exits 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_DEVICE_ORDER=PCI_BUS_ID   # CUDA's device numbering = NVML's
fail=0
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

has() { "$1" -c "$2" >/dev/null 2>&1; }

PY=""
for cand in .venv/bin/python python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && has "$cand" "import pynvml"; then PY=$cand; break; fi
done
if [ -z "$PY" ]; then
    # nvidia-ml-py is one pure-ctypes file: use a copy of it (the .venv's, or $PYNVML_PY) with the
    # system python, without the rest of the .venv (which may not have come along).
    for f in "${PYNVML_PY:-}" .venv/lib/python3*/site-packages/pynvml.py; do
        if [ -n "$f" ] && [ -f "$f" ]; then
            mkdir -p "$WORK/shim" && cp "$f" "$WORK/shim/pynvml.py"
            export PYTHONPATH="$PYTHONPATH:$WORK/shim"
            for cand in python3 python; do
                if command -v "$cand" >/dev/null 2>&1 && has "$cand" "import pynvml"; then
                    PY=$cand; echo "pynvml: $f"; break
                fi
            done
            break
        fi
    done
fi
if [ -z "$PY" ]; then
    echo "FAIL no python with pynvml (nvidia-ml-py): tried .venv/bin/python, python3, python," \
         "and a copy of .venv/lib/python3*/site-packages/pynvml.py or \$PYNVML_PY"
    exit 1
fi
echo "python: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L

# -- 1. the unit tests ------------------------------------------------------------------------
if has "$PY" "import pytest, pyarrow, pandas"; then
    if timeout 120 "$PY" -m pytest -q -rs tests/test_gpu.py; then
        echo "PASS pytest tests/test_gpu.py"
    else
        echo "FAIL pytest tests/test_gpu.py"; fail=1
    fi
else
    echo "SKIP pytest: $PY lacks pytest/pyarrow/pandas"
fi

# -- 2. the live check ------------------------------------------------------------------------
LOADPY=""
for cand in .venv/bin/python python3 python; do
    if command -v "$cand" >/dev/null 2>&1 \
        && has "$cand" "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        LOADPY=$cand; break
    fi
done

cat > "$WORK/load.py" <<'EOF'
import json, sys, time
import torch

dev = torch.device("cuda:0")
props = torch.cuda.get_device_properties(dev)
uuid = str(getattr(props, "uuid", "") or "")
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)


def busy(seconds):
    start, end = time.time_ns(), time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(8):
            a @ b
        torch.cuda.synchronize()
    return start, time.time_ns()


busy(0.3)  # warm up (cuBLAS handles, clocks)
time.sleep(0.5)
phases = [("busy", *busy(2.0))]
start = time.time_ns()
time.sleep(1.5)
phases.append(("pause", start, time.time_ns()))
phases.append(("busy", *busy(1.5)))
torch.cuda.synchronize()
json.dump({"uuid": uuid if uuid.startswith("GPU-") or not uuid else "GPU-" + uuid,
           "name": props.name, "phases": phases}, sys.stdout)
EOF

if [ -n "$LOADPY" ]; then
    echo "load: $LOADPY (torch with CUDA)"
    timeout 90 "$LOADPY" "$WORK/load.py" >"$WORK/load.json" 2>"$WORK/load.err" &
    LOADPID=$!
else
    echo "SKIP load: no python with torch and CUDA; sampling an unloaded GPU only"
    LOADPID=""
fi

timeout 100 "$PY" - "$WORK/load.json" "${LOADPID:-0}" <<'EOF'
import json, os, sys, time

from tracer.gpu.idle import IdleDetector, soft_idle_s
from tracer.gpu.nvml import GpuSampler, GpuUnavailable, NvmlSource, mig_reason

out, loadpid = sys.argv[1], int(sys.argv[2])
try:
    source = NvmlSource()
except GpuUnavailable as e:
    print(f"FAIL live: {e}")
    sys.exit(1)
devices = source.devices()
for d in devices:
    print(f"device {d.index}: {d.name} {d.uuid} mig={d.mig}")
if not devices:
    print("FAIL live: NVML lists no GPU")
    sys.exit(1)
reason = mig_reason(devices)
if reason:
    print(f"note: {reason}")

sampler = GpuSampler(source)
detector = IdleDetector()
rows, spans, poll_s = [], [], []
t_end = time.monotonic() + (60 if loadpid else 5)


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


while time.monotonic() < t_end:
    time.sleep(0.5)
    t0 = time.perf_counter()
    new = sampler.poll(time.time_ns())
    poll_s.append(time.perf_counter() - t0)
    rows += new
    spans += detector.feed(new)
    if loadpid and not alive(loadpid):
        loadpid = 0
        t_end = min(t_end, time.monotonic() + 1.0)  # one more second of samples after the load
spans += detector.flush()
for note in sampler.notes:
    print(f"note: {note}")
print(f"clock: {sampler.clock} offset_ns={sampler.offset_ns}")
print(f"poll: max {max(poll_s) * 1000:.1f} ms, mean {sum(poll_s) / len(poll_s) * 1000:.1f} ms "
      f"({len(sampler.sampled)} GPU(s), PCIe included)")
print(f"processes: {sampler.processes}")
ok = True
for d in sampler.sampled:
    mine = [r for r in rows if r["gpu"] == d.index]
    utils = [r["util_pct"] for r in mine]
    periods = sorted(r["sample_period_ns"] for r in mine)
    print(f"GPU {d.index}: {len(mine)} rows, util min/max {min(utils, default=0):.0f}/"
          f"{max(utils, default=0):.0f} %, median period "
          f"{periods[len(periods) // 2] / 1e6 if periods else 0:.0f} ms, pcie rx/tx "
          f"{mine[-1]['pcie_rx_bytes_s'] if mine else None}/{mine[-1]['pcie_tx_bytes_s'] if mine else None}")
    if mine:
        soft = soft_idle_s(mine, mine[0]["ts"] - mine[0]["sample_period_ns"], mine[-1]["ts"])
        print(f"GPU {d.index}: soft idle {soft.get(d.index, 0):.2f} s")
    for s in spans:
        if s.gpu == d.index:
            print(f"  idle span {s.start} .. {s.end}  {s.duration_ns / 1e9:.2f} s  {s.samples} rows")
    if not mine:
        print(f"FAIL live: no rows for GPU {d.index}")
        ok = False

if os.path.getsize(out) if os.path.exists(out) else 0:
    load = json.load(open(out))
    target = next((d for d in sampler.sampled if d.uuid == load["uuid"]), None)
    if target is None and any(d.uuid == load["uuid"] for d in devices):
        print(f"PASS live (MIG): the load ran on a MIG device; NVML has no utilisation for it")
        sys.exit(0 if ok else 1)
    if target is None:
        target = sampler.sampled[0] if sampler.sampled else None
        print(f"note: load GPU uuid {load['uuid']!r} not matched; checking GPU "
              f"{target.index if target else None}")
    if target is None:
        print("FAIL live: no sampled GPU to check the load against")
        sys.exit(1)
    if sampler.clock is None:
        print("FAIL live: NVML produced no samples under load (clock not calibrated)")
        ok = False
    mine = [r for r in rows if r["gpu"] == target.index]
    tspans = [s for s in spans if s.gpu == target.index]

    def overlap(lo, hi, a, b):
        return max(0, min(hi, b) - max(lo, a))

    for kind, lo, hi in load["phases"]:
        inside = [r["util_pct"] for r in mine if lo < r["ts"] <= hi]
        idle = sum(overlap(lo, hi, s.start, s.end) for s in tspans)
        share = idle / (hi - lo)
        print(f"{kind:5s} {(hi - lo) / 1e9:.2f} s: {len(inside)} rows, mean util "
              f"{sum(inside) / len(inside) if inside else float('nan'):.0f} %, idle spans cover "
              f"{100 * share:.0f} %")
        if kind == "pause" and share < 0.5:
            print("FAIL live: the 1.5 s pause is not found as an idle span")
            ok = False
        if kind == "busy" and (share > 0.25 or not inside or max(inside) < 50):
            print("FAIL live: a busy phase is not seen as busy")
            ok = False
    print("PASS live" if ok else "FAIL live")
else:
    print("PASS live (no load: devices, samples and rates read)" if ok else "FAIL live")
sys.exit(0 if ok else 1)
EOF
live=$?
[ -n "$LOADPID" ] && { wait "$LOADPID" || { echo "load failed:"; tail -5 "$WORK/load.err"; }; }
[ "$live" -ne 0 ] && fail=1

# -- 3. iotrace end to end: a starved DataLoader, then a healthy run -------------------------------
# A CUDA training loop whose one DataLoader worker runs a heavy CPU transform (the GPU waits for
# batches), then one with two workers and heavy GPU compute. iotrace --gpu auto traces each; the
# starved run must have GPU idle spans mostly attributed to data wait, the healthy one must not.
IOTRACE_OK=""
if [ -n "$LOADPY" ] && [ "$(id -u)" -eq 0 ] && has "$LOADPY" "import tracer.cli, pyarrow, psutil, rich" \
    && ls tracer/bpf/*.bpf.o >/dev/null 2>&1; then IOTRACE_OK=1; fi
if [ -z "$IOTRACE_OK" ]; then
    echo "SKIP iotrace end to end: needs root, built BPF objects (make build) and a python with torch+CUDA and iotrace's dependencies"
else
    DATA="$WORK/data"
    "$LOADPY" -c "from tracer.workloads.dataset import make_dataset as m; m('$DATA', 96, 192)" >/dev/null
    run_case() {  # name, expect (starved|healthy), training args...
        local name=$1 expect=$2; shift 2
        timeout 240 "$LOADPY" -m tracer.cli --gpu auto --no-tui -o "$WORK/$name" -- \
            "$LOADPY" -m tracer.workloads.train --data "$DATA" --device cuda "$@" \
            > "$WORK/$name.out" 2> "$WORK/$name.err" || { echo "FAIL $name: iotrace exited $?"; tail -3 "$WORK/$name.err"; return 1; }
        "$LOADPY" - "$WORK/$name" "$expect" <<'PYEOF'
import sys
import pandas as pd
import tracer
t = tracer.load(sys.argv[1]); expect = sys.argv[2]
gpu, idle = t["gpu"], t["gpu_idle"]
if gpu.empty:
    print(f"FAIL {expect}: no NVML samples in the trace"); sys.exit(1)
by_cause = (idle.groupby("cause", observed=True).duration_ns.sum() / 1e9).to_dict() if not idle.empty else {}
# the start-up's part (imports, CUDA init) is judged by neither case: the rest of the run is
startup_s = by_cause.get("startup", 0.0)
span_s = (gpu.sample_period_ns.sum() / 1e9 - startup_s) or 1  # the time the samples cover
idle_s = (idle.duration_ns.sum() / 1e9 if not idle.empty else 0.0) - startup_s
wait = sum(v for k, v in by_cause.items() if k in ("data_wait_io", "data_wait_cpu", "sync_loading"))
print(f"      {expect}: GPU idle {100 * idle_s / span_s:.0f} % of {span_s:.1f} s after a "
      f"{startup_s:.1f} s start-up; by cause {by_cause}")
print("      leading finding:", t.findings.kind.iloc[0] if not t.findings.empty else None)
if expect == "starved":
    ok = idle_s > 0.2 * span_s and wait >= 0.5 * idle_s
else:
    ok = idle_s < 0.2 * span_s
print(f"{'PASS' if ok else 'FAIL'} iotrace {expect} run"); sys.exit(0 if ok else 1)
PYEOF
    }
    run_case starved starved --num-workers 1 --transform heavy --transform-rounds 20 --epochs 1 || fail=1
    run_case healthy healthy --num-workers 2 --persistent-workers --compute heavy --compute-rounds 200 --epochs 1 || fail=1
fi
echo "gpu_check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
