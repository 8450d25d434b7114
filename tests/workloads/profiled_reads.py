"""Cold file reads inside torch.profiler, for the Perfetto merge test (tests/test_perfetto.py).

    python profiled_reads.py OUT_DIR [PROBES]

Writes PROBES (default 4) files of 4 MiB to OUT_DIR/data, drops them from the page cache, then
profiles (CPU only) a loop where probe i reads file i whole inside ``record_function("probe_i")``
and does a small matrix product, with 0.3 s of sleep between probes so that each probe's reads
can be told apart by time alone. The profile goes to OUT_DIR/kineto.json
(``export_chrome_trace``); OUT_DIR/probes.json lists each probe's file and wall-clock span
(ns since the Unix epoch) as seen by the script.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

MIB = 1 << 20


def main() -> None:
    out = sys.argv[1]
    probes = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    paths = []
    for i in range(probes):
        path = os.path.join(data, f"probe_{i}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(4 * MIB))
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # cold: the reads go to the disk
        os.close(fd)
        paths.append(path)
    spans = []
    x = torch.randn(128, 128)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i, path in enumerate(paths):
            time.sleep(0.3)
            start = time.time_ns()
            with torch.profiler.record_function(f"probe_{i}"):
                with open(path, "rb", buffering=0) as f:
                    while f.read(MIB):
                        pass
                x = x @ x / 128
            spans.append({"probe": i, "path": path, "start_ns": start, "end_ns": time.time_ns()})
        time.sleep(0.3)
    prof.export_chrome_trace(os.path.join(out, "kineto.json"))
    with open(os.path.join(out, "probes.json"), "w") as f:
        json.dump(spans, f)


if __name__ == "__main__":
    main()
