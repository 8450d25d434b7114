#!/usr/bin/env python3
"""Reproducer for README's known limitation: block requests uncounted (seen with BPF stats on).

Traces `iowork FILE --direct N` (N O_DIRECT reads, one block request each) again and again and
prints each trace whose `block` layer did not count N reads for the process, with the block
programs' run counts from meta.json (those need stats on: --bpf-stats always). Seen with
another process writing to the same disk meanwhile, e.g.
`while :; do dd if=/dev/zero of=/var/tmp/junk bs=1M count=64 oflag=direct; done`:

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
    short = 0
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
                progs = json.loads((out / "meta.json").read_text())["self_cost"]["programs"]
                runs = {q["name"]: q["run_cnt"] for q in progs if q["object"] == "block"}
                print(f"trace {i}: {counted}; block program runs {runs}", flush=True)
            shutil.rmtree(out)
    print(f"{short} of {args.runs} traces counted fewer than {args.reads} block reads "
          f"(iotrace {' '.join(args.iotrace_args) or 'defaults'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
