"""iotrace's own cost: the summary block, meta.json's self_cost and its round trip (no kernel)."""

from __future__ import annotations

import json
import time

import pytest

from tracer.core.selfcost import (
    ProgramCost,
    SelfCost,
    TracerCpu,
    TracerMeter,
    format_count,
    render_self_cost,
)
from tracer.kernel.loader import BadSetting, map_sizes_from_env

PROGRAMS = (
    ProgramCost("syscall", "enter_a", "tracepoint", 20_000, 12_180_000, 0),
    ProgramCost("syscall", "exit_b", "tracepoint", 20_024, 4_723_000, 0),
    ProgramCost("block", "rq_complete_btf", "tp_btf/block_rq_complete", 1_140, 703_000, 0),
    ProgramCost("sched", "switch_btf", "tp_btf/sched_switch", 2_880, 1_080_000, 1),
    ProgramCost("proc", "fork_btf", "tp_btf/sched_process_fork", 0, 0, None),  # never ran
)
TRACER = TracerCpu(cpu_s=0.68, setup_cpu_s=0.46, tracing_s=7.1, cpu_pct=3.14159,
                   interval_cpu_pct=2.0, peak_rss_bytes=137 << 20)


def cost(**kw) -> SelfCost:
    args = dict(programs=PROGRAMS, events_lost=0, map_full_drops={"hists": 0, "file_stats": 0},
                tracer=TRACER, stats_before=0, map_entries={"hists": 16384, "file_stats": 65536},
                stats_seconds=7.2, stats_mode="always")
    return SelfCost(**(args | kw))


def test_totals():
    c = cost()
    assert c.run_cnt == 44_044
    assert c.run_time_ns == 18_686_000
    assert c.ns_per_run == pytest.approx(18_686_000 / 44_044)
    assert [p.name for p in c.top_programs(3)] == ["enter_a", "exit_b", "switch_btf"]
    assert PROGRAMS[-1].ns_per_run is None


def test_summary_block():
    assert render_self_cost(cost(), top=3) == [
        "",
        "iotrace's own cost: BPF 44 k runs, 18.7 ms (424 ns/run avg) in 7.2 s counted = 0.26 % "
        "of one CPU; tracer 3.1 % of one core (0.68 s CPU, 0.46 s of it start-up), peak RSS "
        "137.0 MiB; 0 events lost, 0 map-full drops.",
        "  program               runs      time  ns/run",
        "  syscall/enter_a       20 k   12.2 ms     609",
        "  syscall/exit_b        20 k   4.72 ms     236",
        "  sched/switch_btf    2.88 k   1.08 ms     375",
    ]


def test_summary_block_sampled():
    """--bpf-stats sampled: the counts cover part of the run, and the line says which part;
    the CPU share is over the time counted (18.7 ms in 0.71 s)."""
    line = render_self_cost(cost(stats_seconds=0.71, stats_mode="sampled"), top=0)[1]
    assert line.startswith("iotrace's own cost: BPF 44 k runs, 18.7 ms (424 ns/run avg) in 0.7 s "
                           "counted (10 % of the run, sampled) = 2.63 % of one CPU; tracer ")
    meta = cost(stats_seconds=0.71, stats_mode="sampled").meta()["bpf_stats"]
    assert meta["mode"] == "sampled" and meta["seconds_counted"] == 0.71
    assert meta["cpu_pct"] == 2.6


def test_summary_block_names_full_maps_and_missing_stats():
    lines = render_self_cost(cost(programs=(), events_lost=2,
                                  map_full_drops={"hists": 3, "file_stats": 490},
                                  stats_unavailable="BPF_ENABLE_STATS needs CAP_SYS_ADMIN",
                                  file_rows_rolled_up=1000, folder_rows=10,
                                  folder_ops_kernel=490))
    assert lines[1] == (
        "iotrace's own cost: per-program cost unavailable: BPF_ENABLE_STATS needs CAP_SYS_ADMIN; "
        "tracer 3.1 % of one core (0.68 s CPU, 0.46 s of it start-up), peak RSS 137.0 MiB; "
        "2 events lost, 3 map-full drops (hists 3: counts of those operations are missing); "
        "files table: 1000 per-file rows added up into 10 folder rows (files under 1 % of "
        "their process's time, bytes and pages in an op, past 64 per process, op and "
        "interval), 490 operations counted per folder by the kernel (its per-file table was "
        "full).")
    assert len(lines) == 2  # no program table


