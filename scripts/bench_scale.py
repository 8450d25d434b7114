"""iotrace on an ImageNet-shaped job: many small files, read once by DataLoader workers.

    .venv/bin/python scripts/bench_scale.py [--files 200000] [--folders 1000] [--workers 8]
        [--rounds 2] [--files-per-s N] [--data /var/tmp/iotrace-scale] [--keep DIR]
        [--shuffle] [--work-passes N] [--programs-only] [--beside-cpu FRACTION] [--floor]
        [--cold]

The job is tracer.workloads.imagefolder (open, read whole, close each file in the workers;
no model; with --shuffle in a random order, as a training job reads them; with --work-passes
N, N SHA-256 passes over each sample's bytes in its worker: CPU work a sample, as decoding
takes). Per round, untraced and traced by `iotrace -o DIR --no-tui -- job`, in turn which
first, the page cache warmed right before each run (this machine's reclaim drops idle file
pages after seconds), so both runs read from memory and the job goes as fast as files can be
opened; with --cold the cache is dropped before each run instead, and every file is read from
the disk. Prints per run:

- the job's own seconds (from its first batch to its last) and traced/untraced;
- the CPU of that epoch, the job's (main and workers) untraced against the job's traced plus
  the tracer's at its rate while tracing: what the job and iotrace together need, which idle
  gaps in the job do not hide as they can in the seconds;
- the tracer's CPU (its process's utime + stime, over the traced run's wall time) and its
  peak RSS (meta.json self_cost), ring-buffer records lost and map-full drops;
- exactness: the workers' read ops and bytes in the `files` table (per-file rows and folder
  roll-ups) against those of the `latency` table (syscall layer), which must be equal; the
  data set's files those rows count (a file read across an interval's end counts in both)
  against the files the job read; and how many files kept their own rows;

and at the end the median slowdown, and the geometric mean of the rounds' with its 95 %
confidence interval: whether the rounds pin the slowdown down to the precision a goal needs.

With --programs-only, each round also runs the job traced with the tracer stopped (SIGSTOP)
from the moment it is attached until the job has ended: what the BPF programs cost the job
alone, with no user space running beside it (its maps fill and its ring buffer overflows: that
trace is not kept, only the job's seconds).

With --beside-cpu FRACTION, each round also runs the job untraced beside a process that burns
FRACTION of one core in 10 ms bursts at the tracer's priority (tracer.kernel.host.yield_to_job):
what CPU taken as the tracer takes it costs the job, with no programs attached.

With --floor, each round also runs the job untraced beside the io-floor programs of
scripts/bench_floor.bpf.c: a start time in task-local storage at the entry of each syscall
iotrace times, the latency into a log2 slot at its exit, on the raw tracepoints iotrace uses;
nothing else, no user space. What timing the job's I/O calls at all costs it on this host: a
lower bound for any tracer that measures every call's latency there.

Timings are not asserted anywhere: figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracer.workloads import imagefolder  # noqa: E402

PY = sys.executable
EPOCH = re.compile(r"files (\d+) bytes (\d+) seconds ([0-9.]+)(?: cpu_seconds ([0-9.]+))?")


# --cold: every run reads its files from the disk
COLD = False


def set_cache(directory: Path) -> None:
    """The data set in the page cache (warm), or with --cold no file's page in it: written
    back, then every clean page of the host dropped."""
    if COLD:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("1")
        return
    subprocess.run(f"find {directory} -type f -print0 | xargs -0 cat > /dev/null", shell=True,
                   check=True)


def cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(argv: list[str]) -> tuple[str, float, float]:
    """(stdout, wall s, CPU s of the top process's own threads, read until it exits)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        cpu = 0.0
        while proc.poll() is None:
            cpu = cpu_s(proc.pid) or cpu
            time.sleep(0.1)
        wall = time.monotonic() - t0
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} exited {proc.returncode}: {text[-400:]}")
    return text, wall, cpu


