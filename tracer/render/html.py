"""`iotrace report DIR --html OUT.html` and ``--json``: the trace as a page and as a dict.

`write_html` writes one self-contained HTML file: every plot is an inline SVG made with
matplotlib (dense plots, the heat maps, are rasterised into a PNG embedded in their SVG as a data
URI), the styles are inline, and the page loads nothing at view time, so it can be mailed,
archived with the run, or opened on an air-gapped cluster. Sections:

1. the overview (targets, duration, findings, p50/p99 per role and layer, top files), the same
   as a trace shows in Jupyter (`tracer.render.overview`);
2. the training loop's state over time (stacked share of each interval) against file-read
   throughput per role and GPU utilisation;
3. a latency heat map per role and layer: time x log2 latency bucket, colour = operations;
4. top files by time spent in syscalls;
5. the findings with their advice and evidence.

Why matplotlib: it is the most widely installed and longest-kept plotting library of the
scientific Python stack (what the people reading these traces already have next to pandas), it
renders headless with no browser or JavaScript engine, and its SVG output needs nothing at view
time. Plotly offline would embed ~3.5 MB of JavaScript in every report for interactivity that a
report of a finished run rarely needs; Bokeh and Altair need JavaScript to render at all.

`summary_json` is the machine-readable summary (``iotrace report DIR --json``).
"""

from __future__ import annotations

import html
import io
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracer.core.units import slot_bounds_ns, slot_of
from tracer.core.vocab import CUDA_STATES, LATENCY_LAYERS, LOOP_STATES, MAIN, shown_states
from tracer.render.overview import overview_html, series_label
from tracer.tracedir.private import open_private
from tracer.tracedir.reader import TraceReader, describe_targets, role_counts

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STATE_COLOURS = {
    "data_wait_io": "#d62728",  # red: the loop waits for batches, workers blocked on reads
    "data_wait_cpu": "#ff7f0e",  # orange: waits for batches, workers busy on CPU
    "data_wait_network": "#17becf",  # cyan: waits for batches, workers wait on the network
    "sync_loading": "#9467bd",  # purple: the loop reads files itself
    "sync_writes": "#e377c2",  # pink: the loop writes/fsyncs logs and other small files
    "checkpoint": "#8c564b",  # brown: the loop writes checkpoints
    "collective_wait": "#bcbd22",  # olive: a rank waits for its peers in a collective
    "gpu_wait": "#98df8a",  # pale green: the loop waits for its GPU (a CUDA synchronisation)
    "device_copy": "#aec7e8",  # pale blue-grey: copies between host and device
    "compute": "#2ca02c",  # green: the loop works on the host (Python, launches, CPU ops)
    "other": "#c7c7c7",  # grey
}
STARTUP_COLOUR = "#bcd4e6"  # pale blue: imports and set-up before training, not judged
MAX_HEATMAP_PANELS = 12
MAX_TIME_BINS = 1500  # heat map columns; longer traces are merged into wider bins
TOP_FILES = 15

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ddd; margin-top: 2em; }
code, pre { font-family: Menlo, Consolas, monospace; font-size: 0.9em; }
table.iotrace-table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
table.iotrace-table th, table.iotrace-table td { padding: 2px 8px; border-bottom: 1px solid #eee;
       vertical-align: top; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9em; }
