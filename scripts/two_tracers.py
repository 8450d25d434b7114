#!/usr/bin/env python3
"""Two iotrace instances at once, each on its own job (`iowork FILE --direct N`): is each
trace's block count, plus the requests counted apart as ended unseen, exactly N?

Run i starts the second instance i * --stagger seconds after the first, so that over the runs
one instance attaches, and stops, while the other's job runs. For a trace where requests
ended unseen or the sum is off, it prints where the block layer fell behind the syscall layer
(ms after that trace's start) and when the other instance started and stopped:

    scripts/two_tracers.py --runs 10 --stagger 0.25
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IOWORK = ROOT / "tests" / "workloads" / "bin" / "iowork"


def _result(out: Path, reads: int) -> tuple[dict, int, int, int, list]:
    import pandas as pd

    meta = json.loads((out / "meta.json").read_text())
    lat = pd.read_parquet(out / "latency")
    procs = pd.read_parquet(out / "processes")
    main = procs[procs.role == "main"].pid.iloc[0]
    # the job's O_DIRECT reads only (not its binary paged in)
    lat = lat[(lat.pid == main) & (lat.op == "read")
              & ((lat.layer == "syscall") | (lat.attribution == "direct"))]
    counted = {layer: int(lat[lat.layer == layer]["count"].sum())
               for layer in ("syscall", "block_queue", "block")}
    unseen = meta["self_cost"]["block_completions_unseen"]["requests"]
    per = lat.groupby(["ts", "layer"], observed=True)["count"].sum().unstack(fill_value=0)
    behind = per.get("syscall", 0) - per.get("block", 0)
    where = [(int((t.value - meta["start_ns"]) / 1e6), int(v)) for t, v in behind.items() if v]
    return counted, unseen, meta["start_ns"], meta["stop_ns"], where


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--reads", type=int, default=3000)
    p.add_argument("--stagger", type=float, default=0.25, help="seconds, times the run number")
    p.add_argument("iotrace_args", nargs="*", help="after --: options for both instances")
    args = p.parse_args()
    import time

    files = [Path(f"/var/tmp/iotrace-two-{tag}.dat") for tag in "AB"]
    for f in files:
        if not f.exists():
            subprocess.run(["dd", "if=/dev/urandom", f"of={f}", "bs=1M", "count=64"],
                           check=True, capture_output=True)
    wrong = with_unseen = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            running = []
            for k, f in enumerate(files):
                if k:
                    time.sleep(args.stagger * i)
                out = Path(tmp) / f"t{i}{'AB'[k]}"
                work = [str(IOWORK), str(f), "--direct", str(args.reads)]
                subprocess.run([*work[:2], "--direct", "1"], check=True)  # metadata cached
                running.append((out, subprocess.Popen(
                    [sys.executable, "-m", "tracer.cli", "--no-tui", "-i", "0.2",
                     *args.iotrace_args, "-o", str(out), "--", *work],
                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
            results = []
            for out, proc in running:
                proc.wait()
                results.append(_result(out, args.reads))
                shutil.rmtree(out)
            for k, (counted, unseen, start, _, where) in enumerate(results):
                other = results[1 - k]
                ok = counted["block"] + unseen == args.reads
                wrong += not ok
                with_unseen += unseen > 0
                off = counted["block"] + unseen - args.reads
                print(f"run {i} {'AB'[k]}: {counted}, ended unseen {unseen}: "
                      f"{'exact' if ok else f'OFF BY {off}'}", flush=True)
                if unseen or not ok:
                    print(f"    block behind syscall at (ms, requests) {where}; the other "
                          f"started at {(other[2] - start) / 1e6:.0f} ms, stopped at "
                          f"{(other[3] - start) / 1e6:.0f} ms", flush=True)
    print(f"{wrong} of {2 * args.runs} traces off; {with_unseen} with requests ended unseen")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
