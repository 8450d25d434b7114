#!/usr/bin/env python3
"""What counting every disk's users costs the processes iotrace does not trace.

    .venv/bin/python scripts/bench_neighbours.py [--seconds 2] [--rounds 5] [--cpu 1]
        [--before DIR]

Since `device_users`, the block programs record every block request of the host, not only the
traced processes': an untraced process's O_DIRECT read now takes a slot in the table of
requests in flight and adds to `block_users` when it completes. This measures that on the
neighbour itself: scripts/bin/pread_loop --direct (4 KiB O_DIRECT random reads), untraced,
while iotrace traces a `sleep` (`--pid`), against the same loop with no iotrace at all, in the
same round; with --before DIR also under the iotrace of another checkout (built with `make
build`), e.g. the commit before, in the same rounds. The order of the modes rotates per round.

Reported: the loop's ns/op per mode (median of rounds), the slowdown (median of the per-round
ratios against the untraced run), and, from each iotrace's meta.json with `--bpf-stats
always`, the block programs' runs and ns per run: their CPU per request, which is the bound
that does not depend on the disk's noise (an O_DIRECT read's time spreads by 10 % and more
from round to round on a shared VM). Timings are reported, never asserted.
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_overhead as bo

BLOCK = ("io_start_raw", "rq_insert_raw", "rq_issue_raw", "rq_complete_raw", "io_done_raw",
         "rq_merge_raw", "rq_requeue_raw")


def loop_argv(file: Path, seconds: float, cpu: int | None) -> list[str]:
    argv = [str(bo.LOOP), str(file), str(seconds), "--direct"]
    return ["taskset", "-c", str(cpu), *argv] if cpu is not None else argv


def run_beside(iotrace: list[str] | None, argv: list[str], timeout: float) -> dict:
    """The loop, untraced; with `iotrace`, while that iotrace traces a sleeper."""
    if iotrace is None:
        return {"ns": bo.run_untraced(argv, timeout).ns_per_op}
    out = tempfile.mkdtemp(prefix="iotrace-bench-", dir="/var/tmp")
    sleeper = subprocess.Popen(["sleep", str(timeout + 30)])
    tracer = subprocess.Popen([*iotrace, "--pid", str(sleeper.pid), "-o", out, "--no-tui",
                               "--bpf-stats", "always"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = tracer.stderr.readline()
        if not line.startswith("Tracing"):
            raise bo.BenchError(f"iotrace did not start: {line}{tracer.stderr.read()[-800:]}")
        run = bo.run_untraced(argv, timeout)
        tracer.send_signal(signal.SIGINT)
        _, err = tracer.communicate(timeout=60)
        if tracer.returncode != 0:
            raise bo.BenchError(f"iotrace exited {tracer.returncode}: {err[-800:]}")
        meta = json.loads((Path(out) / "meta.json").read_text())
        progs = {p["name"]: p for p in meta["self_cost"]["programs"] if p["name"] in BLOCK}
        cnt = sum(p["run_cnt"] for p in progs.values())
        ns = sum(p["run_time_ns"] for p in progs.values())
        return {"ns": run.ns_per_op, "ops": run.ops, "block_runs": cnt, "block_ns": ns,
                "per_prog": {n: (p["run_cnt"], p["run_time_ns"]) for n, p in progs.items()}}
    finally:
        for p in (tracer, sleeper):
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu", type=int, metavar="N", help="pin the loop to CPU N")
    ap.add_argument("--file", type=Path, default=Path("/var/tmp/iotrace-bench.dat"))
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="also run the iotrace of this checkout (its tracer/, built objects)")
    ap.add_argument("--quiet-wait", type=float, default=5.0, metavar="S",
                    help="wait up to S for other tracers' programs to go before each run")
    ap.add_argument("--json", type=Path, help="also write every measurement here")
    args = ap.parse_args(argv)
    bo.ensure_built()
    bo.ensure_data_file(args.file)
    modes = {"untraced": None, "iotrace": bo.find_iotrace(bo.REPO)}
    if args.before:
        modes["before"] = bo.find_iotrace(args.before)
    loop = loop_argv(args.file, args.seconds, args.cpu)
    timeout = args.seconds * 10 + 30
    results: dict[str, list[dict]] = {m: [] for m in modes}
    names = list(modes)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for mode in order:
            others = bo.wait_quiet(args.quiet_wait)
            results[mode].append({**run_beside(modes[mode], loop, timeout), "others": others})
        print(f"round {r + 1}: " + "  ".join(f"{m} {results[m][-1]['ns']:.0f}" for m in names)
              + f"  (other tracers' programs: {max(results[m][-1]['others'] for m in names)})",
              file=sys.stderr)
    base = [x["ns"] for x in results["untraced"]]
    print(f"{'mode':10} {'ns/op':>9} {'slowdown':>9} {'block runs/op':>14} "
          f"{'block ns/op':>12}   per round ns/op")
    for mode in names:
        xs = results[mode]
        ns = statistics.median(x["ns"] for x in xs)
        ratio = statistics.median(x["ns"] / b for x, b in zip(xs, base, strict=True))
        runs = ns_op = "-"
        if mode != "untraced":
            ops = sum(x["ops"] for x in xs)
            runs = f"{sum(x['block_runs'] for x in xs) / ops:.2f}"
            ns_op = f"{sum(x['block_ns'] for x in xs) / ops:.0f}"
        print(f"{mode:10} {ns:9.0f} {ratio:8.3f}x {runs:>14} {ns_op:>12}   "
              + " ".join(f"{x['ns']:.0f}" for x in xs))
    for mode in names[1:]:
        per: dict[str, list[int]] = {}
        for x in results[mode]:
            for n, (c, t) in x["per_prog"].items():
                acc = per.setdefault(n, [0, 0])
                acc[0] += c
                acc[1] += t
        print(f"{mode}: ns per run: " + ", ".join(
            f"{n} {t / c:.0f}" for n, (c, t) in sorted(per.items()) if c))
    if args.json:
        args.json.write_text(json.dumps({"machine": bo.machine(), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except bo.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
