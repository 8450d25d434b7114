"""Judges one traced case of scripts/gpu_check.sh: prints the numbers, then PASS or FAIL.

    python3 scripts/gpu_judge.py CASE TRACE_DIR JOB_LOG

CASE: starved, checkpoint, gpu_bound, launch_bound (each also checks the start-up: the GPU's
idle time before the loop's first batch is `startup`). JOB_LOG: the training's own output
(its "checkpoint step ... seconds S" lines: the job's clock of its saves). Also checks that
`iotrace report --json` of the trace gives the live run's final findings. Exits 1 on FAIL.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import tracer
from tracer.report import trace_training_since

ROOT = Path(__file__).resolve().parent.parent


def facts(out: Path, log: str) -> dict:
    """The numbers every case is judged on."""
    t = tracer.load(out)
    split = t.loop_split(trace_training_since(t))
    shares = {}
    if not split.empty:
        row = split.iloc[0]
        shares = {c[:-4]: round(float(row[c]), 1) for c in split.columns
                  if c.endswith("_pct") and row[c] == row[c] and row[c] > 0}
    idle = t["gpu_idle"]
    by_cause = ({str(k): round(v / 1e9, 2) for k, v in
                 idle.groupby("cause", observed=True).duration_ns.sum().items()}
                if not idle.empty else {})
    final = t.findings[t.findings.ts == t.findings.ts.max()] if not t.findings.empty else None
    kinds = list(final.kind.astype(str)) if final is not None else []
    summaries = list(final.summary) if final is not None else []
    evidence = [e if isinstance(e, dict) else json.loads(e) for e in final.evidence] if (
        final is not None) else []
    gpu = t["gpu"]
    sampled_s = gpu.sample_period_ns.sum() / 1e9 if not gpu.empty else 0.0
    util = float(gpu.util_pct.mean()) if not gpu.empty else None
    saves = [float(m) for m in re.findall(r"^checkpoint step \d+ .* seconds ([\d.]+)$", log, re.M)]
    threads = t["threads"]
    cuda = {c: int(threads[c].sum()) for c in ("gpu_wait_ns", "device_copy_ns", "cuda_syncs",
                                                "copy_dtoh_bytes", "copy_htod_bytes")
            if c in threads and threads[c].notna().any()}
    return {"shares": shares, "idle_by_cause_s": by_cause, "kinds": kinds,
            "summaries": summaries, "evidence": evidence, "sampled_s": round(sampled_s, 1),
            "mean_util_pct": None if util is None else round(util, 1),
            "checkpoint_s": round(float(t.loop.checkpoint_ns.sum()) / 1e9, 2),
            "saves_s": saves, "startup_s": round(float(split.startup_s.sum()), 1)
            if not split.empty else 0.0, "cuda": cuda}


def report_kinds(out: Path) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "tracer.cli", "report", str(out), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=100)
    if done.returncode != 0:
        return [f"report failed: {done.stderr[-300:]}"]
    return [f["kind"] for f in json.loads(done.stdout)["findings"]]


def after_startup(f: dict) -> tuple[float, dict[str, float]]:
    """The GPU's idle seconds after the start-up, and by cause."""
    parts = {k: v for k, v in f["idle_by_cause_s"].items() if k != "startup"}
    return sum(parts.values()), parts


def judge(case: str, f: dict) -> list[str]:
    """What failed (empty: PASS)."""
    why = []
    shares, kinds = f["shares"], f["kinds"]
    idle_s, parts = after_startup(f)
    top = max(shares, key=lambda s: shares[s]) if shares else None
    if f["idle_by_cause_s"].get("startup", 0) <= 0:
        why.append("no GPU idle time with cause startup before the first batch")
    if not f["sampled_s"]:
        why.append("no NVML samples")
    if case == "starved":
        if parts.get("data_wait_cpu", 0) < 0.5 * idle_s or idle_s <= 0:
            why.append(f"idle after start-up {idle_s:.1f} s, data_wait_cpu "
                       f"{parts.get('data_wait_cpu', 0):.1f} s: not the most of it")
        if "dataloader_cpu_bound" not in kinds:
            why.append("no dataloader_cpu_bound finding")
    elif case == "checkpoint":
        clock = sum(f["saves_s"])
        if not f["saves_s"] or f["checkpoint_s"] < 0.85 * clock:
            why.append(f"checkpoint {f['checkpoint_s']:.1f} s < 85 % of the job's {clock:.1f} s")
        if idle_s <= 0 or parts.get("checkpoint", 0) < 0.5 * idle_s:
            why.append(f"idle after start-up {idle_s:.1f} s, checkpoint "
                       f"{parts.get('checkpoint', 0):.1f} s: not the most of it")
        if not kinds or kinds[0] != "checkpoint_stall":
            why.append(f"checkpoint_stall does not lead: {kinds}")
    elif case == "gpu_bound":
        if top != "gpu_wait":
            why.append(f"gpu_wait does not lead the split: {top}")
        if "not_io_bound" not in kinds:
            why.append(f"no not_io_bound: {kinds}")
        elif not any("waited for its GPU" in s for s in f["summaries"]):
            why.append("not_io_bound does not say the GPU wait")
        if "host_bound" in kinds:
            why.append("host_bound on a GPU-bound loop")
    elif case == "launch_bound":
        if "host_bound" not in kinds:
            why.append(f"no host_bound: {kinds}")
        if top != "compute":
            why.append(f"compute (the host) does not lead the split: {top}")
    return why


def main() -> int:
    case, out, log = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    f = facts(out, log.read_text(errors="replace"))
    replayed = report_kinds(out)
    print(f"      {case}: loop split (training, %) {f['shares']}")
    print(f"      {case}: GPU sampled {f['sampled_s']} s, mean util {f['mean_util_pct']} %, "
          f"idle by cause (s) {f['idle_by_cause_s']}, start-up {f['startup_s']} s")
    print(f"      {case}: CUDA calls {f['cuda']}")
    if f["saves_s"]:
        print(f"      {case}: saves by the job's clock {sum(f['saves_s']):.1f} s "
              f"({len(f['saves_s'])}), checkpoint in the trace {f['checkpoint_s']} s")
    for kind, summary in zip(f["kinds"], f["summaries"], strict=True):
        print(f"      {case}: {kind}: {summary}")
    why = judge(case, f)
    if replayed != f["kinds"]:
        why.append(f"iotrace report's findings {replayed} differ from the live run's {f['kinds']}")
    print(f"{'FAIL' if why else 'PASS'} {case}" + (": " + "; ".join(why) if why else ""))
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
