"""iotrace on a long, steady job: does its memory stay flat, how big does the trace grow, and
how long does tracer.load() take on a day of it?

    .venv/bin/python scripts/bench_long.py [--minutes 10] [--reads-per-s 2000] [--files 100]
        [--keep DIR] [--imagefolder DIR [--files-per-s 30000] [--workers 8]]

The job (a Python loop, traced from its start) reads --files files of 4 KiB round robin at
--reads-per-s. With --imagefolder, it is a GPU node's load instead: the ImageNet-shaped
DataLoader job (tracer.workloads.imagefolder, its class folders in DIR, made by
bench_scale.py) at --files-per-s with --workers workers forked anew each epoch, shuffled,
for as many epochs as fill --minutes; the tracer's CPU a file read is printed too.

Every 30 s the tracer's resident memory (VmRSS) is printed with the trace's size and file
count. At the end: the tracer's peak RSS (VmHWM) and the largest of its merge children's
(watched every 0.1 s), the growth of RSS from the second minute on, the trace's bytes per
hour, and tracer.load() of the trace, then tracer.load() and Trace.summary() of a day of it:
its first merged segment (about 5 minutes) of each table copied over 24 hours, times moved on
(a day at the same rate, for the reader's cost; not a day traced).

Nothing is asserted: figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JOB = """
import os, sys, time
paths, rate, until = sys.argv[1:-2], float(sys.argv[-2]), time.monotonic() + float(sys.argv[-1])
fds = [os.open(p, os.O_RDONLY) for p in paths]
n, t0 = 0, time.monotonic()
while time.monotonic() < until:
    for fd in fds:
        os.pread(fd, 4096, 0)
    n += len(fds)
    ahead = n / rate - (time.monotonic() - t0)
    if ahead > 0:
        time.sleep(ahead)
