"""What iotrace costs a real PyTorch DataLoader job, and what the tracer itself burns.

    .venv/bin/python scripts/bench_dataloader.py [--rounds 5] [--epochs 3]

1. Steps per second of a real training job (tracer.workloads.train: 2 DataLoader workers
   reading 96 files of 192 KiB from the page cache, a light model), untraced and traced by
   `iotrace -- ...`, paired in the same invocation, the order alternating per round. The job
   prints `epoch E steps N seconds T`; steps/s is the sum of steps over the sum of seconds
   (epochs only: start-up and torch's import are not in it).
2. What iotrace takes, as it reports it itself (meta.json `self_cost`): its BPF programs'
   CPU while counted (the first tenth of every interval, `--bpf-stats sampled`) and the tracer process's CPU
   while tracing, set against the CPU the job itself uses (its process tree's user + system
   time, from the untraced runs). On 2 shared vCPUs the steps/s of identical runs spread by
   more than the 1 % goal, while these CPU shares are steady: (BPF + tracer) / job CPU is
   an upper bound of the slowdown when the job is CPU-bound.
3. The CPU the job itself uses (its process tree, from getrusage in a small wrapper around
   it), untraced and traced: the BPF programs run in the job's threads, so what tracing costs
   the job shows up there, and CPU seconds per step are far steadier than steps/s here.
4. The tracer's own CPU per second of tracing for a page-cache pread loop doing several
   hundred thousand syscalls per second.

Prints a table; writes nothing else. Timings are never asserted anywhere (they are noisy on
2 vCPUs): read docs/benchmarks.md for what was measured and how.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
EPOCH = re.compile(r"epoch \d+ steps (\d+) seconds ([0-9.]+)")


def run_with_cpu(argv: list[str]) -> tuple[str, float, float]:
    """(stdout, wall seconds, CPU seconds of the top process's own threads). wait4's rusage would
    add the children it reaped (the traced job), so the CPU is read from /proc/PID/stat
    (utime + stime, not cutime/cstime) every 100 ms; the last reading before exit counts."""
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        cpu = 0.0
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / hz  # utime, stime (fields 14, 15)
            except (OSError, IndexError):
                pass
            time.sleep(0.1)
        wall = time.monotonic() - t0
        out.seek(0)
        return out.read(), wall, cpu


# Runs the job and writes its process tree's CPU seconds (user + system) to argv[1].
JOB_CPU = ("import resource, subprocess, sys\n"
           "rc = subprocess.run(sys.argv[2:]).returncode\n"
           "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
           "open(sys.argv[1], 'w').write(str(ru.ru_utime + ru.ru_stime))\n"
           "sys.exit(rc)\n")


def total_steps(out: str) -> int:
    return sum(int(s) for s, _ in EPOCH.findall(out))


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def steps_per_s(out: str) -> float:
    pairs = [(int(s), float(t)) for s, t in EPOCH.findall(out)]
    if not pairs:
        raise SystemExit(f"no epoch lines in the job's output:\n{out[-2000:]}")
    return sum(s for s, _ in pairs) / sum(t for _, t in pairs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5, help="length of the pread loop")
    args = p.parse_args()
    from tracer.workloads.dataset import hold, make_dataset

    data = Path(tempfile.gettempdir()) / "iotrace-bench-dataloader"
    paths = make_dataset(data, 96, 192)
    keep = hold(paths)  # warm and kept mapped: page-cache reads for the whole run
    job = [PY, "-m", "tracer.workloads.train", "--data", str(data), "--num-workers", "2",
           "--persistent-workers", "--batch-size", "8", "--epochs", str(args.epochs)]
    iotrace = [PY, "-m", "tracer.cli", "--no-tui", "-o"]
    plain, traced, tracer_cpu, job_cpus, bpf_pct, tracing_pct = [], [], [], [], [], []
    step_cpu: dict[str, list[float]] = {"plain": [], "traced": []}  # job CPU ms per step
    try:
        for r in range(args.rounds):
            order = ("plain", "traced") if r % 2 == 0 else ("traced", "plain")
            for mode in order:
                with tempfile.TemporaryDirectory() as d:
                    wrapped = [PY, "-c", JOB_CPU, f"{d}/cpu", *job]
                    if mode == "plain":
                        before = children_cpu_s()
                        out, wall, _ = run_with_cpu(wrapped)
                        job_cpus.append((children_cpu_s() - before) / wall)
                        plain.append(steps_per_s(out))
                    else:
                        out, wall, cpu = run_with_cpu([*iotrace, f"{d}/t", "--", *wrapped])
                        cost = json.loads(Path(f"{d}/t/meta.json").read_text())["self_cost"]
                    if not Path(f"{d}/cpu").exists():  # the job did not finish
                        raise SystemExit(f"round {r + 1}, {mode}: the job wrote no CPU time; "
                                         f"its output ends:\n{out[-3000:]}")
                    step_cpu[mode].append(
                        1000 * float(Path(f"{d}/cpu").read_text()) / total_steps(out))
                if mode == "traced":
                    traced.append(steps_per_s(out))
                    tracer_cpu.append(cpu / wall)
                    bpf_pct.append(cost["bpf_stats"]["cpu_pct"] or 0.0)
                    tracing_pct.append(cost["tracer"]["cpu_pct"] or 0.0)
            print(f"round {r + 1}: untraced {plain[-1]:.1f} steps/s (job {job_cpus[-1]:.2f} "
                  f"CPUs, {step_cpu['plain'][-1]:.2f} ms CPU/step), traced {traced[-1]:.1f} "
                  f"steps/s ({step_cpu['traced'][-1]:.2f} ms CPU/step); BPF {bpf_pct[-1]:.2f} % "
                  "and tracer "
                  f"{tracing_pct[-1]:.1f} % of one core while tracing ({100 * tracer_cpu[-1]:.1f} "
                  "% over its whole run)", flush=True)
    finally:
        keep.close()
    ratios = [t / u for t, u in zip(traced, plain, strict=True)]
    print(f"\nDataLoader job: untraced median {statistics.median(plain):.1f} steps/s, traced "
          f"{statistics.median(traced):.1f}; traced/untraced per round "
          f"{' '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f} "
          f"({100 * (1 - statistics.median(ratios)):+.1f} % fewer steps/s)")
    cpu_ratios = [t / u for t, u in zip(step_cpu["traced"], step_cpu["plain"], strict=True)]
    print(f"job CPU per step (its whole process tree, start-up included): untraced median "
          f"{statistics.median(step_cpu['plain']):.2f} ms, traced "
          f"{statistics.median(step_cpu['traced']):.2f} ms; traced/untraced per round "
          f"{' '.join(f'{x:.3f}' for x in cpu_ratios)}; median "
          f"{statistics.median(cpu_ratios):.3f}")
    print(f"tracer CPU while tracing the job: median {100 * statistics.median(tracer_cpu):.1f} % "
          "of one core (whole run, start-up and final write included)")
    job_pct = 100 * statistics.median(job_cpus)
    bpf, tracer = statistics.median(bpf_pct), statistics.median(tracing_pct)
    print(f"as iotrace reports it: BPF {bpf:.2f} % of one CPU (from its sampled BPF stats), tracer "
          f"{tracer:.1f} % while tracing; the untraced job uses {job_pct:.0f} % (median): "
          f"iotrace's share {100 * (bpf + tracer) / job_pct:.1f} % of the job's CPU (BPF alone "
          f"{100 * bpf / job_pct:.2f} %)")

    loop = ROOT / "scripts/bin/pread_loop"
    if not loop.exists():
        subprocess.run(["make", "-s", "scripts/bin/pread_loop"], cwd=ROOT, check=True)
    bench = Path("/var/tmp/iotrace-bench.dat")
    if not bench.exists():
        with open(bench, "wb") as f:
            f.write(os.urandom(1 << 20))
    with tempfile.TemporaryDirectory() as d:
        out, wall, cpu = run_with_cpu([*iotrace, f"{d}/t", "--", str(loop), str(bench),
                                       str(args.seconds)])
        cost = json.loads(Path(f"{d}/t/meta.json").read_text())["self_cost"]
    ops = int(re.search(r"ops=(\d+)", out)[1])
    print(f"pread loop: {ops / args.seconds / 1000:.0f} k syscalls/s traced; tracer CPU "
          f"{cost['tracer']['cpu_pct']:.1f} % of one core while tracing, "
          f"{100 * cpu / wall:.1f} % over its whole {wall:.1f} s (start-up and final write "
          f"included); BPF {cost['bpf_stats']['cpu_pct']:.1f} % of one CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
