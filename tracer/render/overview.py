"""The trace at a glance, as HTML: what Jupyter shows for a `Trace`, and the head of the
``iotrace report --html`` page."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd

from tracer.core.histogram import format_bytes, format_ns
from tracer.core.selfcost import SelfCost, render_self_cost
from tracer.core.vocab import LATENCY_LAYERS, LOOP_STATES, shown_states
from tracer.tracedir.reader import TraceReader, describe_targets, role_counts


def series_label(layer: object, op: object, target: object = None, device: object = None,
                 attribution: object = None) -> str:
    """"syscall read (file)", "block read on nvme0n1 (readahead)", as the terminal summary."""
    def text(v: object) -> str | None:
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

    if layer == "syscall":
        return f"syscall {op}" + (f" ({text(target)})" if text(target) else "")
    name = {"block_queue": "block queue"}.get(str(layer), str(layer))
    where = f" on {text(device)}" if text(device) else ""
    why = f" ({text(attribution)})" if text(attribution) else ""
    return f"{name} {op}{where}{why}"


def _html_table(headers: Sequence[str], rows: Iterable[Sequence[object]],
                right: Sequence[int] = ()) -> str:
    def cell(tag: str, i: int, v: object) -> str:
        style = ' style="text-align:right"' if i in right else ' style="text-align:left"'
        return f"<{tag}{style}>{html.escape(str(v))}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>"
                   for r in rows)
    return f'<table class="iotrace-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def overview_html(trace: TraceReader, top: int = 10,
                  training_since: Mapping[int, int] | None = None) -> str:
    """HTML fragment: targets, duration, findings, the training loop's time by state (the
    start-up, before `training_since` per main pid, apart), p50/p99 per role and layer, top
    files.

    Shown by Jupyter for a `Trace`, and at the head of the ``iotrace report --html`` page.
    """
    parts = [f'<div class="iotrace-overview"><h3>iotrace trace '
             f"<code>{html.escape(str(trace.directory))}</code></h3>",
             _html_table(["", ""], _facts(trace)),
             *_findings_html(trace), *_loop_html(trace, training_since), *_latency_html(trace),
             *_files_html(trace, top), "</div>"]
    return "\n".join(parts)


def _facts(trace: TraceReader) -> list[tuple[str, str]]:
    """The overview's head: what was traced, when, where, and at what cost."""
    meta = trace.meta
    facts = [("Targets", describe_targets(trace))]
    roles = role_counts(trace)
    if roles:
        facts.append(("Processes", ", ".join(f"{n} {r}" for r, n in roles.items())))
    if trace.start_ns is not None:
        facts.append(("Start", str(pd.Timestamp(trace.start_ns, unit="ns", tz="UTC"))))
    if trace.duration_s is not None:
        facts.append(("Duration", f"{trace.duration_s:.1f} s"
                      + (f" (stopped: {meta['stop_reason']})" if meta.get("stop_reason") else "")))
    host = " ".join(str(meta[k]) for k in ("host", "kernel") if meta.get(k))
    if host:
        facts.append(("Host", host))
    facts.append(("Events lost", str(meta.get("events_lost", 0))))
    if isinstance(meta.get("self_cost"), dict):
        line = render_self_cost(SelfCost.from_meta(meta["self_cost"]), top=0)[1]
        facts.append(("iotrace's own cost", line.split(": ", 1)[1]))
    return facts


def _findings_html(trace: TraceReader) -> list[str]:
    findings = trace.findings
    parts = ["<h4>Findings (most severe first)</h4>"]
    if findings.empty:
        parts.append("<p>No findings.</p>")
    else:
        parts.append(_html_table(
            ["severity", "finding", "summary", "advice"],
            ((int(f.severity), f.kind, f.summary, f.advice) for f in findings.itertuples()),
            right=(0,)))
    return parts


def _loop_html(trace: TraceReader, training_since: Mapping[int, int] | None) -> list[str]:
    parts = ["<h4>Training loop time by state</h4>"]
    split = trace.loop_split(training_since)
    if split.empty:
        parts.append("<p>No training loop was traced.</p>")
    else:
        states = shown_states({s: split[f"{s}_pct"].max() for s in LOOP_STATES})
        parts.append(_html_table(
            ["pid", "training", "start-up", *(s.replace("_", " ") for s in states)],
            ((pid, f"{r.seconds:.1f} s", f"{r.startup_s:.1f} s",
              *("-" if pd.isna(r[f"{s}_pct"]) else f"{r[f'{s}_pct']:.0f} %"
                for s in states)) for pid, r in split.iterrows()),
            right=tuple(range(1, 3 + len(states)))))
    return parts


def _latency_html(trace: TraceReader) -> list[str]:
    parts = ["<h4>Latency per role and layer</h4>"]
    lat = trace.percentiles(layer=LATENCY_LAYERS, op=None, by=["role", "layer", "op", "target"],
                            q=(50, 99))
    if lat.empty:
        parts.append("<p>No I/O was traced.</p>")
    else:
        order = {layer: i for i, layer in enumerate(LATENCY_LAYERS)}
        lat = lat.reset_index()
        lat["_order"] = lat["layer"].map(order)
        lat = lat.sort_values(["role", "_order", "count"], ascending=[True, True, False])
        parts.append(_html_table(
            ["role", "what", "ops", "bytes", "p50", "p99"],
            ((r.role, series_label(r.layer, r.op, r.target), r.count, format_bytes(r.bytes),
              format_ns(r.p50_ns), format_ns(r.p99_ns)) for r in lat.itertuples()),
            right=(2, 3, 4, 5)))
    return parts


def _files_html(trace: TraceReader, top: int) -> list[str]:
    files = trace.top_files(top)
    parts = ["<h4>Top files by time spent in syscalls</h4>"]
    if files.empty:
        parts.append("<p>No file I/O was traced.</p>")
    else:
        parts.append(_html_table(
            ["time", "reads", "read", "writes", "written", "cache hit", "path"],
            ((format_ns(r.time_ns), r.reads, format_bytes(r.read_bytes), r.writes,
              format_bytes(r.write_bytes),
              "-" if pd.isna(r.cache_hit_pct) else f"{r.cache_hit_pct:.0f} %", r.path)
             for r in files.itertuples()),
            right=(0, 1, 2, 3, 4, 5)))
    return parts
