#!/usr/bin/env python3
"""Check iotrace's iostat columns (tracer.live.procfs.ProcSampler) against sysstat's iostat.

    .venv/bin/python scripts/iostat_parity.py [--intervals 3] [--bs 16k] [--dir /var/tmp]

Needs `iostat` (Debian: apt-get install -y sysstat) and a directory on a real disk (the default,
/var/tmp, is on the root disk here). It writes a 256 MiB file there, then:

1. starts a steady read workload: dd iflag=direct (O_DIRECT, queue depth 1) over the file,
   again and again, so that no interval sees it start or stop;
2. after a short warm-up, starts `iostat -x -d -o JSON 1 N+1` (plain text where -o JSON is
   missing) and reads its output as it comes. iostat writes each report right after it reads
   the counters, unbuffered, so the start of a report on the pipe is the best signal of when
   iostat sampled: a ProcSampler sample is taken the moment each report starts. The first
   report (since boot) is not compared: it marks iostat's first reading, and ProcSampler primes
   there. That is why -y (which prints nothing at the first reading) is not used.
3. prints, for the disk with the most reads, per interval: r/s, rkB/s and r_await from iotrace
   and from iostat, with the relative difference; then the same over the whole window (iostat's
   intervals weighted by their length, against one ProcSampler delta from first to last sample).

Tolerances (from the issue): r/s and rkB/s within 2 %, r_await within 5 % or 0.1 ms. What still
separates the two: iostat prints two decimals, and it measures each interval with /proc/uptime
in 1/100 s (up to 1 % on a 1 s interval), where ProcSampler uses CLOCK_MONOTONIC; and its reading
and ours are a pipe wake-up apart. Over the whole window the interval edges inside it cancel.

Exit status: 0 when every compared value is within tolerance, 1 when one is not, 2 when the
check cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tracer.live.clock import Clock  # noqa: E402
from tracer.live.procfs import ProcSampler  # noqa: E402

FILE_MIB = 256
WARMUP_S = 0.5
RATE_TOL = 0.02  # r/s, rkB/s
AWAIT_TOL = 0.05  # r_await, relative ...
AWAIT_ABS_MS = 0.1  # ... or absolute


@dataclass
class Stat:
    r_s: float
    rkb_s: float
    r_await: float


def _json_supported() -> bool:
    done = subprocess.run(["iostat", "-d", "-o", "JSON"], capture_output=True, text=True, check=False)
    return done.returncode == 0 and done.stdout.lstrip().startswith("{")


def _write_file(path: Path) -> None:
    with open(path, "wb") as f:
        for _ in range(FILE_MIB):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())


def _start_workload(path: Path, bs: str) -> subprocess.Popen:
    loop = f'while :; do dd if="{path}" of=/dev/null bs={bs} iflag=direct status=none || exit 1; done'
    return subprocess.Popen(["sh", "-c", loop], start_new_session=True)


def _stop_workload(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the session this script started: sh and its dd
    proc.wait()


def _run_iostat(intervals: int, use_json: bool, clock: Clock
                ) -> tuple[str, list[tuple[int, list[dict]]], list[dict]]:
    """Run iostat, sampling /proc whenever one of its reports starts.

    Returns iostat's output, the (ts, device rows) of a ProcSampler sampled at every report, and
    the device rows of a second ProcSampler sampled only at the first and the last report.
    """
    sampler, window = ProcSampler(), ProcSampler()
    window_rows: list[dict] = []
    cmd = ["iostat", "-x", "-d"] + (["-o", "JSON"] if use_json else []) + ["1", str(intervals + 1)]
    env = dict(os.environ, LC_ALL="C", S_COLORS="never")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    marker = '"disk": [' if use_json else "Device"
    lines: list[str] = []
    samples: list[tuple[int, list[dict]]] = []
    for line in proc.stdout:
        if (marker in line) if use_json else line.startswith(marker):
            ts = clock.now_ns()
            rows, _ = sampler.sample(ts)
            if not samples or len(samples) == intervals:
                window_rows = window.sample(ts)[0]
            samples.append((ts, rows))
        lines.append(line)
    if proc.wait() != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with status {proc.returncode}")
    return "".join(lines), samples, window_rows


def _iostat_reports(output: str, use_json: bool) -> list[dict[str, Stat]]:
    """Per report, {device: Stat}, in order (the first is since boot)."""
    reports: list[dict[str, Stat]] = []
    if use_json:
        host = json.loads(output)["sysstat"]["hosts"][0]
        for report in host["statistics"]:
            reports.append({d["disk_device"]: Stat(d["r/s"], d["rkB/s"], d["r_await"])
                            for d in report["disk"]})
        return reports
    header: list[str] = []
    for line in output.splitlines():
        fields = line.split()
        if fields and fields[0] == "Device":
            header = fields
            reports.append({})
        elif fields and header:
            col = dict(zip(header, fields, strict=False))
            reports[-1][fields[0]] = Stat(float(col["r/s"]), float(col["rkB/s"]), float(col["r_await"]))
        else:
            header = []
    return reports


def _rel(ours: float, theirs: float) -> float:
    if theirs == 0:
        return 0.0 if ours == 0 else float("inf")
    return (ours - theirs) / theirs


def _compare(label: str, ours: Stat, theirs: Stat, interval_ms: float) -> bool:
    dr, dk = _rel(ours.r_s, theirs.r_s), _rel(ours.rkb_s, theirs.rkb_s)
    da = _rel(ours.r_await, theirs.r_await)
    await_ok = abs(da) <= AWAIT_TOL or abs(ours.r_await - theirs.r_await) <= AWAIT_ABS_MS
    ok = abs(dr) <= RATE_TOL and abs(dk) <= RATE_TOL and await_ok
    print(f"{label:>8} {interval_ms:8.1f} | {ours.r_s:9.2f} {theirs.r_s:9.2f} {dr:+7.2%} | "
          f"{ours.rkb_s:10.2f} {theirs.rkb_s:10.2f} {dk:+7.2%} | "
          f"{ours.r_await:7.4f} {theirs.r_await:7.2f} {da:+7.2%} | {'ok' if ok else 'OUT'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--intervals", type=int, default=3, help="1 s intervals to compare")
    parser.add_argument("--bs", default="16k", help="dd block size (default 16k)")
    parser.add_argument("--dir", default="/var/tmp", help="where the data file goes (a real disk)")
    args = parser.parse_args()
    if shutil.which("iostat") is None:
        print("iostat not found: install sysstat (apt-get install -y sysstat)", file=sys.stderr)
        return 2
    use_json = _json_supported()
    version = subprocess.run(["iostat", "-V"], capture_output=True, text=True, check=False)
    print(f"{version.stdout.splitlines()[0] if version.stdout else 'iostat'}; kernel {os.uname().release};"
          f" output {'JSON' if use_json else 'text'}; dd bs={args.bs} iflag=direct")

    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="iostat-parity-", dir=args.dir) as tmp:
        data = Path(tmp) / "data.bin"
        _write_file(data)
        time.sleep(1.0)  # let writeback of the file settle before reads are measured
        workload = _start_workload(data, args.bs)
        try:
            time.sleep(WARMUP_S)
            output, samples, window_rows = _run_iostat(args.intervals, use_json, clock)
        finally:
            _stop_workload(workload)

    reports = _iostat_reports(output, use_json)
    if len(reports) != len(samples) or len(samples) < 2:
        print(f"got {len(reports)} iostat reports but {len(samples)} samples", file=sys.stderr)
        return 2
    ours = [{r["device"]: r for r in rows} for _, rows in samples]
    reads: dict[str, float] = {}
    for rows in ours[1:]:
        for dev, r in rows.items():
            reads[dev] = reads.get(dev, 0.0) + r["r_s"]
    device = max(reads, key=lambda d: reads[d])
    print(f"busiest device: {device}; iotrace vs iostat, relative difference (iotrace - iostat) / iostat")
    print(f"{'interval':>8} {'ms':>8} | {'r/s':>9} {'iostat':>9} {'diff':>7} | {'rkB/s':>10} "
          f"{'iostat':>10} {'diff':>7} | {'r_await':>7} {'iostat':>7} {'diff':>7} |")

    all_ok = True
    weights: list[float] = []
    theirs_all: list[Stat] = []
    for i in range(1, len(samples)):
        interval_ms = (samples[i][0] - samples[i - 1][0]) / 1e6
        row = ours[i][device]
        theirs = reports[i].get(device, Stat(0.0, 0.0, 0.0))
        all_ok &= _compare(str(i), Stat(row["r_s"], row["rkb_s"], row["r_await_ms"]), theirs, interval_ms)
        weights.append(interval_ms)
        theirs_all.append(theirs)

    # The whole window: one ProcSampler delta from the first sample to the last one, against
    # iostat's intervals weighted by their length (and r_await by reads as well).
    window_ms = sum(weights)
    total_reads = sum(t.r_s * w for t, w in zip(theirs_all, weights, strict=True))
    theirs_window = Stat(
        total_reads / window_ms,
        sum(t.rkb_s * w for t, w in zip(theirs_all, weights, strict=True)) / window_ms,
        sum(t.r_await * t.r_s * w for t, w in zip(theirs_all, weights, strict=True)) / total_reads
        if total_reads else 0.0,
    )
    w = next(r for r in window_rows if r["device"] == device)
    ours_window = Stat(w["r_s"], w["rkb_s"], w["r_await_ms"])
    all_ok &= _compare("window", ours_window, theirs_window, window_ms)
    print("within tolerance" if all_ok else
          f"OUT of tolerance (r/s, rkB/s {RATE_TOL:.0%}; r_await {AWAIT_TOL:.0%} or {AWAIT_ABS_MS} ms)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
