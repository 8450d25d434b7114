#!/usr/bin/env python3
"""What each way of hooking the syscalls costs: the host's other syscalls, and a traced call.

    .venv/bin/python scripts/bench_hooks.py [--rounds 15] [--seconds 0.3] [--cpu 1]

Run as root from the repository (after `make build scripts/bin/pread_loop
scripts/bin/bench_floor.bpf.o`), with tracefs mounted (the classic tracepoints are attached
by their ids there). Two workloads of scripts/bin/pread_loop: getppid() calls (`other`: a
syscall no hooking traces, what every process of the host pays) and 4 KiB page-cache preads
(`pread`: what a traced process pays per I/O call). Each round runs, for every hooking in an
order rotating from round to round, the loop once untraced and right after once hooked:

  raw, classic, mixed  iotrace's own programs (tracer/kernel/loader.py, SYSCALL_HOOKS), loaded
             once each, attached for the hooked run only; this script is tracked, so the loop
             it starts is traced (the syscall layer, and every other layer as iotrace does)
  raw-floor, classic-floor  empty programs on the same attach points (bench_floor.bpf.c)
  bpftrace-floor  bpftrace's empty programs on the classic pread64 pair (when installed)

Unlike bench_overhead.py, no iotrace process runs beside the loop (nothing reads the maps), so
the figures are the kernel side's alone, and an untraced run is seconds, not rounds, away from
its hooked run. Each figure is the median over rounds of (hooked - untraced) of the loop's
10th percentile of its batches' ns/op (pread_loop.c): other load only slows a batch, so the
fast batches are what a call costs. The spread is the range of those per-round differences.
Other tracers' programs tax every syscall, untraced runs too: the pairs with none loaded
around them are also summed up on their own. Timings are reported, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tracer.kernel import libbpf as _libbpf  # noqa: E402
from tracer.kernel.loader import (  # noqa: E402
    CLASSIC_SYSCALLS,
    FORCE_ENV,
    SYSCALL_HOOKS,
    classic_syscalls_missing,
)
from tracer.kernel.probes import Probes  # noqa: E402

LOOP = REPO / "scripts" / "bin" / "pread_loop"
FLOOR_OBJ = REPO / "scripts" / "bin" / "bench_floor.bpf.o"
LINE = re.compile(r"ns_per_op=([0-9.]+) p10_ns_per_op=([0-9.]+)")
WORKLOADS = {"other": ["--other"], "pread": []}
BPFTRACE_FLOOR = ("tracepoint:syscalls:sys_enter_pread64 {} "
                  "tracepoint:syscalls:sys_exit_pread64 {}")


class Floors:
    """bench_floor.bpf.c's empty programs, loaded once; attached per run."""

    def __init__(self):
        self.obj = _libbpf.BpfObject(str(FLOOR_OBJ))
        for prog in self.obj.programs():
            prog.autoload = prog.name.startswith(("floor_", "classic_"))
        self.obj.load()
        self.links: list[_libbpf.Link] = []

    def attach(self, mode: str) -> None:
        for prog in self.obj.programs():
            if mode == "raw-floor" and prog.name.startswith("floor_"):
                self.links.append(prog.attach())
            elif mode == "classic-floor" and prog.name.startswith("classic_"):
                way = prog.name.removeprefix("classic_")
                self.links += [prog.attach_tracepoint("syscalls", f"sys_{way}_{name}")
                               for w, names in CLASSIC_SYSCALLS.values() if w == way
                               for name in names]

    def detach(self) -> None:
        for link in self.links:
            link.destroy()
        self.links = []


def own_programs() -> set[int]:
    """The ids of the BPF programs this process holds (its fdinfo)."""
    ids = set()
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            with open(f"/proc/self/fdinfo/{fd}") as f:
                ids.update(int(line.split()[1]) for line in f if line.startswith("prog_id:"))
        except OSError:
            continue
    return ids


