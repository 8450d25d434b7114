"""How long do tracer.load() and Trace.summary() take on a day of trace?

    .venv/bin/python scripts/bench_daylong.py TRACE [--day DIR] [--summary-to FILE]
        [--profile FILE]

TRACE is a trace of a steady job with at least one merged segment per table (about 5 minutes
of tracing: `scripts/bench_long.py --minutes 6 --keep TRACE`). Its first merged segment of each
table is copied over 24 hours with its times moved on (`bench_long.day_of`): a day at the same
rate, 86 400 one-second intervals. --day keeps that day in DIR (made once, reused when DIR
exists), so that two checkouts time the same files; --summary-to writes the summary's text to
FILE, to compare two checkouts' output; --profile writes summary()'s cProfile stats to FILE.

Prints load() of five tables (each timed in a fresh `load`), then summary() of a fresh load
(its tables read as it asks for them, as a user's first call does). Nothing is asserted:
figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

TABLES = ("latency", "files", "threads", "loop", "processes")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--day")
    ap.add_argument("--summary-to")
    ap.add_argument("--profile")
    args = ap.parse_args()
    from bench_long import day_of, tree

    import tracer as iotrace

    work = None
    if args.day:
        day = Path(args.day)
    else:
        work = Path(tempfile.mkdtemp(prefix="iotrace-day-"))
        day = work / "day"
    if not day.exists():
        n = day_of(Path(args.trace), day)
        print(f"made a day of {args.trace}: {n} segments", flush=True)
    size, count = tree(day)
    files_rows = len(iotrace.load(day)["files"])
    print(f"tracer {iotrace.__file__}")
    print(f"day: {size / 2**20:.0f} MiB in {count} files, {files_rows} files rows", flush=True)
    t = time.monotonic()
    tr = iotrace.load(day)
    for name in TABLES:
        tr[name]
    print(f"tracer.load(), 5 tables: {time.monotonic() - t:.1f} s", flush=True)
    tr = iotrace.load(day)
    t = time.monotonic()
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        text = prof.runcall(tr.summary)
        prof.dump_stats(args.profile)
    else:
        text = tr.summary()
    print(f"Trace.summary(): {time.monotonic() - t:.1f} s", flush=True)
    if args.summary_to:
        Path(args.summary_to).write_text(text + "\n")
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