"""


def status_kib(pid: int, field: str = "VmRSS") -> int | None:
    """A memory field of /proc/PID/status (VmRSS, VmHWM, RssAnon), in KiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class MergeChildren:
    """Watches the tracer's merge children (sinks/parquet.MergeChild) every 0.1 s, from a
    thread: how many, and the most memory one held (a child lives a second or less)."""

    def __init__(self, tracer_pid: int) -> None:
        self.pid, self.seen = tracer_pid, set()
        self.hwm_kib = self.anon_kib = 0
        self.done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.done.wait(0.1):
            try:
                kids = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                try:
                    cmd = Path(f"/proc/{kid}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"tracer.sinks.parquet" not in cmd:
                    continue
                self.seen.add(kid)
                self.hwm_kib = max(self.hwm_kib, status_kib(kid, "VmHWM") or 0)
                self.anon_kib = max(self.anon_kib, status_kib(kid, "RssAnon") or 0)


def tree(out: Path) -> tuple[int, int]:
    """(bytes, files) of the trace so far; a file the writer renames or merges away meanwhile
    is left out."""
    size = count = 0
    for p in out.rglob("*"):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            size, count = size + st.st_size, count + 1
    return size, count


def day_of(out: Path, into: Path) -> int:
    """A copy of trace `out` whose every table holds a day of merged segments: its first merged
    one (MERGE_SEGMENTS rolls, about 5 minutes) copied over a day, each copy's times moved on by
    the span of the intervals it covers (every table's copies by the same), every MERGE_MERGED
    copies merged again by the writer's merge_segments (the reader's cost of a day at the same
    rate)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from tracer.sinks.parquet import MERGE_MERGED, TMP_DIR, merge_segments
    from tracer.tracedir.segments import COVERS_KEY, covered_segments

    shutil.copytree(out, into)
    firsts = {}  # table folder -> its first merged segment
    for folder in into.iterdir():
        if not folder.is_dir() or folder.name.startswith(".") or folder.name == "processes":
            continue
        merged = [p for p in sorted(folder.glob("part-*.parquet"))
                  if covered_segments(pq.read_schema(p))]
        if merged:
            firsts[folder] = merged[0]

    def span_of(path: Path) -> int:
        stamps = pc.cast(pq.read_table(path, columns=["ts"]).column("ts"), pa.int64())
        return pc.max(stamps).as_py() - pc.min(stamps).as_py() + 1_000_000_000

    # One span for all tables (the `system` table has a row every interval): each table's own
    # would move its copies' intervals apart from the others' over the day.
    system = [p for f, p in firsts.items() if f.name == "system"]
    span = span_of(system[0]) if system else max(map(span_of, firsts.values()))
    n = 0
    for folder, first in firsts.items():
        parts = sorted(folder.glob("part-*.parquet"))
        table = pq.read_table(first)
        meta = pq.ParquetFile(first).metadata
        groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        schema = table.schema.remove_metadata().with_metadata(
            {k: v for k, v in (table.schema.metadata or {}).items() if k != COVERS_KEY})
        for p in parts:
            p.unlink()
        copies = -(-86_400_000_000_000 // span)  # a day of them
        for k in range(copies):
            columns = [pc.cast(pc.add(pc.cast(c, pa.int64()), k * span), f.type)
                       if pa.types.is_timestamp(f.type) else c
                       for c, f in zip(table.columns, table.schema, strict=True)]
            copy = pa.Table.from_arrays(columns, schema=schema)
            with pq.ParquetWriter(folder / f"part-{k:05d}.parquet", schema,
                                  compression="zstd") as w:
                at = 0
                for rows in groups:
                    w.write_table(copy.slice(at, rows), row_group_size=max(rows, 1))
                    at += rows
        # as the writer keeps them: every MERGE_MERGED merged segments merged again, the
        # last ones of the day not
        hours = copies // MERGE_MERGED
        for h in range(hours):
            merge_segments(folder, h * MERGE_MERGED, (h + 1) * MERGE_MERGED - 1,
                           into / TMP_DIR)
        n += hours + copies - hours * MERGE_MERGED
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--reads-per-s", type=float, default=2000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--keep")
    ap.add_argument("--imagefolder", metavar="DIR", help="the DataLoader job on this data set")
    ap.add_argument("--files-per-s", type=float, default=30_000)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iotrace-long-"))
    paths = []
    for i in range(args.files):
        p = work / f"f{i:04d}.bin"
        p.write_bytes(b"x" * 4096)
        paths.append(str(p))
    out = Path(args.keep) if args.keep else work / "trace"
    shutil.rmtree(out, ignore_errors=True)
    seconds = args.minutes * 60
    job = [sys.executable, "-c", JOB, *paths, str(args.reads_per_s), str(seconds)]
    if args.imagefolder:
        from tracer.workloads.imagefolder import listing

        per_epoch = len(listing(args.imagefolder))
        epochs = max(1, round(seconds * args.files_per_s / per_epoch))
        job = [sys.executable, "-m", "tracer.workloads.imagefolder", "--data", args.imagefolder,
               "--num-workers", str(args.workers), "--epochs", str(epochs), "--files-per-s",
               str(args.files_per_s), "--shuffle"]
    cmd = [sys.executable, "-m", "tracer.cli", "-o", str(out), "--no-tui", "--", *job]
    said = work / "job.out"
    with open(said, "w") as f:
        tracer = subprocess.Popen(cmd, stdout=f, stderr=subprocess.DEVNULL, cwd=ROOT)
    t0, samples = time.monotonic(), []
    merges = MergeChildren(tracer.pid)
    hwm = 0
    while tracer.poll() is None:
        # (the peak often comes in the run's last second, its summary: read it every 0.1 s)
        time.sleep(0.1)
        hwm = max(hwm, status_kib(tracer.pid, "VmHWM") or 0)
        t = time.monotonic() - t0
        if not samples or t - samples[-1][0] >= 30:
            rss = status_kib(tracer.pid)
            if rss is None:
                continue
            size, count = tree(out)
            samples.append((t, rss))
            print(f"{t:6.0f} s  tracer RSS {rss / 1024:6.1f} MiB  trace {size / 2**20:6.2f} MiB "
                  f"in {count} files", flush=True)
    merges.done.set()
    print(f"tracer peak RSS (VmHWM) {hwm / 1024:.1f} MiB; {len(merges.seen)} merge children "
          f"seen, the largest at {merges.hwm_kib / 1024:.1f} MiB (of it anonymous "
          f"{merges.anon_kib / 1024:.1f} MiB; the rest the libraries the tracer maps too)")
    late = [(t, r) for t, r in samples if t >= 60]
    if len(late) >= 2:
        (ta, ra), (tb, rb) = late[0], late[-1]
        print(f"RSS from {ta:.0f} s to {tb:.0f} s: {ra / 1024:.1f} -> {rb / 1024:.1f} MiB "
              f"({(rb - ra) / 1024 / ((tb - ta) / 60):+.2f} MiB/min)")
    size, count = tree(out)
    print(f"trace: {size / 2**20:.2f} MiB in {count} files after {args.minutes:g} min: "
          f"{size / 2**20 * 60 / args.minutes:.1f} MiB/hour")
    import tracer as iotrace

    def timed_load(d: Path) -> float:
        t = time.monotonic()
        tr = iotrace.load(d)
        for name in ("latency", "files", "threads", "loop", "processes"):
            tr[name]
        return time.monotonic() - t

    print(f"tracer.load() of the trace, 5 tables: {timed_load(out):.2f} s")
    day = work / "day"
    n = day_of(out, day)
    size, _ = tree(day)
    print(f"a day of it ({n} segments, {size / 2**20:.0f} MiB): tracer.load(), 5 tables: "
          f"{timed_load(day):.1f} s", flush=True)
    t = time.monotonic()
    iotrace.load(day).summary()
    print(f"Trace.summary() of the day: {time.monotonic() - t:.0f} s")
    meta = json.loads((out / "meta.json").read_text())
    cost = meta["self_cost"]
    print(f"tracer CPU {cost['tracer']['cpu_pct']} % of a core")
    if args.imagefolder:
        files = sum(int(line.split()[3]) for line in said.read_text().splitlines()
                    if line.startswith("epoch "))
        cpu = cost["tracer"]["cpu_seconds"] - cost["tracer"].get("setup_cpu_seconds", 0)
        full = {k: v for k, v in cost.get("map_full_drops", {}).items() if v}
        print(f"{files:,} files read: the tracer {cpu / max(files, 1) * 1e6:.2f} us of CPU a "
              f"file after its start-up ({cpu:.1f} s); lost {cost.get('events_lost')} records, "
              f"map full {full or 0}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
