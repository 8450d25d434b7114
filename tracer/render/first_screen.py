"""The first screen of ``iotrace report DIR``, which the live run prints at its end too: what a
user came for, without the histograms (``iotrace report DIR --histograms`` adds them).

What was traced and for how long, then (after the verdicts, which `tracer.render.findings`
renders) the training loop's time split, GPU idle time by cause where there is a GPU, and the
disks. Every number here comes from the trace's tables (`tracer.tracedir.sums`), so that the
live run, which reads its own trace back once it is closed (these small tables, and `files`
for the top files: `render.saved_files`), and the report print the same lines; without
pandas, which the live run does not load. The loop states are the vocabulary's, so a new
state shows up here without a change.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

from tracer.core.vocab import LOOP_STATES
from tracer.render.summary import split_lines
from tracer.tracedir import sums
from tracer.tracedir.tables import TraceTables, describe_targets


@dataclass(frozen=True)
class TraceLines:
    """The first screen's parts read from a trace: the header, the loop split (with GPU idle
    time by cause), the disks; `render.summary.render_summary` lays them out."""

    header: str
    loop: list[str]
    devices: list[str]


def trace_lines(trace: TraceTables, name: str, training_since: Mapping[int, int],
                gpu_idle: pa.Table | None = None) -> TraceLines:
    """The first screen's parts of `trace`, headed "Trace NAME". `training_since`: per main
    pid, when its training started (ns, from the diagnosis); `gpu_idle`: the GPU idle spans
    (by default the trace's ``gpu_idle`` rows)."""
    procs = trace.arrow("processes", sums.COLUMNS["processes"])
    loop = loop_lines(sums.loop_split(trace.arrow("loop"), training_since),
                      sums.rank_numbers(procs))
    if gpu_idle is None:
        gpu_idle = trace.arrow("gpu_idle", sums.COLUMNS["gpu_idle"])
    loop += gpu_idle_lines(sums.gpu_idle_by_cause(
        trace.arrow("gpu", sums.COLUMNS["gpu"]), gpu_idle))
    devices = sums.device_summary(trace.arrow("devices"), trace.arrow(
        "device_users", sums.COLUMNS["device_users"]))
    return TraceLines(header_text(trace, name, procs), loop, device_lines(devices))


def histograms_hint(directory: str) -> str:
    """The command that prints the latency histograms the first screen leaves out."""
    return f"iotrace report {shlex.quote(directory)} --histograms"


def header_text(trace: TraceTables, name: str, procs: pa.Table) -> str:
    """The first lines: the trace, its processes (`procs`: its ``processes`` rows), how it
    ended and the events lost; what was traced and for how long; why GPU sampling was off,
    when it was."""
    last = sums.last_processes(procs)
    lost = trace.meta.get("events_lost", 0)
    how = trace.meta.get("stop_reason")
    last_ns = None
    if trace.meta.get("stop_ns") is None:  # never closed: killed, or the disk filled up
        how = ("cut short: iotrace did not finish this trace, which holds what it wrote up to "
               "its last segments")
        stamps = [int(ts.max()) for t in ("loop", "latency")
                  if len(ts := sums.ints(trace.arrow(t, ["ts"]), "ts"))]
        last_ns = max(stamps) if stamps else None
    header = "\n".join([f"Trace {name}: {len(last)} processes ({how}); {lost} events lost.",
                        *traced_lines(trace, sums.role_counts(procs), last_ns)])
    for note in trace.meta.get("unavailable") or []:
        if note.startswith("GPU sampling off"):
            header += f"\n{note}."
    return header


def traced_lines(trace: TraceTables, roles: Mapping[str, int],
                 stop_ns: int | None = None) -> list[str]:
    """What was traced, with which processes (`roles`: how many had each role), when and for
    how long. `stop_ns` stands in for a trace that was never closed (its last row)."""
    procs = ", ".join(f"{n} {r}" for r, n in roles.items()) or "no processes"
    lines = [f"Traced: {describe_targets(trace)} ({procs})."]
    start, stop = trace.start_ns, trace.stop_ns if trace.stop_ns is not None else stop_ns
    if start is not None and stop is not None:
        begin = datetime.fromtimestamp(start // 10**9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        cut = "" if trace.stop_ns is not None else " (up to its last segment)"
        host = " ".join(str(trace.meta[k]) for k in ("host", "kernel") if trace.meta.get(k))
        lines.append(f"Duration: {(stop - start) / 1e9:.1f} s{cut}, from {begin}"
                     + (f", on {host}" if host else "") + ".")
    return lines


def loop_lines(split: list[dict], ranks: dict[int, int] | None = None) -> list[str]:
    """The training loop's time by state per main process, its states largest first
    (`sums.loop_split`); a rank's line (`ranks`: pid -> rank) says its rank, ranks in rank
    order."""
    if not split:
        return ["", "Training loop: none traced (no main process had a loop interval)."]
    return split_lines([(r["pid"], r["seconds"], r["startup_s"],
                         {s: r[f"{s}_pct"] for s in LOOP_STATES
                          if not math.isnan(r[f"{s}_pct"])})
                        for r in split], ranks)


def gpu_idle_lines(idle: list[dict]) -> list[str]:
    """Per GPU, its idle time and the loop states that caused it (`sums.gpu_idle_by_cause`);
    nothing without GPU samples."""
    if not idle:
        return []
    lines = ["", "GPU idle (hard idle spans) by cause:"]
    causes = [c for c in idle[0] if c.endswith("_s") and c not in ("sampled_s", "idle_s")]
    for r in idle:
        share = 100 * r["idle_s"] / r["sampled_s"] if r["sampled_s"] else 0.0
        why = ", ".join(f"{c[:-2]} {r[c]:.1f} s" for c in causes if r[c] > 0)
        lines.append(f"  GPU {r['gpu']}: idle {r['idle_s']:.1f} s of {r['sampled_s']:.1f} s "
                     f"sampled ({share:.0f} %)" + (f": {why}" if why else ""))
    return lines


def device_lines(devices: list[dict]) -> list[str]:
    """The disks that did I/O, iostat -x style means over the trace (`sums.device_summary`)."""
    if not devices:
        return ["", "Devices: no disk I/O during the trace."]
    # who else read the disk: a column when the trace counted its users (device_users)
    others = any(not math.isnan(r["others_read_pct"]) for r in devices)
    lines = ["", "Devices (means over the trace, as iostat -x"
             + ("; others: % of the reads' bytes by untraced processes" if others else "") + "):",
             f"  {'device':<12} {'r/s':>8} {'rkB/s':>10} {'w/s':>8} {'wkB/s':>10} "
             f"{'await':>9} {'%util':>6} {'max':>6}" + (f" {'others':>7}" if others else "")]
    for r in devices:
        wait = "-" if math.isnan(r["await_ms"]) else f"{r['await_ms']:.2f} ms"
        line = (f"  {r['device']:<12} {r['r_s']:>8.1f} {r['rkb_s']:>10.1f} {r['w_s']:>8.1f} "
                f"{r['wkb_s']:>10.1f} {wait:>9} {r['util_pct']:>6.1f} "
                f"{r['max_util_pct']:>6.1f}")
        if others:
            pct = r["others_read_pct"]
            line += f" {'-' if math.isnan(pct) else f'{pct:.0f} %':>7}"
        lines.append(line)
    return lines