.finding { border-left: 4px solid #d62728; padding: 0.3em 1em; margin: 1em 0; background: #fafafa; }
.finding.low { border-color: #2ca02c; }
.note { color: #777; }
"""


def _matplotlib() -> tuple[ModuleType, type[Figure]]:
    try:
        import matplotlib
    except ImportError:
        raise ImportError("the HTML report needs matplotlib: pip install matplotlib") from None
    from matplotlib.figure import Figure

    return matplotlib, Figure


def _svg(fig: Figure) -> str:
    """The figure as an inline <svg> element (no XML prolog)."""
    matplotlib, _ = _matplotlib()
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None}, dpi=100)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _t0_ns(trace: TraceReader, stamps: list[pd.Series]) -> int:
    """Time zero of the plots: the trace's start, else one interval before its first row."""
    if trace.start_ns is not None:
        return trace.start_ns
    first = [s.min().value for s in stamps if len(s)]
    return (min(first) - _interval_ns(trace)) if first else 0


def _interval_ns(trace: TraceReader) -> int:
    try:
        return max(1, int(float(trace.meta.get("interval_s") or 1.0) * 1e9))
    except (TypeError, ValueError):
        return 1_000_000_000


def _seconds(ts: pd.Series, t0_ns: int) -> np.ndarray:
    return (ts.astype("int64").to_numpy() - t0_ns) / 1e9


def _slot(lo_ns: pd.Series) -> np.ndarray:
    """`slot_of` of each row, computed once per distinct bound (a trace has at most MAX_SLOTS)."""
    bounds, where = np.unique(lo_ns.to_numpy(dtype=np.int64), return_inverse=True)
    return np.array([slot_of(int(b)) for b in bounds], dtype=np.int64)[where]


def _short_bound(slot: int) -> str:
    ns = slot_bounds_ns(slot)[0]
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns} ns"


# -- plots -------------------------------------------------------------------------------------


def heatmap_svg(trace: TraceReader) -> str | None:
    """Latency heat maps, one panel per (role, layer): x time, y log2 bucket, colour = ops."""
    _, Figure = _matplotlib()
    from matplotlib.colors import LogNorm

    lat = trace.latency
    lat = lat[lat["layer"].astype(object).isin(LATENCY_LAYERS) & (lat["count"] > 0)]
    if lat.empty:
        return None
    lat = lat.astype({"role": object, "layer": object})
    interval = _interval_ns(trace)
    t0 = _t0_ns(trace, [lat["ts"]])
    col = np.maximum(np.ceil((lat["ts"].astype("int64").to_numpy() - t0) / interval) - 1, 0)
    col = col.astype(np.int64)
    ncols = int(col.max()) + 1
    merge = max(1, math.ceil(ncols / MAX_TIME_BINS))
    col //= merge
    ncols = int(col.max()) + 1
    slot = _slot(lat["bucket_lo_ns"])
    lat = lat.assign(_col=col, _slot=slot)
    lo_slot, hi_slot = int(slot.min()), int(slot.max())
    order = {layer: i for i, layer in enumerate(LATENCY_LAYERS)}
    panels = sorted(lat.groupby(["role", "layer"]).groups,
                    key=lambda k: (k[0] != MAIN, k[0], order[k[1]]))[:MAX_HEATMAP_PANELS]
    vmax = 1
    grids = []
    for role, layer in panels:
        part = lat[(lat["role"] == role) & (lat["layer"] == layer)]
        grid = np.zeros((hi_slot - lo_slot + 1, ncols))
        np.add.at(grid, (part["_slot"].to_numpy() - lo_slot, part["_col"].to_numpy()),
                  part["count"].to_numpy())
        vmax = max(vmax, grid.max())
        ops = ", ".join(sorted(part["op"].astype(str).unique()))
        grids.append((f"{role} - {layer.replace('_', ' ')} ({ops})", grid))
    width_s = merge * interval / 1e9
    x = np.arange(ncols + 1) * width_s
    y = np.arange(lo_slot, hi_slot + 2)
    fig = Figure(figsize=(11, 1.0 + 1.9 * len(grids)))
    axes = fig.subplots(len(grids), 1, sharex=True, squeeze=False)[:, 0]
    norm = LogNorm(vmin=1, vmax=vmax)
    mesh = None
    for ax, (title, grid) in zip(axes, grids, strict=True):
        mesh = ax.pcolormesh(x, y, np.ma.masked_equal(grid, 0), cmap="viridis", norm=norm,
                             rasterized=True, shading="flat")
        ax.set_title(title, fontsize=9, loc="left")
        step = max(1, (hi_slot - lo_slot + 1) // 5)
        ticks = list(range(lo_slot, hi_slot + 2, step))
        ax.set_yticks(ticks, [_short_bound(t) for t in ticks], fontsize=7)
        ax.set_ylabel("latency", fontsize=8)
        ax.set_facecolor("#f4f4f4")
    axes[-1].set_xlabel(f"seconds since start (bins of {width_s:g} s)")
    if mesh is not None:
        bar = fig.colorbar(mesh, ax=list(axes), fraction=0.02, pad=0.01)
        bar.set_label("operations per bin")
    return _svg(fig)


def timeline_svg(trace: TraceReader, training_since: Mapping[int, int] | None = None
                 ) -> str | None:
    """Training-loop state (stacked) against file-read throughput and, with GPU samples, GPU
    utilisation. The intervals before `training_since` (per main pid) show as the start-up."""
    _, Figure = _matplotlib()
    loop, lat = trace.loop, trace.latency
    reads = lat[(lat["layer"].astype(object) == "syscall") & (lat["op"].astype(object) == "read")
                & (lat["target"].astype(object) == "file")]
    gpu = trace["gpu"]
    if loop.empty and reads.empty and gpu.empty:
        return None
    interval = _interval_ns(trace)
    t0 = _t0_ns(trace, [loop["ts"], reads["ts"], gpu["ts"]])
    if gpu.empty:  # no GPU panel with nothing in it
        fig = Figure(figsize=(11, 6))
        ax_loop, ax_read = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
        ax_gpu = None
    else:
        fig = Figure(figsize=(11, 7.5))
        ax_loop, ax_read, ax_gpu = fig.subplots(3, 1, sharex=True,
                                                gridspec_kw={"height_ratios": [3, 2, 1.5]})

    _loop_panel(ax_loop, loop, training_since or {}, t0, interval)
    _reads_panel(ax_read, reads, t0, interval)
    if ax_gpu is None:
        ax_read.set_xlabel("seconds since start")
        return _svg(fig)
    _gpu_panel(ax_gpu, gpu, trace["gpu_idle"], t0)
    return _svg(fig)


def _loop_panel(ax, loop: pd.DataFrame, since: Mapping[int, int], t0: int, interval: int) -> None:
    """The training loop's time by state, stacked, per interval (the start-up's apart)."""
    if loop.empty:
        ax.text(0.5, 0.5, "no training-loop rows in this trace", ha="center",
                transform=ax.transAxes, color="#777")
    else:
        cols = [f"{s}_ns" for s in LOOP_STATES]
        startup = loop["ts"].astype("int64") <= loop["pid"].map(
            lambda p: since.get(int(p), -1)).astype("int64")
        labels = [s.replace("_", " ") for s in LOOP_STATES]
        colours = [STATE_COLOURS.get(s, "#7f7f7f") for s in LOOP_STATES]
        if startup.any():
            # A start-up interval's time is the start-up's, whatever state it was classified in.
            loop = loop.assign(startup_ns=loop[cols].sum(axis=1).where(startup, 0))
            loop.loc[startup, cols] = 0
            cols = ["startup_ns", *cols]
            labels, colours = ["start-up (not judged)", *labels], [STARTUP_COLOUR, *colours]
        per = loop.groupby("ts", sort=True)[cols].sum()
        total = per.sum(axis=1).replace(0, np.nan)
        shares = per.div(total, axis=0).fillna(0) * 100
        x = _seconds(pd.Series(per.index), t0)
        x = np.concatenate([[x[0] - interval / 1e9], x])  # the first interval's start
        ys = [np.concatenate([[v[0]], v]) for v in (shares[c].to_numpy() for c in cols)]
        ax.stackplot(x, ys, labels=labels, colors=colours, step="pre")
        ax.set_ylim(0, 100)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
        pids = ", ".join(str(p) for p in sorted(loop["pid"].unique()))
        ax.set_title(f"Training loop (pid {pids}): where each interval went", fontsize=9,
                     loc="left")
    ax.set_ylabel("% of loop time")


def _reads_panel(ax, reads: pd.DataFrame, t0: int, interval: int) -> None:
    """File-read throughput per role, per interval."""
    if reads.empty:
        ax.text(0.5, 0.5, "no file reads traced", ha="center", transform=ax.transAxes,
                color="#777")
    else:
        per = reads.astype({"role": object}).groupby(["ts", "role"])["bytes"].sum().unstack(
            fill_value=0).sort_index()
        x = _seconds(pd.Series(per.index), t0)
        x = np.concatenate([[x[0] - interval / 1e9], x])  # the first interval's start
        for role in per.columns:
            mib_s = per[role].to_numpy() / (interval / 1e9) / 2**20
            ax.step(x, np.concatenate([mib_s[:1], mib_s]), where="pre", label=str(role))
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
        ax.set_ylim(bottom=0)
        ax.set_title("File reads (read syscalls) per role", fontsize=9, loc="left")
    ax.set_ylabel("MiB/s")


def _gpu_panel(ax, gpu: pd.DataFrame, idle: pd.DataFrame, t0: int) -> None:
    """Each GPU's utilisation, with its idle spans shaded by cause."""
    for dev, part in gpu.sort_values("ts").groupby("gpu"):
        ax.plot(_seconds(part["ts"], t0), part["util_pct"], label=f"GPU {dev}")
    for cause in sorted(idle["cause"].astype(str).unique()) if not idle.empty else ():
        spans = idle[idle["cause"].astype(str) == cause]
        for k, span in enumerate(spans.itertuples()):
            ax.axvspan((span.start.value - t0) / 1e9, (span.end.value - t0) / 1e9,
                       color=STATE_COLOURS.get(cause, "#7f7f7f"), alpha=0.25, lw=0,
                       label=f"idle: {cause.replace('_', ' ')}" if k == 0 else None)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_ylim(0, 100)
    ax.set_title("GPU utilisation", fontsize=9, loc="left")
    ax.set_ylabel("%")
    ax.set_xlabel("seconds since start")


def top_files_svg(files: pd.DataFrame) -> str | None:
    """Horizontal bars: time spent in syscalls per file."""
    _, Figure = _matplotlib()
    if files.empty or not (files["time_ns"] > 0).any():
        return None
    files = files.iloc[::-1]
    fig = Figure(figsize=(11, 0.9 + 0.32 * len(files)))
    ax = fig.subplots()
    labels = [p if len(p) <= 70 else "..." + p[-67:] for p in files["path"].astype(str)]
    ax.barh(range(len(files)), files["time_ns"].to_numpy() / 1e6, color="#1f77b4")
    ax.set_yticks(range(len(files)), labels, fontsize=8)
    ax.set_xlabel("time in syscalls (ms)")
    return _svg(fig)


# -- the page ----------------------------------------------------------------------------------


def _figure(svg: str | None, caption: str, empty: str) -> str:
    if svg is None:
        return f'<p class="note">{html.escape(empty)}</p>'
    return f"<figure>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>"


def _findings_html(trace: TraceReader) -> str:
    findings = trace.findings
    if findings.empty:
        return '<p class="note">No findings were recorded.</p>'
    out = []
    for f in findings.itertuples():
        low = " low" if f.kind == "not_io_bound" or f.severity < 20 else ""
        evidence = json.dumps(f.evidence, indent=2, sort_keys=True, default=str)
        out.append(
            f'<div class="finding{low}"><p><b>[{int(f.severity)}] {html.escape(str(f.kind))}</b>: '
            f"{html.escape(str(f.summary))}</p><p><b>Advice:</b> {html.escape(str(f.advice))}</p>"
            f"<details><summary>evidence</summary><pre>{html.escape(evidence)}</pre></details>"
            "</div>")
    return "\n".join(out)


def render_html(trace: TraceReader, training_since: Mapping[int, int] | None = None) -> str:
    """The whole report page as one string (see the module's docstring); `training_since`
    (per main pid, when its start-up ended) marks the start-up in the overview and timeline."""
    files = trace.top_files(TOP_FILES)
    title = f"iotrace report: {describe_targets(trace)}"
    sections = [
        f"<h1>{html.escape(title)}</h1>",
        overview_html(trace, training_since=training_since),
        "<h2>Training loop, file reads and GPU over time</h2>",
        _figure(timeline_svg(trace, training_since),
                "Top: the share of each interval the training loop spent in each state "
                "(tracer.core.diagnosis classifies it). Middle: bytes read from files by read "
                "syscalls per second, per role. Bottom, with a GPU: utilisation from NVML, with "
                "the GPU's idle spans shaded by what the training loop was doing (their cause). "
                "The start-up (imports and set-up before training) is shown apart, as the "
                "findings leave it out.",
                "No training-loop, file-read or GPU rows in this trace."),
        "<h2>Latency heat maps</h2>",
        _figure(heatmap_svg(trace),
                "One panel per role and layer: operations completed per time bin (colour, log "
                "scale) by log2 latency bucket. Syscall = read/write/fsync calls; block queue = "
                "insert to issue; block = issue to completion on the device.",
                "No latency rows in this trace."),
        "<h2>Top files by time spent</h2>",
        _figure(top_files_svg(files),
                "Time spent in syscalls on each file, all processes together.",
                "No file I/O was traced."),
        "<h2>Findings</h2>",
        _findings_html(trace),
        f'<p class="note">Trace directory {html.escape(str(trace.directory))}, schema version '
        f"{html.escape(str(trace.meta.get('schema_version')))}, written by iotrace "
        f"{html.escape(str(trace.meta.get('tool_version')))}.</p>",
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(sections) + "\n</body></html>\n")


def write_html(trace: TraceReader, out_path: str | os.PathLike[str],
               training_since: Mapping[int, int] | None = None) -> Path:
    """Write the self-contained HTML report of `trace` to `out_path`; returns the path.

    The file is written under a temporary name and renamed, so a failed report leaves no
    half-written page. Raises ImportError (with the pip command) when matplotlib is missing,
    `tracer.TraceError` when a table cannot be read, OSError when `out_path` cannot be
    written.
    """
    page = render_html(trace, training_since)
    out = Path(out_path)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with open_private(tmp) as f:  # it has the command lines of the trace
            f.write(page.encode())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


# -- JSON --------------------------------------------------------------------------------------


def _plain(v: object) -> object:
    """A JSON value: numpy scalars to Python, NaN/NA to None, timestamps to ISO 8601 strings."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, pd.Timestamp):
        return v.isoformat()
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _int(v: object) -> int | None:
    """An integer column's value: pandas holds one with nulls as float64 (4649.0)."""
    return None if v is None or pd.isna(v) else int(v)


def gpu_idle_json(trace: TraceReader) -> list[dict]:
    """The ``gpu_idle`` rows for ``--json``: times as int ns since the Unix epoch, integer
    columns as integers (null where unknown), shares as floats."""
    spans = trace["gpu_idle"].astype({"cause": object})
    out = []
    for r in spans.to_dict("records"):
        # the CUDA states' shares only where the loop had them (as shown_states)
        row = {k: _plain(v) for k, v in r.items()
               if k.removesuffix("_frac") not in CUDA_STATES or _plain(v)}
        row.update(start=int(r["start"].value), end=int(r["end"].value),
                   duration_ns=int(r["duration_ns"]), gpu=int(r["gpu"]), pid=_int(r["pid"]))
        out.append(row)
    return out


def _iso(ns: int | None) -> str | None:
    return None if ns is None else pd.Timestamp(ns, unit="ns", tz="UTC").isoformat()


def summary_json(trace: TraceReader, top: int = 10) -> dict:
    """The summary for machines (``iotrace report DIR --json``); ``json.dumps`` takes it as is.

    Keys: ``schema_version``, ``tool_version``, ``directory``, ``host``, ``kernel``,
    ``targets`` ({pids, command}), ``start``/``stop`` (ISO 8601 UTC), ``duration_s``,
    ``stop_reason``, ``events_lost``, ``self_cost`` (what tracing cost, as meta.json has it;
    null for traces without it), ``roles`` (processes per role), ``processes`` (pid, ppid,
    comm, role, cmdline, exit_code, exit_signal), ``latency`` (one entry per process and histogram series:
    pid, comm, role, layer, op, target, device, attribution, what, count, bytes, p50_ns,
    p99_ns; layers syscall, block_queue, block), ``pagecache`` (pages missed per process),
    ``loop`` (per training process: seconds and percent per state), ``top_files`` (see
    `Trace.top_files`) and ``findings`` (the final verdicts, most severe first, evidence as an
    object). Times are ns, sizes bytes; a missing value is null.
    """
    meta = trace.meta
    series = ["pid", "comm", "role", "layer", "op", "target", "device", "attribution"]
    lat = trace.percentiles(layer=LATENCY_LAYERS, op=None, by=series, q=(50, 99)).reset_index()
    order = {layer: i for i, layer in enumerate(LATENCY_LAYERS)}
    lat = lat.assign(_o=lat["layer"].map(order)).sort_values(["pid", "_o", "count"],
                                                           ascending=[True, True, False])
    latency = []
    for r in lat.to_dict("records"):
        r.pop("_o")
        r["what"] = series_label(r["layer"], r["op"], r["target"], r["device"], r["attribution"])
        latency.append(r)
    pc = trace.latency
    pc = pc[pc["layer"].astype(object) == "pagecache"]
    pagecache = [{"pid": pid, "pages_missed": n} for pid, n in
                 pc.groupby("pid")["count"].sum().items()]
    loop = []
    if not trace.loop.empty:
        cols = [f"{s}_ns" for s in LOOP_STATES]
        for pid, ns in trace.loop.groupby("pid")[cols].sum().iterrows():
            total = int(ns.sum())
            shown = shown_states({s: ns[f"{s}_ns"] for s in LOOP_STATES})
            loop.append({"pid": pid, "seconds": total / 1e9,
                         "state_ns": {s: int(ns[f"{s}_ns"]) for s in shown},
                         "state_pct": {s: (100 * ns[f"{s}_ns"] / total if total else None)
                                       for s in shown}})
    procs = trace.processes.drop_duplicates("pid", keep="last").sort_values("pid")
    processes = [{k: _int(r.get(k)) if k in ("rank", "local_rank", "world_size") else r.get(k)
                  for k in ("pid", "ppid", "comm", "role", "cmdline", "exit_code", "exit_signal",
                            "rank", "local_rank", "world_size")}
                 for r in procs.astype({"comm": object, "role": object}).to_dict("records")]
    findings = [{"kind": f["kind"], "severity": int(f["severity"]), "pid": _int(f["pid"]),
                 "rank": _int(f.get("rank")),
                 "summary": f["summary"], "advice": f["advice"], "evidence": f["evidence"],
                 "start": f["start"], "end": f["end"]}
                for f in trace.findings.astype({"kind": object}).to_dict("records")]
    out = {
        "schema_version": meta.get("schema_version"),
        "tool_version": meta.get("tool_version"),
        "directory": str(trace.directory),
        "host": meta.get("host"),
        "kernel": meta.get("kernel"),
        "targets": trace.targets,
        "start": _iso(trace.start_ns),
        "stop": _iso(trace.stop_ns),
        "duration_s": trace.duration_s,
        "stop_reason": meta.get("stop_reason"),
        "events_lost": meta.get("events_lost"),
        "self_cost": meta.get("self_cost"),
        "roles": role_counts(trace),
        "processes": processes,
        "latency": latency,
        "pagecache": pagecache,
        "loop": loop,
        "top_files": trace.top_files(top).to_dict("records"),
        "findings": findings,
    }
    return _plain(out)  # type: ignore[return-value]
