"""The live view's panes: rich renderables over a `ViewState` (what the view keeps of the run).

`ViewState.update(snapshot, loop_rows, findings, events_lost)` is called once per interval with
the snapshot every sink gets; the panes only read the state, so rendering twice gives the same
text. What each pane shows:

- `Header`: targets, processes per role, elapsed time, interval, events lost, sort/layer/role;
- `FindingPane`: the leading (most severe) current finding, its summary and advice;
- `ProcessPane`: one row per process, iotop-like, rates of the last interval and latency
  percentiles over the window; for each main process the training loop's state bar;
- `HistogramPane`: biolatency-style histogram of the selected layer and role over the window;
- `FilesPane`: files by time spent in syscalls over the window (filetop-like);
- `DevicePane`: `iostat -x` columns per disk for the last interval, and, when the run counts
  who used each disk (`device_users`), the share of its read bytes that untraced processes
  read and the one that read most;
- `SystemPane`: `dstat -cmnd` columns, one line per interval of the window (dstat scrolls).

Units: MB is 2**20 bytes (as `iostat -m`), kB 1024 bytes (as iostat); latencies are log2
histogram percentiles (see tracer.core.histogram: exact to a factor of two, interpolated within).
Definitions of file I/O, block I/O and "blocked" are in tracer.ui.stats.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tracer.core.histogram import format_ns, percentile_ns
from tracer.core.model import Snapshot
from tracer.core.units import MAX_SLOTS, slot_bounds_ns, slot_of
from tracer.core.vocab import AGENT, CHILD, DATALOADER_WORKER, LOOP_STATES, MAIN, RANK, ROLES
from tracer.ui import stats
from tracer.ui.fmt import clock, dstat_bytes, elapsed, short_ns

SORTS = ("read", "write", "latency")
"""Process orders, cycled by the `s` key: read MB/s, write MB/s, syscall p99 (most first)."""
LAYERS = ("syscall", "block", "block_queue")
"""Histogram layers, cycled by `l`: file syscalls, block service (issue->complete), block queue
(insert->issue)."""
ROLE_FILTERS = (None, MAIN, RANK, DATALOADER_WORKER, CHILD)
"""Histogram roles, cycled by `r` (None: every traced process)."""

MB = 1 << 20
TOP_FILES = 5
BAR_WIDTH = 20  # the loop's state bar
HIST_BAR = 24  # the histogram's bars

ROLE_SHORT = {MAIN: "main", RANK: "rank", AGENT: "agent", DATALOADER_WORKER: "worker",
              CHILD: "child", None: "?"}
ROLE_STYLE = {MAIN: "bold", RANK: "bold", AGENT: "dim", DATALOADER_WORKER: "cyan", CHILD: "dim",
              None: "dim"}
STATE_LABEL = {"data_wait_io": "data wait I/O", "data_wait_cpu": "data wait CPU",
               "data_wait_network": "data wait network", "sync_loading": "sync loading",
               "sync_writes": "sync writes", "checkpoint": "checkpoint",
               "collective_wait": "collective wait", "gpu_wait": "GPU wait",
               "device_copy": "device copy", "compute": "compute", "other": "other"}
STATE_GLYPH = {"data_wait_io": "I", "data_wait_cpu": "C", "data_wait_network": "N",
               "sync_loading": "L", "sync_writes": "W", "checkpoint": "K", "collective_wait": "R",
               "gpu_wait": "G", "device_copy": "D", "compute": "=",
               "other": "."}  # without colour
STATE_STYLE = {"data_wait_io": "red", "data_wait_cpu": "yellow", "data_wait_network": "cyan",
               "sync_loading": "magenta", "sync_writes": "bright_magenta", "checkpoint": "blue",
               "collective_wait": "bright_yellow", "gpu_wait": "bright_green",
               "device_copy": "bright_cyan", "compute": "green", "other": "bright_black"}
LAYER_TITLE = {"syscall": "file syscalls", "block": "block service (issue->complete)",
               "block_queue": "block queue (insert->issue)"}


@dataclass(frozen=True)
class ProcRow:
    """One process as the process pane shows it."""

    pid: int
    comm: str
    role: str | None
    read_mb_s: float
    write_mb_s: float
    ops_s: float
    syscall_p50_ns: float | None
    syscall_p99_ns: float | None
    block_p50_ns: float | None
    block_p99_ns: float | None
    blocked_pct: float
    loop: dict[str, float] | None  # loop shares (percent by state), main processes only
    rank: int | None = None  # a rank's (torchrun, DDP)


class ViewState:
    """What the live view keeps of a run: the last `window` snapshots, the loop rows and findings
    of the last interval, and the user's choices (sort, layer, role)."""

    def __init__(self, targets: str = "", interval_s: float = 1.0, window: int = 5,
                 started_ns: int | None = None) -> None:
        self.targets = targets  # what is traced, as the header says it ("PID 42", a command)
        self.interval_s = interval_s
        self.window = window
        self.started_ns = started_ns  # UTC ns; None: the start of the first snapshot
        self.snapshots: deque = deque(maxlen=window)
        self.loop_rows: list[dict] = []
        self.findings: list = []
        self.events_lost = 0
        self.sort = SORTS[0]
        self.layer = LAYERS[0]
        self.role: str | None = None

    # -- input ----------------------------------------------------------------------------------
    def update(self, snapshot, loop_rows: Iterable[dict] = (), findings: Sequence = (),
               events_lost: int = 0) -> None:
        """One interval: its snapshot, its `loop` rows, the current findings (most severe
        first, as Diagnosis.findings returns them) and the ring buffer's lost-event count."""
        if self.started_ns is None:
            self.started_ns = snapshot.ts_ns - stats.interval_ns(snapshot, self.interval_s)
        self.snapshots.append(snapshot)
        self.loop_rows = list(loop_rows)
        self.findings = list(findings)
        self.events_lost = events_lost

    def cycle_sort(self) -> str:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        return self.sort

    def cycle_layer(self) -> str:
        self.layer = LAYERS[(LAYERS.index(self.layer) + 1) % len(LAYERS)]
        return self.layer

    def cycle_role(self) -> str | None:
        self.role = ROLE_FILTERS[(ROLE_FILTERS.index(self.role) + 1) % len(ROLE_FILTERS)]
        return self.role

    # -- derived --------------------------------------------------------------------------------
    @property
    def last(self) -> Snapshot | None:
        return self.snapshots[-1] if self.snapshots else None

    @property
    def elapsed_s(self) -> float:
        if self.last is None or self.started_ns is None:
            return 0.0
        return (self.last.ts_ns - self.started_ns) / 1e9

    def process_rows(self) -> list[ProcRow]:
        """The processes of the last interval, in the chosen order."""
        last = self.last
        if last is None:
            return []
        itv = stats.interval_ns(last, self.interval_s)
        now = stats.processes(last)
        window: dict[int, stats.ProcIO] = {}
        for snap in self.snapshots:
            for pid, pio in stats.processes(snap).items():
                if pid in now:
                    window.setdefault(pid, stats.ProcIO(pid)).merge(pio)
        loops = {r["pid"]: stats.loop_shares([r]) for r in self.loop_rows}
        ranks = {r["pid"]: r.get("rank") for r in self.loop_rows}
        rows = []
        for pid, pio in now.items():
            w = window[pid]
            rows.append(ProcRow(
                pid, pio.comm, pio.role, pio.read_bytes / MB / (itv / 1e9),
                pio.write_bytes / MB / (itv / 1e9), pio.ops / (itv / 1e9),
                percentile_ns(w.syscall, 50), percentile_ns(w.syscall, 99),
                percentile_ns(w.block, 50), percentile_ns(w.block, 99),
                stats.blocked_pct(pio.iowait_ns, itv), loops.get(pid), ranks.get(pid)))
        key = {"read": lambda r: (-r.read_mb_s, r.pid),
               "write": lambda r: (-r.write_mb_s, r.pid),
               "latency": lambda r: (-(r.syscall_p99_ns or -1), r.pid)}[self.sort]
        return sorted(rows, key=key)

    def role_counts(self) -> dict[str | None, int]:
        if self.last is None:
            return {}
        out: dict[str | None, int] = {}
        for p in stats.processes(self.last).values():
            out[p.role] = out.get(p.role, 0) + 1
        return out

    def layer_histogram(self) -> tuple[list[int], dict[str, int]]:
        """Counts per log2 slot of the selected layer and role over the window, and ops by op."""
        counts = [0] * MAX_SLOTS
        by_op: dict[str, int] = {}
        for snap in self.snapshots:
            for r in snap.latency:
                if r["layer"] != self.layer or (self.layer == "syscall" and r.get("target") != "file"):
                    continue
                if self.role is not None and r.get("role") != self.role:
                    continue
                counts[slot_of(r["bucket_lo_ns"])] += r["count"]
                by_op[r["op"]] = by_op.get(r["op"], 0) + r["count"]
        return counts, by_op


