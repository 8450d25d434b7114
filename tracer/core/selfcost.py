"""What iotrace itself costs: its BPF programs' run counts and times, what it lost, its own CPU.

The session reads the kernel's side through the loader (per-program statistics while
BPF_ENABLE_STATS is held, the ring buffer's lost events, the refused map inserts) and its own
side here (`TracerMeter`: CPU time and peak RSS of the tracer process); `SelfCost` is one
immutable reading of both, which every output renders: meta.json (`self_cost`), the summary
and `iotrace report`, the live view's header, and the `iotrace_self_*` Prometheus metrics.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field

from tracer.core.abi import MAP_ROLLED_UP
from tracer.core.histogram import format_bytes, format_ns
from tracer.core.rollup import KEEP_FILES, KEEP_SHARE_PCT

TOP_PROGRAMS = 5  # programs listed in the summary, most time first
# --bpf-stats: "sampled" (default) counts the programs' runs during STATS_SHARE of every
# interval, from the end of its reading, "always" during the whole run, "off" never. The
# kernel reads the clock twice per program run while it counts (about 80 ns per run on the
# 2-vCPU VMs of docs/benchmarks.md, more than iotrace's syscall programs take), so counting
# all the time would double the cost it reports; 2 % of every interval give the same ns per
# run and rates, at a fiftieth of that, and from the first interval on (a tenth cost a traced
# page-cache pread about 9 ns more: docs/benchmarks.md).
STATS_MODES = ("sampled", "always", "off")
STATS_SHARE = 0.02


@dataclass(frozen=True)
class ProgramCost:
    """One loaded BPF program's runs since load (counted only while BPF stats were on)."""

    object: str  # the stage it was written in (bpf/STAGE.bpf.c): proc, syscall, pagecache, block, sched
    name: str  # its name in the object (libbpf's, not cut to 15 characters)
    section: str  # its ELF section: the attach point ("raw_tp/block_rq_issue", "tracepoint")
    run_cnt: int
    run_time_ns: int
    recursion_misses: int | None = None  # runs skipped: the program was already running on that
    # CPU (None: the kernel does not count them, < 5.12)

    @property
    def ns_per_run(self) -> float | None:
        return self.run_time_ns / self.run_cnt if self.run_cnt else None

    @property
    def label(self) -> str:
        return f"{self.object}/{self.name}"


@dataclass(frozen=True)
class TracerCpu:
    """The tracer process's own CPU and memory (every thread of it)."""

    cpu_s: float  # CPU seconds, user + system, since the process started (with its helpers')
    setup_cpu_s: float  # of which before tracing started (interpreter, imports, loading)
    tracing_s: float  # wall seconds since tracing started
    cpu_pct: float | None  # CPU while tracing, % of one core (None: no time has passed)
    interval_cpu_pct: float | None  # the same over the last interval
    peak_rss_bytes: int


_helper_cpu_s = 0.0  # CPU of iotrace's helper processes that have ended (add_helper_cpu)


def add_helper_cpu(seconds: float) -> None:
    """Counts `seconds` of CPU that a helper process of the tracer's used (a child that merges
    segments: sinks/parquet.MergeChild) as the tracer's own."""
    global _helper_cpu_s
    _helper_cpu_s += seconds


class TracerMeter:
    """Measures the tracer process from when tracing starts (construct it then)."""

    def __init__(self) -> None:
        self.setup_cpu_s = time.process_time() + _helper_cpu_s
        self.start_wall_s = time.monotonic()
        self._last = (self.setup_cpu_s, self.start_wall_s)

    def read(self, advance: bool = True) -> TracerCpu:
        """Now; `advance` starts the next interval (the live readings), False leaves it."""
        cpu, wall = time.process_time() + _helper_cpu_s, time.monotonic()
        last_cpu, last_wall = self._last
        if advance:
            self._last = (cpu, wall)
        tracing_s = wall - self.start_wall_s
        return TracerCpu(
            cpu_s=cpu, setup_cpu_s=self.setup_cpu_s, tracing_s=tracing_s,
            cpu_pct=_pct(cpu - self.setup_cpu_s, tracing_s),
            interval_cpu_pct=_pct(cpu - last_cpu, wall - last_wall),
            peak_rss_bytes=peak_rss_bytes())


