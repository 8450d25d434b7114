"""More distinct files in one interval than a per-file buffer holds: the kernel asks for the
buffer to be drained once its log passes its mark (slots.bpf.h, ask_drain), the tracer takes it
out early and adds it to the interval's, and nothing is counted per folder for want of room,
let alone lost. The maps are made small (IOTRACE_MAP_SIZES) and the interval long, so that a
few seconds of reads overflow what one buffer holds."""

from __future__ import annotations

import json
import os
import sys

import pandas as pd
import pytest

from conftest import needs_root, run_iotrace

pytestmark = [needs_root, pytest.mark.kernel]

FOLDERS, PER_FOLDER, SIZE = 40, 1000, 100  # 40 000 files, each read once
# Per interval buffer: 32 slots, a log of 2 048 records (the mark at 1 024) and 16 384 entries
# of file_stats: 18 464 keys, under half the files read in the one interval
SIZES = "file_slots=64,file_log=4096,file_stats=16384"
# Reads the files once each, 10 000 a second at most: the tracer, at nice 10 on a busy host,
# has the room left past the mark (17 000 keys) to drain in
JOB = ("import os, sys, time\n"
       "root = sys.argv[1]; t0 = time.monotonic(); n = 0\n"
       "for d in sorted(os.listdir(root)):\n"
       "    for name in sorted(os.listdir(os.path.join(root, d))):\n"
       "        with open(os.path.join(root, d, name), 'rb') as f: f.read()\n"
       "        n += 1\n"
       "        ahead = n / 10000 - (time.monotonic() - t0)\n"
       "        if ahead > 0: time.sleep(ahead)\n")


def test_files_past_a_buffer_in_one_interval_are_drained_not_dropped(tmp_path):
    data = tmp_path / "data"
    for d in range(FOLDERS):
        folder = data / f"c{d:02d}"
        folder.mkdir(parents=True)
        for i in range(PER_FOLDER):
            (folder / f"f{i:04d}").write_bytes(b"x" * SIZE)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "-i", "60", "--", sys.executable, "-c", JOB, str(data),
                    timeout=120, env={**os.environ, "IOTRACE_MAP_SIZES": SIZES})
    assert r.returncode == 0, r.stderr
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    assert cost["map_entries"]["file_stats"] == 16384
    assert cost["map_full_drops"] == dict.fromkeys(cost["map_full_drops"], 0)
    assert cost["events_lost"] == 0
    assert cost["files_rolled_up"]["kernel_folder_ops"] == 0
    procs = pd.read_parquet(out / "processes")
    job = int(procs[procs.role == "main"].pid.iloc[0])
    files = pd.read_parquet(out / "files")
    reads = files[(files.pid == job) & (files.op == "read")]
    data_reads = reads[reads.path.str.startswith(str(data))]
    # every byte the job read of its files, as a file's row or its folder's
    assert int(data_reads.bytes.sum()) == FOLDERS * PER_FOLDER * SIZE
    assert int(files[(files.pid == job) & (files.op == "open")
                     & files.path.str.startswith(str(data))].file_count.sum()) == (
        FOLDERS * PER_FOLDER)
    lat = pd.read_parquet(out / "latency")
    lat = lat[(lat.pid == job) & (lat.layer == "syscall") & (lat.op == "read")
              & (lat.target == "file")]
    assert (int(lat["count"].sum()), int(lat["bytes"].sum())) == (
        int(reads.ops.sum()), int(reads.bytes.sum()))