# -- panes --------------------------------------------------------------------------------------
def _role_text(role: str | None) -> Text:
    return Text(ROLE_SHORT.get(role, role or "?"), style=ROLE_STYLE.get(role, ""))


def _window_label(state: ViewState) -> str:
    n = len(state.snapshots)
    return "last interval" if n == 1 else f"last {n} intervals"


class Header:
    """Two lines: what is traced and for how long; processes per role and the user's choices."""

    def __init__(self, state: ViewState) -> None:
        self.state = state

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.state
        line1 = Text.assemble(
            ("iotrace", "bold"), "  ", (s.targets or "-", "bold cyan"),
            f"   elapsed {elapsed(s.elapsed_s)}   interval {s.interval_s:g} s   events lost ",
            (str(s.events_lost), "bold red" if s.events_lost else ""))
        cost = getattr(s.last, "cost", None)
        if cost is not None and cost.tracer.interval_cpu_pct is not None:
            line1.append(f"   own CPU {cost.tracer.interval_cpu_pct:.1f} %")
            if cost.drops:
                line1.append(f"   map-full drops {cost.drops}", "bold red")
        counts = s.role_counts()
        roles = ", ".join(f"{counts[r]} {r or '?'}" for r in (*ROLES, None) if counts.get(r))
        line2 = Text(f"{roles or 'no process yet'}  sort: {s.sort}  layer: {s.layer}  "
                     "q quit, s sort, l layer, r role")
        line1.no_wrap = line2.no_wrap = True
        line1.overflow = line2.overflow = "ellipsis"
        yield line1
        yield line2