def test_summary_block_names_block_requests_that_ended_unseen():
    lines = render_self_cost(cost(block_unseen_requests=3, block_unseen_bytes=12288))
    assert lines[1].endswith(
        "0 events lost, 0 map-full drops; 3 block requests (12.0 KiB) ended unseen: the kernel ran "
        "no completion program for them, so the block layer's counts are short by them.")


def test_meta_is_json_and_round_trips():
    c = cost(events_lost=3, map_full_drops={"hists": 1, "file_stats": 2},
             block_unseen_requests=2, block_unseen_bytes=8192)
    meta = json.loads(json.dumps(c.meta(), allow_nan=False))
    assert meta["totals"] == {"run_cnt": 44_044, "run_time_ns": 18_686_000, "ns_per_run": 424.3}
    assert meta["programs"][0] == {"object": "syscall", "name": "enter_a", "section": "tracepoint",
                                   "run_cnt": 20_000, "run_time_ns": 12_180_000,
                                   "ns_per_run": 609.0, "recursion_misses": 0}
    assert meta["bpf_stats"] == {"enabled": True, "unavailable": None, "previous_sysctl": 0,
                                 "mode": "always", "seconds_counted": 7.2, "cpu_pct": 0.3}
    assert meta["tracer"]["peak_rss_bytes"] == 137 << 20
    back = SelfCost.from_meta(meta)
    # What `iotrace report` renders from meta.json is what the live run printed.
    assert render_self_cost(back) == render_self_cost(c)
    assert back.map_full_drops == {"hists": 1, "file_stats": 2}
    assert back.map_entries == c.map_entries
    assert meta["block_completions_unseen"] == {"requests": 2, "bytes": 8192}
    assert (back.block_unseen_requests, back.block_unseen_bytes) == (2, 8192)


def test_format_count():
    assert [format_count(n) for n in (0, 999, 1000, 12_345, 4_560_000, 1.2e9)] == [
        "0", "999", "1 k", "12.3 k", "4.56 M", "1.2 G"]


def test_meter_counts_this_process_cpu():
    meter = TracerMeter()
    end, wall_end = time.process_time() + 0.05, time.monotonic() + 0.05
    # Burn 50 ms of CPU and let 50 ms pass: the process's other threads (pyarrow's pool, left
    # by earlier tests) add to its CPU time, which can then run ahead of the clock.
    while time.process_time() < end or time.monotonic() < wall_end:
        pass
    r = meter.read()
    assert r.cpu_s >= r.setup_cpu_s + 0.05
    assert r.cpu_pct is not None and r.cpu_pct > 10  # mostly on CPU while measured
    assert r.peak_rss_bytes > 10 << 20
    assert r.tracing_s >= 0.05


@pytest.mark.parametrize("text, want", [
    ("", {}), ("file_stats=1", {"file_stats": 1}), (" hists=64 , threads=8", {"hists": 64, "threads": 8}),
    ("hist_slots=1,file_slots=1024", {"hist_slots": 1, "file_slots": 1024}),
    ("file_log=0", {"file_log": 0}), ("file_log=6", {"file_log": 6}),
])
def test_map_sizes_setting(text, want):
    assert map_sizes_from_env(text) == want


@pytest.mark.parametrize("text, says", [
    ("events=4", "no map 'events' can be sized"), ("file_stats=0", "at least 1"),
    ("file_stats", "at least 1"), ("hists=x", "whole number"), ("file_slots=3", "power of two"),
    ("file_slots=1", "at least 2"), ("file_log=3", "an even number"), ("file_log=-2", "whole number"),
])
def test_map_sizes_setting_rejects(text, says):
    with pytest.raises(BadSetting, match=says):
        map_sizes_from_env(text)
