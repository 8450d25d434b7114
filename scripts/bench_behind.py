#!/usr/bin/env python3
"""A tracer that falls behind (issue 22): a job reads FILES small files once each while iotrace
is stopped (SIGSTOP) for --stop-s seconds, or runs beside --busy CPU-bound loops at its own
nice 10 / SCHED_BATCH, and then counts the files whose real path is in the trace.

    python scripts/bench_behind.py --files 20000 --stop-s 12
    python scripts/bench_behind.py --files 20000 --busy 3

Prints files read, files with their path, events lost, and the tracer's peak RSS; exits 0
unless something could not run (the numbers are for docs/benchmarks.md, never asserted)."""

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
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests/workloads"))
import many_files  # noqa: E402  (the test's workload)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--stop-s", type=float, default=0.0, help="SIGSTOP iotrace this long")
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound loops beside the job")
    ap.add_argument("--bpf-stats", default="sampled", help="iotrace's --bpf-stats")
    ap.add_argument("--dir", default="/var/tmp", help="where the files are made (not tmpfs)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="iotrace-behind-", dir=args.dir))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.busy)]
    try:
        data = base / "many"
        work, ready_r = many_files.start(data, (f"f{i:05d}.bin" for i in range(args.files)))
        out = base / "trace"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        tracer = subprocess.Popen([sys.executable, "-m", "tracer.cli", "--pid", str(work.pid),
                                   "-o", str(out), "--no-tui",
                                   "--bpf-stats", args.bpf_stats], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if not tracer.stderr.readline().startswith("Tracing"):
            print("iotrace did not start:", tracer.stderr.read(), file=sys.stderr)
            return 1
        t0 = time.monotonic()
        if args.stop_s:
            tracer.send_signal(signal.SIGSTOP)
        work.send_signal(signal.SIGUSR1)
        assert os.read(ready_r, 1) == b"d"
        read_s = time.monotonic() - t0
        time.sleep(max(0.0, args.stop_s - read_s))
        tracer.send_signal(signal.SIGCONT)
        work.send_signal(signal.SIGUSR1)
        work.wait()
        tracer.communicate(timeout=300)
        files = pq.read_table(out / "files", columns=["pid", "op", "path"]).to_pylist()
        read = {r["path"] for r in files if r["pid"] == work.pid and r["op"] == "read"}
        want = {str(data / f"f{i:05d}.bin") for i in range(args.files)}
        meta = json.loads((out / "meta.json").read_text())
        cost = meta.get("self_cost") or {}
        rss = cost.get("tracer", {}).get("peak_rss_bytes", 0)
        lost = cost.get("file_paths_lost") or {}
        print(f"files read {args.files} in {read_s:.1f} s; with their path {len(want & read)}; "
              f"shown by inode {sum(p.startswith('(inode') for p in read)}; "
              f"events lost {meta.get('events_lost')} (paths recovered from directories "
              f"{lost.get('recovered', 0)}); tracer peak RSS {rss / 2**20:.1f} MiB")
        for p in cost.get("programs") or []:
            if p.get("run_cnt"):
                print(f"  {p['object']}/{p['name']}: {p['run_cnt']} runs, "
                      f"{p['ns_per_run']:.0f} ns/run")
        return 0
    finally:
        for p in busy:
            p.kill()
            p.wait()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