class FindingPane:
    """The leading finding: the most severe of the current ones, with its advice."""

    def __init__(self, state: ViewState) -> None:
        self.state = state

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        findings = self.state.findings
        if not findings:
            yield Panel(Text("no finding yet: the diagnosis needs a few intervals"),
                        title="finding", title_align="left", box=box.ROUNDED)
            return
        f = findings[0]
        style = "bold red" if f.severity >= 50 else "bold yellow" if f.severity >= 20 else "bold green"
        who = f" (pid {f.pid})" if f.pid is not None else ""
        body = Text.assemble((f"{f.kind}{who}: ", style), f.summary, "\n", ("advice: ", "bold"),
                             f.advice)
        also = f" (also: {', '.join(g.kind for g in findings[1:])})" if len(findings) > 1 else ""
        yield Panel(body, title=Text(f"finding, severity {f.severity}{also}"), title_align="left",
                    border_style=style.split()[-1], box=box.ROUNDED)


def loop_bar(shares: dict[str, float], width: int = BAR_WIDTH, color: bool = True) -> Text:
    """A stacked bar of the loop's states, `width` cells split by largest remainder; with
    `color` each state is a coloured block, without it a letter (STATE_GLYPH)."""
    exact = {s: shares.get(s, 0.0) * width / 100.0 for s in LOOP_STATES}
    cells = {s: int(exact[s]) for s in LOOP_STATES}
    order = sorted(LOOP_STATES, key=lambda s: (-(exact[s] - cells[s]), LOOP_STATES.index(s)))
    for s in order[: width - sum(cells.values())]:
        cells[s] += 1
    bar = Text()
    for s in LOOP_STATES:
        if cells[s]:
            bar.append(("█" if color else STATE_GLYPH[s]) * cells[s], style=STATE_STYLE[s])
    return bar


