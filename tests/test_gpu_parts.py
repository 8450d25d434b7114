"""GPU idle spans cut where the training loop's state changes, the start-up's part, and the
sentence that gives the parts; live (`GpuMonitor`, held spans) and replayed (`iotrace report`)
alike. Hand-made NVML rows and loop rows, and the rows of a real H200 trace
(tests/data/gpu_starved.json)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tracer.core.diagnosis import Diagnosis
from tracer.core.diagnosis.feed import feed
from tracer.gpu import idle
from tracer.gpu.idle import STARTUP_DECIDED_NS, IdleSpan, analyse, gpu_evidence, gpu_sentence
from tracer.gpu.nvml import GpuDevice, GpuMonitor
from tracer.report import _plain_records, recompute_gpu, replay, report
from tracer.sinks.parquet import write_segment
from tracer.tracedir.reader import load
from tracer.tracedir.schema import table_from_rows

S = 1_000_000_000
MS = 1_000_000
T0 = 1_760_000_000 * S
PID = 4242
STARVED = Path(__file__).resolve().parent / "data" / "gpu_starved.json"


def at(seconds: float) -> int:
    return T0 + round(seconds * S)


def gpu_rows(idle_s: tuple[float, float], until_s: int = 10) -> list[dict]:
    """One sample a second, (t - 1 s, t], idle within `idle_s`, busy elsewhere."""
    return [{"ts": at(t), "gpu": 0, "uuid": "GPU-x", "name": "NVIDIA H200", "sample_period_ns": S,
             "util_pct": 0.0 if idle_s[0] < t <= idle_s[1] else 90.0}
            for t in range(1, until_s + 1)]


def loop_row(end_s: float, pid: int = PID, **ms: int) -> dict:
    row = {"ts": at(end_s), "pid": pid, "interval_ns": S,
           **{f"{s}_ns": ms.get(s, 0) * MS for s in idle.STATES}}
    row["state"] = max(idle.STATES, key=lambda s: row[f"{s}_ns"])
    return row


# (0, 3] compute, (3, 6] mostly waiting on busy workers, (6, 7] checkpoint, then compute
LOOP = [loop_row(t, compute=1000) for t in (1, 2, 3)] + [
    loop_row(t, data_wait_cpu=900, compute=100) for t in (4, 5, 6)] + [
    loop_row(7, checkpoint=1000)] + [loop_row(t, compute=1000) for t in (8, 9, 10)]


def signals(worker_s: float | None = None, data_s: float | None = None) -> SimpleNamespace:
    """What ends a loop's start-up, as the diagnosis's `SplitState` has it."""
    return SimpleNamespace(
        first_worker_ns={} if worker_s is None else {PID: at(worker_s)},
        first_data_ns={} if data_s is None else {PID: at(data_s)})


def parts(rows: list[dict]) -> list[tuple[float, float, str]]:
    return [((r["start"] - T0) / S, (r["end"] - T0) / S, r["cause"]) for r in rows]


def test_a_span_is_cut_where_the_loops_leading_state_changes() -> None:
    rows = analyse(gpu_rows((1, 7)), LOOP)  # one idle span, [1 s, 7 s]
    assert parts(rows) == [(1, 3, "compute"), (3, 6, "data_wait_cpu"), (6, 7, "checkpoint")]
    wait = rows[1]
    assert wait["duration_ns"] == 3 * S and wait["pid"] == PID
    assert wait["data_wait_cpu_frac"] == pytest.approx(0.9)
    assert wait["compute_frac"] == pytest.approx(0.1)
    assert wait["coverage"] == 1.0 and wait["confidence"] == pytest.approx(0.9)
    assert sum(r["duration_ns"] for r in rows) == 6 * S
    table_from_rows("gpu_idle", rows)


def test_an_interval_the_span_covers_in_part_joins_the_part_next_to_it() -> None:
    # The span [1.5 s, 6.5 s]: (1, 2] and (6, 7] are covered in part; where in them the loop
    # changed state is not known, so no part is cut there.
    rows = idle.attribute([IdleSpan(0, at(1.5), at(6.5), 5)], LOOP)
    assert parts(rows) == [(1.5, 3, "compute"), (3, 6.5, "data_wait_cpu")]
    assert rows[1]["checkpoint_frac"] == pytest.approx(0.5 / 3.5)
    # A span within one interval, or over intervals of one leading state, stays one row.
    assert parts(analyse(gpu_rows((3, 6)), LOOP)) == [(3, 6, "data_wait_cpu")]


def test_the_time_before_the_start_up_ended_is_its_own_part() -> None:
    rows = analyse(gpu_rows((1, 7)), LOOP, startup=signals(worker_s=3))
    assert parts(rows) == [(1, 3, "startup"), (3, 6, "data_wait_cpu"), (6, 7, "checkpoint")]
    assert rows[0]["confidence"] == 1.0 and rows[0]["compute_frac"] == 1.0
    # Without DataLoader workers, the first interval that read the data set ends it.
    assert parts(analyse(gpu_rows((1, 7)), LOOP, startup=signals(data_s=4)))[0] == (
        1, 4, "startup")
    # A worker counts before the data: the diagnosis's training_since.
    assert parts(analyse(gpu_rows((1, 7)), LOOP, startup=signals(worker_s=5, data_s=2)))[0] == (
        1, 5, "startup")
    # A span wholly in the start-up is one part.
    assert parts(analyse(gpu_rows((1, 7)), LOOP, startup=signals(worker_s=8))) == [
        (1, 7, "startup")]


def test_attached_or_too_late_there_is_no_start_up() -> None:
    expected = [(1, 3, "compute"), (3, 6, "data_wait_cpu"), (6, 7, "checkpoint")]
    assert parts(analyse(gpu_rows((1, 7)), LOOP, startup=None)) == expected  # attach mode
    late = signals(worker_s=STARTUP_DECIDED_NS / S + 0.5)  # first interval starts at 0 s
    assert parts(analyse(gpu_rows((1, 7)), LOOP, startup=late)) == expected
    assert idle.gpu_startup_end(None, None, at(0)) is None
    assert idle.gpu_startup_end(at(2), None, None) is None  # no loop interval: no start-up


def test_the_sentence_gives_each_part_and_the_evidence_has_them() -> None:
    samples = gpu_rows((1, 7))
    ev = gpu_evidence(analyse(samples, LOOP, startup=signals(worker_s=3)), samples)
    [g] = ev["gpus"]
    assert g["idle_parts_ns"] == {"startup": 2 * S, "data_wait_cpu": 3 * S, "checkpoint": S}
    assert list(g["idle_parts_ns"]) == ["data_wait_cpu", "startup", "checkpoint"]
    assert gpu_sentence(g) == (
        "GPU 0 idle 6.0 s (60 % of the time): 3.0 s waiting on DataLoader workers busy on the "
        "CPU, 2.0 s start-up (before the loop's first batch), 1.0 s writing a checkpoint")
    json.dumps(ev)
    # More than three causes: the rest is summed.
    rows = analyse(samples, LOOP[:1] + [loop_row(t, other=1000) for t in (2, 3)] + LOOP[3:],
                   startup=signals(worker_s=2))
    assert gpu_sentence(gpu_evidence(rows, samples)["gpus"][0]).endswith(
        ": 3.0 s waiting on DataLoader workers busy on the CPU, 1.0 s start-up (before the "
        "loop's first batch), 1.0 s the loop doing something else, 1.0 s in other states")


class OneGpu:
    """A `GpuSource` with one GPU that is never polled here (`GpuMonitor.idle` takes rows)."""

    def devices(self) -> list[GpuDevice]:
        return [GpuDevice(0, "GPU-x", "NVIDIA H200", False)]

    def close(self) -> None:
        pass


def monitor() -> GpuMonitor:
    return GpuMonitor(OneGpu(), clocks=lambda: {"realtime": T0, "monotonic": 0, "boottime": 0})


def live(samples: list[dict], loop: list[dict], state: SimpleNamespace | None,
         worker_s: float | None = None) -> tuple[list[dict], list[int]]:
    """The spans as the live step gives them, one interval a second: the worker is seen (the
    start-up's end known) at the end of the interval that began at `worker_s`. Returns the rows
    and the interval (its end, s) each came out in."""
    m = monitor()
    out, when = [], []
    for k in range(1, 11):
        if state is not None and worker_s is not None and k - 1 == worker_s:
            state.first_worker_ns[PID] = at(worker_s)
        rows = m.idle(at(k), [r for r in samples if r["ts"] == at(k)],
                      [r for r in loop if r["ts"] == at(k)], startup=state)
        out += rows
        when += [k] * len(rows)
    last = m.finish(state)
    return out + last, when + [11] * len(last)


def test_live_holds_a_span_until_its_start_up_is_decided_and_gives_the_replays_parts() -> None:
    samples = gpu_rows((1, 3))  # a span [1 s, 3 s] that ends before the worker (5 s) is seen
    rows, when = live(samples, LOOP, signals(), worker_s=5)
    assert parts(rows) == [(1, 3, "startup")]
    assert when == [6]  # held from 4 s, when the span ended, to the worker's interval
    assert rows == analyse(samples, LOOP, startup=signals(worker_s=5))
    # Attached: nothing is held.
    rows, when = live(samples, LOOP, None)
    assert parts(rows) == [(1, 3, "compute")] and when == [4]
    # No worker, no data read: held to the end of the run, then no start-up, as a replay.
    rows, when = live(samples, LOOP, signals())
    assert parts(rows) == [(1, 3, "compute")] and when == [11]
    assert rows == analyse(samples, LOOP, startup=signals())


def test_live_holds_a_span_no_longer_than_the_bound() -> None:
    m = monitor()
    m.idle(at(1), [], [loop_row(1)], startup=signals())
    span = gpu_rows((1, 3), until_s=4)
    assert m.idle(at(4), span, [], startup=signals()) == []  # held
    after = at(1) - S + STARTUP_DECIDED_NS + S  # past the bound from the first interval's start
    [row] = m.idle(after, [], [], startup=signals())
    assert row["cause"] == "unknown"  # no loop row covers it here: only its cause is looked at


# -- the H200 trace ---------------------------------------------------------------------------


def starved_trace(directory: Path) -> Path:
    """gpu_check.sh's starved case on an H200, its rows trimmed (tests/data/gpu_starved.json)."""
    data = json.loads(STARVED.read_text())
    directory.mkdir()
    for name in ("gpu", "loop", "threads", "processes"):
        write_segment(directory / name, table_from_rows(name, data[name]))
    (directory / "meta.json").write_text(json.dumps(data["meta"]))
    return directory


def test_report_of_the_h200_starved_trace_gives_the_start_up_part(tmp_path: Path) -> None:
    trace = starved_trace(tmp_path / "starved")
    out = io.StringIO()
    assert report(str(trace), out) == 0
    text = out.getvalue()
    # Before: "GPU 0 idle 100 % of the time; 56 % of that while the loop was busy on the CPU,
    # not waiting for data".
    assert ("GPU 0 idle 18.4 s (100 % of the time): 9.0 s start-up (before the loop's first "
            "batch), 7.0 s waiting on DataLoader workers busy on the CPU, 1.3 s the loop busy on "
            "the CPU, 1.0 s in other states.") in text
    assert "GPU 0: idle 18.4 s of 18.4 s sampled (100 %): startup 9.0 s, data_wait_cpu 7.0 s" in text
    rows = load(str(trace))["gpu_idle"]
    assert list(rows["cause"].astype(str)) == ["startup", "other", "data_wait_cpu", "compute"]


def test_the_h200_trace_replayed_interval_by_interval_gives_the_same_rows(tmp_path: Path) -> None:
    """The live step's order: each interval fed to the diagnosis, then its GPU rows and loop
    rows to the monitor with the diagnosis's start-up signals; the same rows as the report's.
    The loop rows are the trace's (its threads rows are trimmed: a split of them again would
    differ)."""
    trace = load(str(starved_trace(tmp_path / "starved")))
    saved = {}
    for r in _plain_records(trace["loop"]):
        saved.setdefault(r["ts"], []).append(r)
    d = Diagnosis(startup=True)
    m = monitor()
    rows = []
    for inp in replay(trace):
        feed(d, inp)
        rows += m.idle(inp.ts_ns, inp.gpu, saved.get(inp.ts_ns, []), startup=d.state)
    rows += m.finish(d.state)
    offline, _ = recompute_gpu(trace, write=False)
    assert [r["cause"] for r in rows] == ["startup", "other", "data_wait_cpu", "compute"]
    assert rows == offline


def test_every_cause_has_its_words() -> None:
    from tracer.core.vocab import GPU_IDLE_CAUSES
    from tracer.gpu.words import PART_WORDS

    assert set(PART_WORDS) == set(GPU_IDLE_CAUSES)
    causes = ("startup", *idle.STATES, "unknown")
    assert causes == GPU_IDLE_CAUSES