def peak_rss_bytes() -> int:
    """iotrace's peak resident memory: VmHWM, its own address space's. getrusage's ru_maxrss
    would keep, across exec, the pages of the process that forked iotrace (a notebook or a
    benchmark holding a million paths made iotrace "peak" at 450 MiB)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _pct(cpu_s: float, wall_s: float) -> float | None:
    return 100.0 * cpu_s / wall_s if wall_s > 0 else None


@dataclass(frozen=True)
class SelfCost:
    """One reading of iotrace's own cost, cumulative since the programs were loaded."""

    programs: tuple[ProgramCost, ...]
    events_lost: int
    map_full_drops: dict[str, int]  # by map (abi.MAP_FULL_MAPS)
    tracer: TracerCpu
    stats_unavailable: str | None = None  # why there are no per-program counts; None: counted
    stats_before: int | None = None  # kernel.bpf_stats_enabled before the run (restored after)
    map_entries: dict[str, int] = field(default_factory=dict)  # max_entries by map
    stats_seconds: float = 0.0  # seconds the kernel counted the programs' runs (see STATS_MODES)
    stats_mode: str = "always"
    # traced block requests whose end no completion program saw (kernel/maps.Maps.block_unseen):
    # in no histogram, since their latency is unknown
    block_unseen_requests: int = 0
    block_unseen_bytes: int = 0
    # files the kernel sent no path for (one per folder is sent) or whose record was lost:
    # named from their folder's listing, or left unnamed
    paths_recovered: int = 0
    paths_unknown: int = 0
    # the files table's roll-up (core/rollup.py): per-file rows added into folder rows, the
    # folder rows, and operations the kernel counted per folder (its per-file table full);
    # the files of file_rows_rolled_up that the kernel folded at their close
    file_rows_rolled_up: int = 0
    folder_rows: int = 0
    folder_ops_kernel: int = 0
    files_folded_kernel: int = 0

    @property
    def bpf_cpu_pct(self) -> float | None:
        """BPF programs' time while counted, as % of one CPU: the share of the host's CPU that
        iotrace's kernel side takes (every CPU's runs together)."""
        if self.stats_unavailable is not None or self.stats_seconds <= 0:
            return None
        return 100.0 * self.run_time_ns / 1e9 / self.stats_seconds

    @property
    def counted_share(self) -> float | None:
        """The part of the tracing time the counts cover (1.0: all of it)."""
        if self.tracer.tracing_s <= 0:
            return None
        return min(1.0, self.stats_seconds / self.tracer.tracing_s)

    @property
    def run_cnt(self) -> int:
        return sum(p.run_cnt for p in self.programs)

    @property
    def run_time_ns(self) -> int:
        return sum(p.run_time_ns for p in self.programs)

    @property
    def ns_per_run(self) -> float | None:
        return self.run_time_ns / self.run_cnt if self.run_cnt else None

    @property
    def drops(self) -> int:
        """Inserts refused whose operations' counts are missing (file_stats' are counted per
        folder instead: abi.MAP_ROLLED_UP)."""
        return sum(n for name, n in self.map_full_drops.items() if name not in MAP_ROLLED_UP)

    def top_programs(self, n: int = TOP_PROGRAMS) -> list[ProgramCost]:
        """The programs that ran, most time first."""
        ran = [p for p in self.programs if p.run_cnt]
        return sorted(ran, key=lambda p: (-p.run_time_ns, p.label))[:n]

    def meta(self) -> dict:
        """The `self_cost` object of meta.json (SelfCost.from_meta reads it back)."""
        t = self.tracer
        return {
            "bpf_stats": {"enabled": self.stats_unavailable is None,
                          "unavailable": self.stats_unavailable,
                          "previous_sysctl": self.stats_before, "mode": self.stats_mode,
                          "seconds_counted": round(self.stats_seconds, 6),
                          "cpu_pct": _round(self.bpf_cpu_pct)},
            "programs": [
                {"object": p.object, "name": p.name, "section": p.section, "run_cnt": p.run_cnt,
                 "run_time_ns": p.run_time_ns, "ns_per_run": _round(p.ns_per_run),
                 "recursion_misses": p.recursion_misses} for p in self.programs],
            "totals": {"run_cnt": self.run_cnt, "run_time_ns": self.run_time_ns,
                       "ns_per_run": _round(self.ns_per_run)},
            "events_lost": self.events_lost,
            "file_paths_lost": {"recovered": self.paths_recovered, "unknown": self.paths_unknown},
            "map_full_drops": dict(self.map_full_drops),
            "files_rolled_up": {"file_rows": self.file_rows_rolled_up,
                                "folder_rows": self.folder_rows,
                                "kernel_folder_ops": self.folder_ops_kernel,
                                "kernel_folded_files": self.files_folded_kernel},
            "block_completions_unseen": {"requests": self.block_unseen_requests,
                                         "bytes": self.block_unseen_bytes},
            "map_entries": dict(self.map_entries),
            "tracer": {"cpu_seconds": round(t.cpu_s, 6),
                       "setup_cpu_seconds": round(t.setup_cpu_s, 6),
                       "tracing_seconds": round(t.tracing_s, 6),
                       "cpu_pct": _round(t.cpu_pct), "peak_rss_bytes": t.peak_rss_bytes},
        }

    @classmethod
    def from_meta(cls, d: dict) -> SelfCost:
        """The reading saved in meta.json, for `iotrace report` (totals are recomputed)."""
        stats = d.get("bpf_stats") or {}
        t = d.get("tracer") or {}
        programs = tuple(
            ProgramCost(str(p.get("object")), str(p.get("name")), str(p.get("section")),
                        int(p.get("run_cnt") or 0), int(p.get("run_time_ns") or 0),
                        p.get("recursion_misses")) for p in d.get("programs") or [])
        tracer = TracerCpu(float(t.get("cpu_seconds") or 0), float(t.get("setup_cpu_seconds") or 0),
                           float(t.get("tracing_seconds") or 0), t.get("cpu_pct"), None,
                           int(t.get("peak_rss_bytes") or 0))
        unseen = d.get("block_completions_unseen") or {}
        paths = d.get("file_paths_lost") or {}
        rolled = d.get("files_rolled_up") or {}
        unavailable = stats.get("unavailable")
        if not stats.get("enabled", True) and not unavailable:
            unavailable = "BPF stats were off"
        return cls(programs, int(d.get("events_lost") or 0),
                   {str(k): int(v) for k, v in (d.get("map_full_drops") or {}).items()}, tracer,
                   unavailable, stats.get("previous_sysctl"),
                   {str(k): int(v) for k, v in (d.get("map_entries") or {}).items()},
                   float(stats.get("seconds_counted") or 0), str(stats.get("mode") or "always"),
                   int(unseen.get("requests") or 0), int(unseen.get("bytes") or 0),
                   int(paths.get("recovered") or 0), int(paths.get("unknown") or 0),
                   int(rolled.get("file_rows") or 0), int(rolled.get("folder_rows") or 0),
                   int(rolled.get("kernel_folder_ops") or 0),
                   int(rolled.get("kernel_folded_files") or 0))


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def format_count(n: float) -> str:
    """Run counts: 950, 12.3 k, 4.56 M, 1.20 G."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f}"


def _pct_text(pct: float | None) -> str:
    return "-" if pct is None else f"{pct:.1f} %"


def render_self_cost(cost: SelfCost, top: int = TOP_PROGRAMS) -> list[str]:
    """The summary's block: one line of totals, then the programs that took most time."""
    t = cost.tracer
    if cost.stats_unavailable is None:
        avg, share, counted = cost.ns_per_run, cost.bpf_cpu_pct, cost.counted_share
        bpf = (f"BPF {format_count(cost.run_cnt)} runs, {format_ns(cost.run_time_ns)}"
               + (f" ({avg:.0f} ns/run avg)" if avg is not None else "")
               + f" in {cost.stats_seconds:.1f} s counted")
        if counted is not None and counted < 0.995:
            bpf += f" ({counted * 100:.0f} % of the run, {cost.stats_mode})"
        if share is not None:
            bpf += f" = {share:.2f} % of one CPU"
    else:
        bpf = f"per-program cost unavailable: {cost.stats_unavailable}"
    drops = f"{cost.drops} map-full drops"
    full = [f"{name} {n}" for name, n in cost.map_full_drops.items()
            if n and name not in MAP_ROLLED_UP]
    if full:
        drops += f" ({', '.join(full)}: counts of those operations are missing)"
    if cost.file_rows_rolled_up or cost.folder_ops_kernel:
        drops += (f"; files table: {cost.file_rows_rolled_up} per-file rows added up into "
                  f"{cost.folder_rows} folder rows (files under {KEEP_SHARE_PCT} % of their "
                  f"process's time, bytes and pages in an op, past {KEEP_FILES} per process, op "
                  "and interval")
        if cost.files_folded_kernel:
            drops += f"; {cost.files_folded_kernel} of them by the kernel at their close"
        drops += ")"
        if cost.folder_ops_kernel:
            drops += (f", {cost.folder_ops_kernel} operations counted per folder by the kernel "
                      "(its per-file table was full)")
    if cost.block_unseen_requests:
        drops += (f"; {cost.block_unseen_requests} block requests "
                  f"({format_bytes(cost.block_unseen_bytes)}) ended unseen: the kernel ran no "
                  "completion program for them, so the block layer's counts are short by them")
    lost_paths = ""
    if cost.paths_unknown:
        lost_paths = f" ({cost.paths_unknown} files without a path)"
    lines = ["", f"iotrace's own cost: {bpf}; tracer {_pct_text(t.cpu_pct)} of one core "
             f"({t.cpu_s:.2f} s CPU, {t.setup_cpu_s:.2f} s of it start-up), peak RSS "
             f"{format_bytes(t.peak_rss_bytes)}; {cost.events_lost} events lost{lost_paths}, "
             f"{drops}."]
    ranked = cost.top_programs(top)
    if ranked:
        width = max(len(p.label) for p in ranked)
        lines.append(f"  {'program':<{width}} {'runs':>9} {'time':>9} {'ns/run':>7}")
        for p in ranked:
            lines.append(f"  {p.label:<{width}} {format_count(p.run_cnt):>9} "
                         f"{format_ns(p.run_time_ns):>9} {p.ns_per_run:>7.0f}")
    return lines