class ProcessPane:
    """iotop-like: one row per process of the last interval; the loop bars under the table."""

    def __init__(self, state: ViewState) -> None:
        self.state = state

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.state
        color = not console.no_color and console.color_system is not None
        arrow = {k: "▼" if s.sort == k else "" for k in SORTS}
        rows = s.process_rows()
        if not rows:
            yield Text("processes: no traced process did anything yet", style="dim")
            return
        t = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False,
                  title=f"processes (latency: {_window_label(s)})", title_justify="left",
                  title_style="bold")
        t.add_column("PID", justify="right")
        t.add_column("ROLE")
        t.add_column("COMM", no_wrap=True, overflow="ellipsis", max_width=15)
        t.add_column(f"READ{arrow['read']}\nMB/s", justify="right")
        t.add_column(f"WRITE{arrow['write']}\nMB/s", justify="right")
        t.add_column("OPS\n/s", justify="right")
        t.add_column("SYSCALL\np50", justify="right")
        t.add_column(f"SYSCALL\np99{arrow['latency']}", justify="right")
        t.add_column("BLOCK\np50", justify="right")
        t.add_column("BLOCK\np99", justify="right")
        t.add_column("IO\nwait%", justify="right")
        for r in rows:
            t.add_row(str(r.pid), _role_text(r.role), r.comm, f"{r.read_mb_s:.1f}",
                      f"{r.write_mb_s:.1f}", f"{r.ops_s:.0f}", short_ns(r.syscall_p50_ns),
                      short_ns(r.syscall_p99_ns), short_ns(r.block_p50_ns),
                      short_ns(r.block_p99_ns),
                      Text(f"{r.blocked_pct:.0f}", style="red" if r.blocked_pct >= 50 else ""))
        yield t
        loops = [r for r in rows if r.loop]
        # one row per rank, in rank order, then the mains
        for r in sorted(loops, key=lambda r: (r.rank is None, r.rank or 0, r.pid)):
            line = Text(f"loop {r.pid:>7} " if r.rank is None else f"rank {r.rank:<2} {r.pid:>7} ")
            line.append_text(loop_bar(r.loop, color=color))
            parts = [f"{STATE_LABEL[st]} {r.loop[st]:.0f}%" for st in LOOP_STATES if r.loop[st] >= 0.5]
            line.append("  " + ", ".join(parts))
            line.no_wrap, line.overflow = True, "ellipsis"
            yield line
        if loops and not color:
            yield Text("      " + ", ".join(f"{STATE_GLYPH[st]} {STATE_LABEL[st]}" for st in LOOP_STATES),
                       style="dim")


def histogram_lines(counts: Sequence[int], bar_width: int = HIST_BAR) -> list[str]:
    """biolatency's table in fewer columns than tracer.core.histogram.render (compact bounds, a
    shorter bar), so it fits beside the system pane: the span of non-empty slots only."""
    used = [i for i, n in enumerate(counts) if n]
    if not used:
        return []
    top = max(counts)
    lines = [f"{'latency':>16} : {'count':>8}  distribution"]
    for slot in range(used[0], used[-1] + 1):
        lo, hi = slot_bounds_ns(slot)
        span = f"{short_ns(lo)} -> {short_ns(hi) if slot < MAX_SLOTS - 1 else 'inf'}"
        stars = "*" * round(counts[slot] * bar_width / top)
        lines.append(f"{span:>16} : {counts[slot]:>8} |{stars:<{bar_width}}|")
    return lines


class _SizedPane:
    """A pane that renders one renderable, `body()`, and reports its width (so the layout can
    put panes side by side when they fit)."""

    def __init__(self, state: ViewState) -> None:
        self.state = state

    def body(self) -> RenderableType:
        raise NotImplementedError

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.body()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.body())


class HistogramPane(_SizedPane):
    """biolatency-style histogram of the selected layer and role over the window."""

    def body(self) -> Panel:
        s = self.state
        counts, by_op = s.layer_histogram()
        n = sum(counts)
        title = Text(f"{LAYER_TITLE[s.layer]}, role {s.role or 'all'}, {_window_label(s)}")
        if not n:
            body = Text("no operations", style="dim")
        else:
            ops = ", ".join(f"{op} {c}" for op, c in sorted(by_op.items(), key=lambda kv: -kv[1]))
            body = Text(f"{n} ops ({ops})\np50 {format_ns(percentile_ns(counts, 50))}, "
                        f"p99 {format_ns(percentile_ns(counts, 99))}\n"
                        + "\n".join(histogram_lines(counts)), no_wrap=True, overflow="ellipsis")
        return Panel(body, title=title, title_align="left", box=box.ROUNDED, expand=False)