def programs_only(argv: list[str]) -> str:
    """The job's stdout, traced by `argv` (an iotrace command line) stopped from the moment it
    says it is tracing until the job has printed its epoch line."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for line in proc.stderr:
            if line.startswith("Tracing"):
                break
        else:
            proc.wait()
            raise SystemExit(f"iotrace exited {proc.returncode} before it traced the job")
        proc.send_signal(signal.SIGSTOP)
        try:
            while True:
                out.seek(0)
                if EPOCH.search(out.read()):
                    break
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGCONT)
        proc.stderr.read()
        proc.wait()
        out.seek(0)
        return out.read()


# The burner of --beside-cpu: FRACTION of one core, a 10 ms burst every 10 ms / FRACTION, at the
# priority the tracer takes
BURN = """
import sys, time
from tracer.kernel.host import yield_to_job
yield_to_job()
period_s = 0.01 / float(sys.argv[1])
while True:
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.01:
        pass
    time.sleep(period_s - 0.01)
"""


def beside_burner(job: list[str], fraction: float) -> str:
    """The job's stdout, run untraced beside the burner of `fraction` of a core."""
    burner = subprocess.Popen([PY, "-c", BURN, str(fraction)], cwd=ROOT)
    try:
        return run(job)[0]
    finally:
        burner.kill()
        burner.wait()


def job_seconds(text: str) -> tuple[int, int, float]:
    """(files, bytes, seconds) of the job's epochs, added up."""
    found = EPOCH.findall(text)
    if not found:
        raise SystemExit(f"the job printed no epoch line: {text[-400:]}")
    return (sum(int(m[0]) for m in found), sum(int(m[1]) for m in found),
            sum(float(m[2]) for m in found))


def job_cpu_s(text: str) -> float:
    """The CPU seconds of the job's epochs (its main process and workers)."""
    found = EPOCH.findall(text)
    if not found or any(not m[3] for m in found):
        raise SystemExit(f"the job printed no CPU time: {text[-400:]}")
    return sum(float(m[3]) for m in found)


def exactness(trace_dir: Path, data: Path) -> dict:
    import tracer

    t = tracer.load(trace_dir)
    procs = t.processes
    workers = set(procs.pid[procs.role == "dataloader_worker"])
    lat = t.latency
    lat = lat[(lat.layer == "syscall") & (lat.target == "file") & (lat.op == "read")
              & lat.pid.isin(workers)]
    files = t.files
    reads = files[(files.op == "read") & files.pid.isin(workers)]
    own = reads[reads.path_source != "folder"]
    return {"latency_ops": int(lat["count"].sum()), "latency_bytes": int(lat["bytes"].sum()),
            "files_ops": int(reads.ops.sum()), "files_bytes": int(reads.bytes.sum()),
            "paths_own": int(own.path.nunique()),
            # (the workers read their modules too)
            "files_counted": int(reads.file_count[reads.path.str.startswith(f"{data}/")].sum()),
            "segments": sum(1 for _ in trace_dir.rglob("*.parquet")),
            "trace_bytes": sum(p.stat().st_size for p in trace_dir.rglob("*") if p.is_file())}


def untraced_run(job: list[str], data: Path) -> tuple[int, float, float]:
    """(files read, the epoch's seconds, its CPU seconds) of the job untraced (set_cache)."""
    set_cache(data)
    text, _, _ = run(job)
    n, _, seconds = job_seconds(text)
    return n, seconds, job_cpu_s(text)


def traced_run(job: list[str], keep: str | None, data: Path,
               interval: float | None = None) -> tuple[Path, str, float, float]:
    """(trace directory, the job's stdout, wall s, the tracer's CPU s) of the job under
    `iotrace -- job` (with `-i interval` when given; set_cache)."""
    out = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="iotrace-scale-"))
    subprocess.run(["rm", "-rf", str(out)], check=True)
    set_cache(data)
    options = ["-i", str(interval)] if interval else []
    text, wall, tracer_cpu = run([PY, "-m", "tracer.cli", "-o", str(out), "--no-tui", *options,
                                  "--", *job])
    return out, text, wall, tracer_cpu


