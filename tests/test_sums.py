"""tracer.tracedir.sums, the first screen's sums without pandas, against the pandas code it
replaced (kept here as the reference, as it was): the same rows and numbers, in the same order,
on random tables with the cases that differ (null loop columns of old traces, start-up
intervals, NaN waits, idle disks, spans of GPUs without samples, ties)."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import pandas as pd
import pyarrow as pa
import pytest

from tracer.core.vocab import LOOP_STATES, RANK
from tracer.tracedir import sums

CAUSES = ["data_wait_io", "startup", "compute", "unknown"]


def _ref_loop_split(loop: pd.DataFrame, since: Mapping[int, int]) -> pd.DataFrame:
    ts = loop["ts"].astype("int64")
    limit = loop["pid"].map(lambda p: since.get(int(p), -1)).astype("int64")
    startup = ts <= limit
    cols = [f"{s}_ns" for s in LOOP_STATES]
    train = loop[~startup].groupby("pid")[["interval_ns", *cols]].sum()
    start = loop[startup].groupby("pid")["interval_ns"].sum()
    pids = sorted(int(p) for p in loop["pid"].unique())
    train = train.reindex(pids, fill_value=0)
    total = train[cols].sum(axis=1)
    out = pd.DataFrame({"seconds": total / 1e9,
                        "startup_s": start.reindex(pids, fill_value=0) / 1e9},
                       index=pd.Index(pids, name="pid"))
    for state, col in zip(LOOP_STATES, cols, strict=True):
        out[f"{state}_pct"] = 100 * train[col] / total.where(total > 0)
    return out.astype("float64")


def _ref_gpu_idle(gpu: pd.DataFrame, spans: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame({"sampled_s": gpu.groupby("gpu")["sample_period_ns"].sum() / 1e9})
    out.index = out.index.astype("int64").rename("gpu")
    if spans.empty:
        out["idle_s"] = 0.0
        return out
    spans = spans.astype({"cause": object, "gpu": "int64"})
    out["idle_s"] = (spans.groupby("gpu")["duration_ns"].sum() / 1e9).reindex(
        out.index, fill_value=0.0)
    by_cause = spans.groupby(["gpu", "cause"])["duration_ns"].sum().unstack(fill_value=0)
    order = by_cause.sum().sort_values(ascending=False, kind="stable").index
    for cause in order:
        out[f"{cause}_s"] = (by_cause[cause] / 1e9).reindex(out.index, fill_value=0.0)
    return out


def _ref_devices(dev: pd.DataFrame, users: pd.DataFrame) -> pd.DataFrame:
    dev = dev.astype({"device": object})
    g = dev.groupby("device")
    out = g[["r_s", "rkb_s", "w_s", "wkb_s", "util_pct"]].mean()
    busy = dev[(dev["r_s"] + dev["w_s"]) > 0]
    out["await_ms"] = busy.groupby("device")["await_ms"].mean().reindex(out.index)
    out["max_util_pct"] = g["util_pct"].max()
    reads = users[users["op"] == "read"].astype({"device": object})
    total = reads.groupby("device")["bytes"].sum()
    others = reads[reads["who"] != "traced"].groupby("device")["bytes"].sum()
    share = (100 * others.reindex(total.index, fill_value=0) / total).where(total > 0)
    out["others_read_pct"] = share.reindex(out.index)
    out = out[(out["r_s"] + out["w_s"]) > 0]
    return out[sums.DEVICE_COLUMNS].sort_values("util_pct", ascending=False, kind="stable")


def _same(rows: list[dict], ref: pd.DataFrame, key: str) -> None:
    assert [r[key] for r in rows] == list(ref.index)
    for r, (_, want) in zip(rows, ref.iterrows(), strict=True):
        assert [c for c in r if c != key] == list(ref.columns)
        for c in ref.columns:
            if math.isnan(want[c]):
                assert math.isnan(r[c]), c
            else:  # means: numpy and pandas add in other orders
                assert r[c] == pytest.approx(want[c], rel=1e-12), c


def _dict(values: list[str]) -> pa.Array:
    return pa.array(values).dictionary_encode()


@pytest.mark.parametrize("seed", range(20))
def test_loop_split_is_the_pandas_one(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.randint(1, 300)
    pids = [rnd.choice([100, 200, 300]) for _ in range(n)]
    ts = [10**18 + rnd.randint(0, 10**10) for _ in range(n)]
    cols: dict[str, list] = {"ts": ts, "pid": pids, "interval_ns": [rnd.randint(0, 10**9)
                                                                    for _ in range(n)]}
    old_trace = rnd.random() < 0.3  # its newer states are null
    for s in LOOP_STATES:
        null = old_trace and s in ("collective_wait", "gpu_wait", "device_copy")
        cols[f"{s}_ns"] = pa.array([None if null else rnd.choice([0, rnd.randint(0, 10**9)])
                                    for _ in range(n)], pa.int64())
    table = pa.table({**cols, "ts": pa.array(ts, pa.timestamp("ns", tz="UTC")),
                      "pid": pa.array(pids, pa.int32())})
    since = {p: 10**18 + rnd.randint(0, 10**10) for p in (100, 300) if rnd.random() < 0.5}
    if seed % 2:  # start-up ends with an interval (that interval is start-up's)
        since[pids[0]] = ts[0]
    if seed == 0:  # all start-up: no share to give
        since = {p: 2 * 10**18 for p in (100, 200, 300)}
    _same(sums.loop_split(table, since), _ref_loop_split(table.to_pandas(), since), "pid")


@pytest.mark.parametrize("seed", range(20))
def test_gpu_idle_by_cause_is_the_pandas_one(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.randint(1, 50)
    gpu = pa.table({"gpu": pa.array([rnd.choice([0, 1, 3]) for _ in range(n)], pa.int32()),
                    "sample_period_ns": [rnd.randint(1, 10**8) for _ in range(n)]})
    m = rnd.choice([0, rnd.randint(1, 40)])
    ties = seed % 2  # causes of equal time: by name
    causes = [CAUSES[::-1][i % 4] if ties else rnd.choice(CAUSES) for i in range(4 * m)][:m]
    spans = pa.table({  # gpu 7 has spans, no samples
        "gpu": pa.array([rnd.choice([0, 1, 3, 7]) for _ in range(m)], pa.int32()),
        "cause": _dict(causes) if m else pa.array([], pa.string()),
        "duration_ns": [10**8 if ties else rnd.randint(1, 10**9) for _ in range(m)]})
    _same(sums.gpu_idle_by_cause(gpu, spans),
          _ref_gpu_idle(gpu.to_pandas(), spans.to_pandas()), "gpu")


@pytest.mark.parametrize("seed", range(20))
def test_device_summary_is_the_pandas_one(seed: int) -> None:
    rnd = random.Random(seed)
    n = rnd.randint(1, 200)
    names = ["vda", "vdb", "nvme0n1", "sdz"]

    def rate() -> float:
        return rnd.choice([0.0, 0.0, round(rnd.uniform(0, 500), 1)])

    dev = pa.table({"device": _dict([rnd.choice(names) for _ in range(n)]),
                    **{c: [rate() for _ in range(n)] for c in ("r_s", "rkb_s", "w_s", "wkb_s")},
                    "await_ms": [rnd.choice([math.nan, rnd.uniform(0, 9)]) for _ in range(n)],
                    # even seeds: every disk as busy, ordered by name
                    "util_pct": [50.0 if seed % 2 == 0 else rnd.uniform(0, 100)
                                 for _ in range(n)]})
    m = rnd.randint(0, 30)
    users = pa.table({"device": _dict([rnd.choice(names) for _ in range(m)] or ["vda"])[:m],
                      "op": _dict([rnd.choice(["read", "write"]) for _ in range(m)] or ["read"])[:m],
                      "who": _dict([rnd.choice(["traced", "other"]) for _ in range(m)]
                                   or ["traced"])[:m],
                      "bytes": pa.array([rnd.choice([0, 4096 * rnd.randint(1, 9)])
                                         for _ in range(m)], pa.int64())})
    _same(sums.device_summary(dev, users),
          _ref_devices(dev.to_pandas(), users.to_pandas()), "device")


def test_processes_are_their_last_rows() -> None:
    """A process rolled several times counts once, as its last row says; roles most first;
    a rank's number from its last row, a rank without one left out."""
    procs = pa.table({"pid": pa.array([1, 2, 3, 2, 4, 5, 5], pa.int32()),
                      "role": _dict(["main", "child", RANK, RANK, "dataloader_worker",
                                     "dataloader_worker", "dataloader_worker"]),
                      "rank": pa.array([None, None, None, 1, None, None, None], pa.int32())})
    assert sums.role_counts(procs) == {RANK: 2, "dataloader_worker": 2, "main": 1}
    assert sums.rank_numbers(procs) == {2: 1}
    assert sums.role_counts(procs.slice(0, 0)) == {}