def _path_tail(path: str, width: int) -> str:
    return path if len(path) <= width else "…" + path[-(width - 1):]


class FilesPane:
    """The files the traced processes spent most time on in syscalls over the window."""

    def __init__(self, state: ViewState, n: int = TOP_FILES) -> None:
        self.state, self.n = state, n

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.state
        files = stats.top_files((f for snap in s.snapshots for f in snap.files), self.n)
        t = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False,
                  title=f"top files by time ({_window_label(s)})", title_justify="left",
                  title_style="bold")
        for name in ("TIME", "MAX", "READS", "READ", "WRITES", "WRITTEN", "HIT%"):
            t.add_column(name, justify="right")
        t.add_column("FS")
        t.add_column("ROLE")
        t.add_column("PATH", no_wrap=True)
        if not files:
            yield Text("top files: none in this window", style="dim")
            return
        cells = []
        for f in files:
            hit = f.cache_hit_pct
            cells.append((short_ns(f.latency_sum_ns), short_ns(f.latency_max_ns), str(f.reads),
                          dstat_bytes(f.read_bytes), str(f.writes), dstat_bytes(f.write_bytes),
                          "-" if hit is None else f"{hit:.0f}", f.fs_type or "-",
                          ",".join(ROLE_SHORT.get(r, r) for r in ROLES if r in f.roles)
                          or "?"))
        # The path gets what the other columns leave (2 cells between columns), cut on the left.
        used = sum(max(len(c.header), *(len(row[i]) for row in cells))
                   for i, c in enumerate(t.columns[:-1])) + 2 * (len(t.columns) - 1)
        for f, row in zip(files, cells, strict=True):
            t.add_row(*row, _path_tail(f.path, max(16, options.max_width - used)))
        yield t


class DevicePane(_SizedPane):
    """`iostat -x` columns per disk for the last interval (tracer.live.procfs has the formulas),
    and who else read it: the share of its read bytes by untraced processes, and the one of
    them that read most (a kernel thread's reads are named after its cgroup's processes)."""

    def body(self) -> Table | Text:
        last = self.state.last
        devices = sorted(last.devices, key=lambda d: d["device"]) if last else []
        if not devices:
            return Text("devices: no disk statistics", style="dim")
        others = others_read(last.device_users) if last.device_users else None
        t = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False,
                  title="devices (iostat -x)", title_justify="left", title_style="bold")
        t.add_column("Device")
        for name in ("r/s", "w/s", "rkB/s", "wkB/s", "r_await", "w_await", "aqu-sz", "%util"):
            t.add_column(name, justify="right")
        if others is not None:
            t.add_column("others' reads", max_width=OTHERS_WIDTH, no_wrap=True,
                         overflow="ellipsis")
        for d in devices:
            util = d["util_pct"]
            cells = [d["device"], *(f"{d[k]:.2f}" for k in ("r_s", "w_s", "rkb_s", "wkb_s",
                                                           "r_await_ms", "w_await_ms", "aqu_sz")),
                     Text(f"{util:.2f}", style="bold red" if util >= 90 else "")]
            if others is not None:
                cells.append(others.get(d["device"], "-"))
            t.add_row(*cells)
        return t


OTHERS_WIDTH = 24  # the device pane's others column: a share and a process name


def others_read(rows: Iterable[dict]) -> dict[str, str]:
    """Per disk read in the interval (`device_users` rows): the percent of its read bytes that
    untraced processes read, with the name of the one that read most ("40 % dd"; "0 %")."""
    total: dict[str, int] = {}
    others: dict[str, int] = {}
    top: dict[str, tuple[int, str]] = {}
    for r in rows:
        if r["op"] != "read":
            continue
        dev, nbytes = r["device"], int(r["bytes"])
        total[dev] = total.get(dev, 0) + nbytes
        if r["who"] == "traced":
            continue
        others[dev] = others.get(dev, 0) + nbytes
        name = r["comm"] if r["who"] != "rest" else None  # (rest: many, none named)
        if name and nbytes > top.get(dev, (0, ""))[0]:
            top[dev] = (nbytes, name)
    out = {}
    for dev, n in total.items():
        if not n:
            continue
        pct = 100 * others.get(dev, 0) / n
        out[dev] = f"{pct:.0f} %" + (f" {top[dev][1]}" if dev in top and pct else "")
    return out


