"""What marking re-reads costs the tracer (tracer.live.rereads), without the kernel: one
interval's per-file counters of FILES files at a time, a million files in all and then a second
pass over them, the time per interval, and how many first reads of files never read look like
re-reads once a million are marked (two files on one bit of the bitmap).

    python scripts/bench_rereads.py [--files-per-interval 30000] [--total 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tracer.core import abi
from tracer.live.rereads import Rereads


def interval(inos: np.ndarray) -> np.ndarray:
    rows = np.zeros(len(inos), dtype=abi.file_counts_dtype())
    rows["tgid"] = 100 + np.arange(len(inos)) % 8  # 8 workers
    rows["dev"], rows["ino"], rows["gen"] = 8, inos, 1
    rows["ops"], rows["bytes"], rows["pages_missed"] = 2, 110_000, 27
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files-per-interval", type=int, default=30_000)
    p.add_argument("--total", type=int, default=1_000_000)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    files = rng.permutation(np.arange(10**6, 10**6 + args.total)) * 7919  # spread like inodes
    r = Rereads(lambda *_: None)
    times, again = [], []
    for epoch in range(2):
        order = rng.permutation(files)
        for start in range(0, len(order), args.files_per_interval):
            rows = interval(order[start:start + args.files_per_interval])
            t0 = time.perf_counter()
            out = r.mark(rows)
            times.append(time.perf_counter() - t0)
            if epoch:
                again.append(out["reread_bytes"].sum() / out["bytes"].sum())
    fresh = interval(np.arange(10**9, 10**9 + 100_000))
    false = r.mark(fresh)["reread_bytes"].astype(bool).mean()
    print(f"{args.total} files, {args.files_per_interval} per interval, two passes: "
          f"{1e3 * statistics.median(times):.1f} ms per interval (median; max "
          f"{1e3 * max(times):.1f}), second pass marked {100 * statistics.median(again):.1f} % "
          f"re-read (median interval); new files seen as re-read: {100 * false:.2f} %; bitmap "
          f"{r.bits.nbytes >> 20} MiB")


if __name__ == "__main__":
    main()
