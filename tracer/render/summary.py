"""The end-of-run summary: the verdicts and what they rest on first, then per process and layer,
biolatency-style histograms with p50/p99."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tracer.core.diagnosis import Finding
from tracer.core.histogram import MaxSeen, format_bytes, format_ns, percentile_ns, render
from tracer.core.model import FileKey, FileLookup, FileTotals, ProcessLookup, Series
from tracer.core.selfcost import SelfCost, render_self_cost
from tracer.core.units import PAGE_SIZE
from tracer.render.findings import render_findings

HISTOGRAM_MIN_OPS = 10  # fewer operations get their one summary line only
TOP_FILES = 10
LAYER_ORDER = {"syscall": 0, "pagecache": 1, "block_queue": 2, "block": 3}


def _what(key: Series) -> str:
    if key.layer == "syscall":
        return f"syscall {key.op} ({key.target})"
    if key.layer == "pagecache":
        return "page cache misses"
    where = key.device
    label = "block queue" if key.layer == "block_queue" else "block"
    return f"{label} {key.op} on {where} ({key.attribution})"


def render_top_files(file_totals: Mapping[FileKey, FileTotals], files: FileLookup,
                     n: int = TOP_FILES, count: int | None = None) -> list[str]:
    """Like filetop, with full paths: the files the traced processes spent most time on.
    `count`: how many (process, file) pairs there are, where `file_totals` holds only the top
    ones (by default, as many as it holds)."""
    if not file_totals:
        return []
    ranked = sorted(file_totals.items(), key=lambda kv: (-kv[1].latency_sum_ns,
                                                         -sum(kv[1].bytes.values())))[:n]
    count = len(file_totals) if count is None else count
    lines = ["", f"Top files by time spent in syscalls (of {count}):",
             f"  {'time':>9} {'reads':>7} {'read':>10} {'writes':>7} {'written':>10} "
             f"{'missed':>10} {'hit':>5} {'pid':>7}  path"]
    for (pid, dev, ino, gen), t in ranked:
        info = files.get(dev, ino, gen, pid, t.dir_ino)
        nread = t.bytes.get("read", 0)
        hit = (f"{max(0.0, 1 - t.pages_missed * PAGE_SIZE / nread) * 100:.0f}%"
               if nread else "-")
        lines.append(
            f"  {format_ns(t.latency_sum_ns):>9} {t.ops.get('read', 0):>7} "
            f"{format_bytes(nread):>10} {t.ops.get('write', 0):>7} "
            f"{format_bytes(t.bytes.get('write', 0)):>10} "
            f"{format_bytes(t.pages_missed * PAGE_SIZE):>10} {hit:>5} {pid:>7}  {info.path}")
    return lines


def max_seen(file_totals: Mapping[FileKey, FileTotals] | None) -> MaxSeen[tuple[int, str]]:
    """The slowest file syscall per (pid, op), from the whole-trace file totals."""
    seen: MaxSeen[tuple[int, str]] = MaxSeen()
    for (pid, _dev, _ino, _gen), t in (file_totals or {}).items():
        seen.merge(t.slowest, lambda op, pid=pid: (pid, op))
    return seen


def split_lines(rows: list[tuple[int, float, float, dict[str, float]]],
                ranks: dict[int, int] | None = None,
                names: dict[int, str] | None = None) -> list[str]:
    """The summary's loop split: per loop (pid, seconds of training, seconds of start-up, percent
    by state), its states largest first; a rank's line (`ranks`: pid -> rank) says its rank,
    the ranks first, in rank order. `names`: what a line calls its loop, where not "pid P" or
    "rank R, pid P" (the ranks of traces joined from several nodes)."""
    ranks, names = ranks or {}, names or {}
    lines = ["", "Training loop time (after start-up; the states are in docs/diagnosis.md):"]
    for pid, seconds, startup_s, pcts in sorted(
            rows, key=lambda r: (r[0] not in ranks, ranks.get(r[0], 0), r[0])):
        shares = sorted(((pct, s) for s, pct in pcts.items()), key=lambda x: -x[0])
        shown = [f"{name} {pct:.0f} %" for pct, name in shares if pct >= 0.5]
        if len(shown) < len(shares):
            shown.append("the rest 0 %")
        parts = ", ".join(shown) if shares else "no time"
        startup = f"; start-up {startup_s:.1f} s before it" if startup_s > 0 else ""
        who = names.get(pid) or (f"rank {ranks[pid]}, pid {pid}" if pid in ranks else f"pid {pid}")
        lines.append(f"  {who} ({seconds:.1f} s): {parts}{startup}")
    return lines


def render_summary(totals: Mapping[Series, np.ndarray], processes: ProcessLookup,
                   header: str, file_totals: Mapping[FileKey, FileTotals] | None = None,
                   files: FileLookup | None = None, findings: list[Finding] | None = None,
                   cost: SelfCost | None = None, startup: list[str] | None = None,
                   loop: list[str] | None = None, devices: list[str] | None = None,
                   histograms: str | None = None, files_count: int | None = None) -> str:
    """Text for the terminal (and `iotrace report`), what a user came for first: the header,
    the verdicts, the loop's time split (`loop`), the start-up, the top files, the disks
    (`devices`); then, when `histograms` is None, as biolatency prints them, one block per
    process with one histogram per layer/op/target, most operations first within a process,
    else one line saying how to see them (`histograms`: the command that shows them); iotrace's
    own cost last. `files_count`: how many (process, file) pairs there are, where
    `file_totals` holds only the top ones (then with `histograms` given)."""
    lines = [header]
    lines.extend(render_findings(findings or []))
    lines.extend(loop or [])
    lines.extend(startup or [])  # after the verdicts, which leave the start-up out
    if file_totals and files is not None:  # (both callers pass the table with the totals)
        lines.extend(render_top_files(file_totals, files, count=files_count))
    lines.extend(devices or [])
    if histograms is None:
        lines.extend(render_histograms(totals, processes, file_totals, files))
    else:
        lines.extend(["", f"Latency histograms per process and layer: {histograms}"])
    if cost is not None:
        lines.extend(render_self_cost(cost))
    return "\n".join(lines)


def render_histograms(totals: Mapping[Series, np.ndarray], processes: ProcessLookup,
                      file_totals: Mapping[FileKey, FileTotals] | None = None,
                      files: FileLookup | None = None) -> list[str]:
    """Per process, one summary line and a log2 histogram per layer/op/target series."""
    lines: list[str] = ["", "Latency per process and layer:"]
    seen = max_seen(file_totals)
    by_pid: dict[int, list[tuple[Series, np.ndarray]]] = {}
    for key, h in totals.items():
        by_pid.setdefault(key.pid, []).append((key, h))
    if not by_pid:
        lines.append("No I/O was traced (the targets did no read/write/fsync syscalls and no block I/O).")
    for pid in sorted(by_pid):
        proc = processes.get(pid)
        comm = files.redact.comm(proc.comm) if proc and files else proc.comm if proc else ""
        name = f"{comm} ({proc.role})" if proc else "?"
        parent = f", parent {proc.ppid}" if proc and not proc.is_target else ""
        lines.append("")
        lines.append(f"pid {pid} {name}{parent}")
        entries = sorted(by_pid[pid], key=lambda kh: (LAYER_ORDER.get(kh[0].layer, 9),
                                                      -int(kh[1][0].sum())))
        for key, h in entries:
            counts = [int(c) for c in h[0]]
            n, nbytes = sum(counts), int(h[1].sum())
            if key.layer == "pagecache":  # pages, no latency
                lines.append(f"  {_what(key)}: {n} pages, {format_bytes(nbytes)}")
                continue
            top = (seen.known({(key.pid, key.op): n})
                   if key.layer == "syscall" and key.target == "file" else None)
            lines.append(
                f"  {_what(key)}: {n} ops, {format_bytes(nbytes)}, "
                f"p50 {format_ns(percentile_ns(counts, 50, top))}, "
                f"p99 {format_ns(percentile_ns(counts, 99, top))}"
                + (f", max {format_ns(top)}" if top else "")
            )
            if n >= HISTOGRAM_MIN_OPS:
                lines.extend("    " + row for row in render(counts))
    return lines