class GpuPane:
    """NVML utilisation per GPU over the last interval, with its idle share (shown when --gpu
    sampling is on)."""

    def __init__(self, state: ViewState) -> None:
        self.state = state

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        last = self.state.last
        rows = getattr(last, "gpu", None) or [] if last else []
        if not rows:
            return
        t = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False,
                  title="gpu (NVML)", title_justify="left", title_style="bold")
        for name, justify in (("GPU", "left"), ("name", "left"), ("util%", "right"),
                              ("mem%", "right"), ("idle%", "right"), ("samples", "right")):
            t.add_column(name, justify=justify)
        by_gpu: dict[int, list[dict]] = {}
        for r in rows:
            by_gpu.setdefault(r["gpu"], []).append(r)
        for g, rs in sorted(by_gpu.items()):
            util = sum(r["util_pct"] for r in rs) / len(rs)
            mem = [r["mem_util_pct"] for r in rs if r.get("mem_util_pct") is not None]
            idle = 100 * sum(1 for r in rs if r["util_pct"] <= 5) / len(rs)
            t.add_row(str(g), str(rs[0].get("name", "")), f"{util:.0f}",
                      f"{sum(mem) / len(mem):.0f}" if mem else "-",
                      Text(f"{idle:.0f}", style="bold red" if idle >= 50 else ""), str(len(rs)))
        yield t


SYSTEM_HEAD = ("  time   |usr sys idl wai| used  cach| recv  send| read  writ")
SYSTEM_GROUPS = ("--time-- ---cpu-usage--- --memory--- ---net---- ---disk---")


def system_line(row: dict) -> str:
    cpu = " ".join(f"{row[k]:>3.0f}" for k in ("cpu_user_pct", "cpu_sys_pct", "cpu_idle_pct",
                                                "cpu_iowait_pct"))
    b = [f"{dstat_bytes(row[k]):>5}" for k in ("mem_used_bytes", "mem_cached_bytes",
                                                "net_rx_bytes_s", "net_tx_bytes_s",
                                                "disk_read_bytes_s", "disk_write_bytes_s")]
    return f"{clock(row['ts'])}|{cpu}|{b[0]} {b[1]}|{b[2]} {b[3]}|{b[4]} {b[5]}"


class SystemPane(_SizedPane):
    """`dstat -cmnd`: cpu usr/sys/idl/wai, memory used/cache, net recv/send, disk read/write,
    one line per interval of the window, newest last."""

    def body(self) -> Panel:
        rows = [snap.system for snap in self.state.snapshots if snap.system]
        lines = [SYSTEM_GROUPS, SYSTEM_HEAD] + [system_line(r) for r in rows]
        if not rows:
            lines.append("(no sample yet)")
        return Panel(Text("\n".join(lines), no_wrap=True), title="system (dstat)",
                    title_align="left", box=box.ROUNDED, expand=False)


def render_view(state: ViewState, width: int | None = None, console: Console | None = None) -> Group:
    """The whole screen, most important first (a short terminal crops the bottom): header,
    finding, processes, then the histogram with the system and device panes beside it when
    `width` holds them (else below it), top files."""
    hist, system, devices = HistogramPane(state), SystemPane(state), DevicePane(state)
    middle: list = [hist, system, devices]
    if width is not None:
        console = console or Console(width=width)
        w = {r: Measurement.get(console, console.options, r).maximum for r in middle}
        if w[hist] + 1 + max(w[system], w[devices]) <= width:
            middle = [_side_by_side(hist, Group(system, devices))]
        elif w[hist] + 1 + w[system] <= width:
            middle = [_side_by_side(hist, system), devices]
    return Group(Header(state), FindingPane(state), ProcessPane(state), GpuPane(state), *middle,
                 FilesPane(state))


def _side_by_side(left: RenderableType, right: RenderableType) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_row(left, right)
    return grid


class Screen:
    """`render_view` laid out for the console it is rendered on (what LiveView shows)."""

    def __init__(self, state: ViewState) -> None:
        self.state = state

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield render_view(self.state, options.max_width, console)