def foreign_tracers(own: set[int]) -> int:
    """Tracing programs loaded by someone else: they tax every syscall, untraced runs too."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
    return sum(1 for p in json.loads(out or "[]") if p["id"] not in own and p.get("type") in
               ("tracepoint", "raw_tracepoint", "tracing", "kprobe", "perf_event"))


def loop(argv: list[str]) -> tuple[float, float]:
    """(mean ns/op, p10 ns/op) of one pread_loop run."""
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    m = LINE.search(out)
    if not m:
        raise SystemExit(f"pread_loop printed no p10_ns_per_op (rebuild it): {out!r}")
    return float(m.group(1)), float(m.group(2))


def hooked(mode: str, probes: dict[str, Probes], floors: Floors, argv: list[str]
           ) -> tuple[float, float]:
    if mode in probes:
        probes[mode].loader.attach()
        try:
            return loop(argv)
        finally:
            probes[mode].loader.detach()
    if mode == "bpftrace-floor":
        bt = subprocess.Popen([shutil.which("bpftrace"), "-e", BPFTRACE_FLOOR],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert bt.stdout.readline().startswith("Attaching")
            time.sleep(0.2)  # "Attaching" comes just before the probes are
            return loop(argv)
        finally:
            bt.terminate()
            bt.wait()
    floors.attach(mode)
    try:
        return loop(argv)
    finally:
        floors.detach()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--seconds", type=float, default=0.3, help="per loop run (default 0.3)")
    ap.add_argument("--cpu", type=int, default=1, help="the loop's CPU (taskset; default 1)")
    ap.add_argument("--file", default="/var/tmp/iotrace-bench.dat",
                    help="a file of at least 1 MiB (bench_overhead.py makes this one)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_hooks: run as root", file=sys.stderr)
        return 2
    why = classic_syscalls_missing()
    if why:
        print(f"bench_hooks: {why}", file=sys.stderr)
        return 2
    with open(args.file, "rb") as f:
        f.read(1 << 20)  # the page-cache loop's first MiB, cached

    probes = {}
    for hooks in SYSCALL_HOOKS:
        os.environ[FORCE_ENV] = f"{hooks}_syscalls"
        p = probes[hooks] = Probes()
        p.load()
        assert p.loader.syscall_hooks == hooks
        p.loader.track(os.getpid())  # the loops it starts are traced, as iotrace -- CMD's are
    os.environ.pop(FORCE_ENV)
    floors = Floors()
    modes = [*SYSCALL_HOOKS, "raw-floor", "classic-floor"]
    if shutil.which("bpftrace"):
        modes.append("bpftrace-floor")
    own = own_programs()
    # (workload, mode) -> [(untraced mean, p10, hooked mean, p10, foreign programs)] by round
    pairs: dict[tuple[str, str], list[tuple[float, float, float, float, int]]] = {}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for wl, extra in WORKLOADS.items():
            argv = ["taskset", "-c", str(args.cpu), str(LOOP), args.file, f"{args.seconds:g}",
                    *extra]
            for mode in order:
                others = foreign_tracers(own)
                base = loop(argv)
                pair = (*base, *hooked(mode, probes, floors, argv))
                others = max(others, foreign_tracers(own))
                pairs.setdefault((wl, mode), []).append((*pair, others))
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}/{args.rounds} done, load {load[-1]:.2f}", file=sys.stderr)
    for p in probes.values():
        p.close()

    print(f"{args.rounds} rounds, {args.seconds:g} s per run, loop on CPU {args.cpu}; load "
          f"average {min(load):.2f}-{max(load):.2f}; kernel {os.uname().release}")
    print(f"{'workload':<8} {'hooking':<15} {'untraced p10':>12} {'+ns p10':>8} "
          f"{'spread':>13} {'+ns mean':>9} {'quiet pairs: n':>14} {'+ns p10':>8}")
    for wl in WORKLOADS:
        for mode in modes:
            rows = pairs[(wl, mode)]
            d10 = [h10 - b10 for _, b10, _, h10, _ in rows]
            dmean = [h - b for b, _, h, _, _ in rows]
            quiet = [h10 - b10 for _, b10, _, h10, n in rows if not n]
            print(f"{wl:<8} {mode:<15} {statistics.median(r[1] for r in rows):12.1f} "
                  f"{statistics.median(d10):+8.1f} {min(d10):+6.0f}..{max(d10):+5.0f} "
                  f"{statistics.median(dmean):+9.1f} {len(quiet):>14} "
                  + (f"{statistics.median(quiet):+8.1f}" if quiet else f"{'-':>8}"))
    print("quiet pairs: those with no other tracer's BPF programs loaded before the untraced "
          "run or after the hooked one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
