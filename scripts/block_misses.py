#!/usr/bin/env python3
"""Reproducer for README's known limitation: block requests whose end no program saw.

Traces `iowork FILE --direct N` (N O_DIRECT reads, one block request each) again and again and
prints each trace whose `block` layer did not count N reads for the process, with the requests
iotrace counted apart as ended unseen (meta.json) and the block programs' run counts (those
need stats on: --bpf-stats always). A trace is wrong when the two add up to more than N; to
less only while other processes keep the disk busy (the requests left in flight at the end
are then a lower bound, kernel/maps.Maps.block_unseen). Set
IOTRACE_FORCE=no_block_io_start for the path of kernels before 6.5; run beside another process
writing to the same disk, e.g.
`while :; do dd if=/dev/zero of=/var/tmp/junk bs=1M count=64 oflag=direct; done`, for requests
that the driver sends back to the queue:

    scripts/block_misses.py --runs 40 -- --bpf-stats always
    scripts/block_misses.py --runs 40 -- --bpf-stats off
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--reads", type=int, default=300)
    p.add_argument("--file", default="/var/tmp/iotrace-block-misses.dat", help="64 MiB, on a disk")
    p.add_argument("iotrace_args", nargs="*", help="after --: options for iotrace")
    args = p.parse_args()
    import pandas as pd

    data = Path(args.file)
    if not data.exists():
        subprocess.run(["dd", "if=/dev/urandom", f"of={data}", "bs=1M", "count=64"], check=True,
                       capture_output=True)
    work = [str(IOWORK), str(data), "--direct", str(args.reads)]
    short = under = over = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            out = Path(tmp) / f"t{i}"
            subprocess.run(work, check=True, capture_output=True)  # metadata cached, as traced
            subprocess.run([sys.executable, "-m", "tracer.cli", "--no-tui", *args.iotrace_args,
                            "-o", str(out), "--", *work], check=True, capture_output=True,
                           cwd=ROOT)
            lat = pd.read_parquet(out / "latency")
            procs = pd.read_parquet(out / "processes")
            lat = lat[(lat.pid == procs[procs.role == "main"].pid.iloc[0]) & (lat.op == "read")]
            counted = {layer: int(lat[lat.layer == layer]["count"].sum())
                       for layer in ("syscall", "block_queue", "block")}
            if counted["block"] != args.reads:
                short += 1
                cost = json.loads((out / "meta.json").read_text())["self_cost"]
                unseen = cost["block_completions_unseen"]["requests"]
                under += counted["block"] + unseen < args.reads
                over += counted["block"] + unseen > args.reads
                runs = {q["name"]: q["run_cnt"] for q in cost["programs"] if q["object"] == "block"}
                print(f"trace {i}: {counted}, ended unseen {unseen}; block program runs {runs}",
                      flush=True)
            shutil.rmtree(out)
    print(f"{short} of {args.runs} traces counted fewer than {args.reads} block reads; with the "
          f"requests that ended unseen, {under} still fewer, {over} more "
          f"(iotrace {' '.join(args.iotrace_args) or 'defaults'})")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