def geometric_mean_ci(ratios: list[float]) -> tuple[float, float, float]:
    """The geometric mean of `ratios` and its 95 % confidence interval (Student's t on their
    logarithms): how well the rounds pin down the slowdown, which one round's spread does not
    show."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    # two-sided 95 % quantiles of Student's t, by degrees of freedom (beyond 30: the normal's);
    # a table rather than scipy, which nothing else here needs
    t = T95.get(len(logs) - 1, 1.96)
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
       10: 2.23, 11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14, 15: 2.13, 16: 2.12, 17: 2.11, 18: 2.10,
       19: 2.09, 20: 2.09, 21: 2.08, 22: 2.07, 23: 2.07, 24: 2.06, 25: 2.06, 26: 2.06, 27: 2.05,
       28: 2.05, 29: 2.05, 30: 2.04}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("--folders", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data", default="/var/tmp/iotrace-scale")
    ap.add_argument("--files-per-s", type=float, help="pace the job (default: as fast as it goes)")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the files")
    ap.add_argument("--interval", type=float, help="iotrace's -i (default: its own, 1 s)")
    ap.add_argument("--keep", help="keep the last trace here")
    ap.add_argument("--shuffle", action="store_true",
                    help="the files in a random order, as a training job's sampler gives them")
    ap.add_argument("--work-passes", type=int, default=0,
                    help="CPU work per sample in the workers: SHA-256 passes over its bytes")
    ap.add_argument("--cold", action="store_true",
                    help="drop the page cache before each run (it is warmed by default)")
    ap.add_argument("--programs-only", action="store_true",
                    help="also run the job with the tracer stopped once attached")
    ap.add_argument("--floor", action="store_true",
                    help="also run the job beside the least programs that time its I/O calls")
    ap.add_argument("--beside-cpu", type=float, metavar="FRACTION",
                    help="also run the job untraced beside a process burning that much of a "
                         "core at the tracer's priority")
    args = ap.parse_args()
    global COLD
    COLD = args.cold
    if args.beside_cpu is not None and not 0 < args.beside_cpu < 1:
        raise SystemExit(f"--beside-cpu {args.beside_cpu}: a fraction of a core, above 0 and "
                         "below 1")

    data = Path(args.data) / f"{args.files}x{args.folders}"
    t0 = time.monotonic()
    imagefolder.make(data, args.files, args.folders)
    print(f"data set {data}: {args.files} files in {args.folders} folders "
          f"(made or checked in {time.monotonic() - t0:.0f} s)", flush=True)
    job = [PY, "-m", "tracer.workloads.imagefolder", "--data", str(data),
           "--num-workers", str(args.workers)]
    if args.files_per_s:
        job += ["--files-per-s", str(args.files_per_s)]
    if args.epochs > 1:
        job += ["--epochs", str(args.epochs)]
    if args.shuffle:
        job.append("--shuffle")
    if args.work_passes:
        job += ["--work-passes", str(args.work_passes)]
    # the job beside the io-floor programs, which bench_overhead.py attaches around it
    floor_job = [PY, str(ROOT / "scripts" / "bench_overhead.py"), "--floor-run", "io-floor", "--",
                 *job]
    ratios, cpu_ratios, alone, beside, floor, floor_cpu = [], [], [], [], [], []
    for r in range(args.rounds):
        # every other round traced first (with --floor, the three runs in turn): a machine
        # that slows down or speeds up over a round then favours no run in the medians
        runs = {"untraced": lambda: untraced_run(job, data),
                "traced": lambda: traced_run(job, args.keep, data, args.interval)}
        if args.floor:
            runs["io-floor"] = lambda: untraced_run(floor_job, data)
        order = list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]
        done = {name: runs[name]() for name in order}
        plain, traced = done["untraced"], done["traced"]
        n, plain_s, plain_cpu = plain
        out, text, wall, tracer_cpu = traced
        n_traced, _, traced_s = job_seconds(text)
        meta = json.loads((out / "meta.json").read_text())
        cost = meta.get("self_cost", {})
        # the tracer's CPU over the job's epoch, at its rate while tracing
        tracer_epoch_cpu = cost.get("tracer", {}).get("cpu_pct", 0) / 100 * traced_s
        traced_cpu = job_cpu_s(text)
        cpu_ratios.append((traced_cpu + tracer_epoch_cpu) / plain_cpu)
        ex = exactness(out, data)
        ratio = traced_s / plain_s
        ratios.append(ratio)
        full = {k: v for k, v in cost.get("map_full_drops", {}).items() if v}
        print(f"round {r} ({order[0]} first): untraced {plain_s:.2f} s "
              f"({n / plain_s:,.0f} files/s), traced "
              f"{traced_s:.2f} s: {ratio:.3f}x; tracer {tracer_cpu / wall * 100:.0f} % of a "
              f"core ({cost.get('tracer', {}).get('cpu_pct')} % while tracing, start-up "
              f"left out), peak RSS {cost.get('tracer', {}).get('peak_rss_bytes', 0) / 2**20:.0f} "
              f"MiB; lost {cost.get('events_lost')} records, map full {full or 0}", flush=True)
        paths, rolled = cost.get("file_paths_lost", {}), cost.get("files_rolled_up", {})
        tracing_cpu = (cost.get("tracer", {}).get("cpu_seconds", 0)
                       - cost.get("tracer", {}).get("setup_cpu_seconds", 0))
        after_setup = tracer_cpu - cost.get("tracer", {}).get("setup_cpu_seconds", 0)
        print(f"  tracer CPU while tracing {tracing_cpu:.2f} s: "
              f"{tracing_cpu / max(n_traced, 1) * 1e6:.1f} us a file read (after start-up, the "
              f"last interval and the end included: {after_setup / max(n_traced, 1) * 1e6:.1f} "
              f"us); paths unknown "
              f"{paths.get('unknown')} (recovered {paths.get('recovered')}); file rows rolled "
              f"up {rolled.get('file_rows')} ({rolled.get('kernel_folded_files', 0)} by the kernel at "
              f"their close), folder rows {rolled.get('folder_rows')}, "
              f"operations counted per folder by the kernel {rolled.get('kernel_folder_ops')}",
              flush=True)
        print(f"  CPU of the epoch: job {plain_cpu:.2f} s untraced, {traced_cpu:.2f} s traced, "
              f"tracer {tracer_epoch_cpu:.2f} s: {cpu_ratios[-1]:.3f}x", flush=True)
        same = (ex["files_ops"], ex["files_bytes"]) == (ex["latency_ops"], ex["latency_bytes"])
        print(f"  files table: {ex['files_ops']} reads {ex['files_bytes']} B; latency table: "
              f"{ex['latency_ops']} reads {ex['latency_bytes']} B; "
              f"{'equal' if same else 'DIFFERENT'}; {ex['paths_own']} files with rows of their "
              f"own; trace {ex['trace_bytes'] / 2**20:.1f} MiB in {ex['segments']} segments "
              f"({ex['trace_bytes'] / 2**20 / wall * 3600:.0f} MiB/hour); "
              f"job read {n_traced} files, its rows count {ex['files_counted']}", flush=True)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(out)], check=True)
        if args.programs_only:
            scratch = Path(tempfile.mkdtemp(prefix="iotrace-scale-"))
            set_cache(data)
            _, _, alone_s = job_seconds(programs_only(
                [PY, "-m", "tracer.cli", "-o", str(scratch / "t"), "--no-tui", "--bpf-stats",
                 "off", "--", *job]))
            subprocess.run(["rm", "-rf", str(scratch)], check=True)
            alone.append(alone_s / plain_s)
            print(f"  programs only (the tracer stopped once attached): {alone_s:.2f} s: "
                  f"{alone[-1]:.3f}x", flush=True)
        if args.floor:
            _, floor_s, cpu = done["io-floor"]
            floor.append(floor_s / plain_s)
            floor_cpu.append(cpu / plain_cpu)
            print(f"  untraced beside the io-floor programs: {floor_s:.2f} s: {floor[-1]:.3f}x; "
                  f"CPU of the epoch {cpu:.2f} s: {floor_cpu[-1]:.3f}x", flush=True)
        if args.beside_cpu:
            set_cache(data)
            _, _, burnt_s = job_seconds(beside_burner(job, args.beside_cpu))
            beside.append(burnt_s / plain_s)
            print(f"  untraced beside {args.beside_cpu:.0%} of a core burnt at the tracer's "
                  f"priority: {burnt_s:.2f} s: {beside[-1]:.3f}x", flush=True)
    mean, lo, hi = geometric_mean_ci(ratios)
    spread = f", 95 % interval {lo:.3f}-{hi:.3f}x" if len(ratios) > 1 else ""
    print(f"median slowdown {statistics.median(ratios):.3f}x over {len(ratios)} rounds "
          f"(geometric mean {mean:.3f}x{spread}); CPU "
          f"{statistics.median(cpu_ratios):.3f}x"
          + (f"; programs only {statistics.median(alone):.3f}x" if alone else "")
          + (f"; io-floor {statistics.median(floor):.3f}x, CPU "
             f"{statistics.median(floor_cpu):.3f}x" if floor else "")
          + (f"; beside the burner {statistics.median(beside):.3f}x" if beside else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
