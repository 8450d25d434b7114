"""Reading a trace directory back, read-only: every table as a pandas DataFrame.

`load(DIR)` checks ``meta.json`` and its schema version; each table is read on first access
(`tracer.tracedir.tables`, which skips unusable segments) and then cached. Timestamps are
``datetime64[ns, UTC]``, dictionary-encoded strings are categoricals, durations are int64
nanoseconds in columns named ``*_ns`` (see `tracer.tracedir.schema`). Nothing here writes to the directory.

This is the reader the renderers and `iotrace report` build on; users get it as
``tracer.load`` (`tracer.api`), whose `Trace` adds the text summary and the notebook view.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from tracer.core.abi import ATTRIBUTIONS, LAYERS, OPS, TARGETS
from tracer.core.histogram import MaxSeen, interpolate
from tracer.core.units import PAGE_SIZE
from tracer.tracedir import sums
from tracer.tracedir.schema import TABLES
from tracer.tracedir.tables import TraceError, TraceTables, describe_targets, read_meta, role_counts

__all__ = ["TraceError", "TraceReader", "describe_targets", "load", "role_counts"]
_KNOWN_VALUES = {
    "layer": set(LAYERS.values()),
    "op": set(OPS.values()),
    "target": {t for t in TARGETS.values() if t},
    "attribution": {a for a in ATTRIBUTIONS.values() if a},
}


class TraceReader(TraceTables):
    """The tables of one trace directory as pandas DataFrames, read lazily.

    `meta` is the content of ``meta.json``; `tables` lists the tables that have data on disk.
    ``trace["latency"]`` and ``trace.latency`` return the table as a DataFrame; a table that the
    schema defines but that this trace has no data for is an empty DataFrame with its columns.
    """

    def __init__(self, directory: Path, meta: dict[str, object]) -> None:
        """Use `load` instead: it checks the directory and its schema version first."""
        super().__init__(directory, meta)
        self._cache: dict[str, pd.DataFrame] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        """Table `name` as a DataFrame (read on first access, then cached)."""
        if name in self._cache:
            return self._cache[name]
        frame = self.arrow(name).to_pandas()
        if name == "processes" and not frame.empty:
            # Rolled as it ran, a process has a row each time it changed (a trace cut short
            # keeps them all): the last is current.
            frame = frame.drop_duplicates(["pid", "first_seen"], keep="last")
            frame = frame.reset_index(drop=True)
        self._cache[name] = frame
        return frame

    def forget(self, name: str) -> None:
        """Drops table `name` as read so far: its next access reads the directory again (after
        a rewrite of the table, as `iotrace report` rewrites `gpu_idle`)."""
        self._cache.pop(name, None)

    def segments(self, name: str) -> Iterator[pd.DataFrame]:
        """Table `name` a row group at a time (a rolled segment's rows, or about 65 536 rows of a
        merged one), in the order `trace[name]` has its rows, for a sum over a table too large
        to hold whole (a day of `files`). A trace closed by its writer:
        a segment that cannot be read raises TraceError (`trace[name]` skips it)."""
        for data in self.row_groups(name):
            yield data.to_pandas()

    def __getattr__(self, name: str) -> pd.DataFrame:
        """``trace.latency`` is ``trace["latency"]``."""
        if name.startswith("_") or (name not in TABLES and name not in self.tables):
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute or table {name!r}"
            )
        return self[name]

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(TABLES) | set(self.tables))

    # -- what a notebook asks ------------------------------------------------------------------

    def percentiles(
        self,
        layer: str | Sequence[str] | None = "syscall",
        op: str | Sequence[str] | None = "read",
        by: str | Sequence[str] | None = "role",
        q: float | Sequence[float] = (50, 90, 99),
        target: str | Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Latency percentiles per group, computed from the ``latency`` histograms.

        `layer`, `op` and `target` keep the rows with that value (a list: any of them; None: all),
        e.g. ``target="file"`` leaves out pipe and socket reads, which for a training process
        are mostly waits for DataLoader batches. `by` names the ``latency`` column(s) to group by
        (``"role"``, ``["pid", "layer"]``, ...; None: one row for everything kept). `q` is one or
        more percentiles, 0 < q <= 100.

        Returns one row per group (the index: the `by` columns) with the columns ``count`` and
        ``bytes`` (sums over the whole trace) and ``p50_ns``, ``p90_ns``, ... (float ns).

        How: the buckets of a group are summed over every interval and process in it into one
        log2 histogram; the q-th percentile is the operation of rank ``ceil(q/100 * count)``,
        found by walking the buckets in order, and placed inside its bucket
        ``[bucket_lo_ns, bucket_hi_ns)`` as the j-th of its n operations spread evenly
        (``lo + width * (j - 1/2) / n``, as `tracer.core.histogram.percentile_ns` does for the
        terminal summary, whose p50/p99 these equal). The true percentile lies in
        the same bucket, so the result is off by less than the bucket's width: **at most a
        factor of 2** either way (the bucket's upper bound is twice its lower bound). The last,
        open-ended bucket (about 9 minutes and more) gives its lower bound. A group of file
        syscalls whose every operation the ``files`` rows cover stays at or below the slowest of
        them (``latency_max_ns``), as the summary does.
        """
        qs = _percentile_qs(q)
        cols = _names(by)
        rows = self._latency_rows(cols, layer=layer, op=op, target=target)
        names = [f"p{x:g}_ns" for x in qs]
        out: list[dict] = []
        keys: list[tuple] = []
        groups = rows.groupby(cols, dropna=False, sort=True) if cols else [((), rows)]
        seen = self._max_seen() if ((rows["layer"] == "syscall")
                                    & (rows["target"] == "file")).any() else None
        for key, group in groups:
            keys.append(key if isinstance(key, tuple) else (key,))
            out.append(_group_percentiles(group, qs, names, seen))
        return _percentile_frame(out, keys, cols, names)

    def _latency_rows(self, cols: list[str], **wanted: str | Sequence[str] | None) -> pd.DataFrame:
        """The ``latency`` rows with a count that `wanted` keeps (column -> value(s), None: all),
        with the `cols` to group by, the columns the groups need and the buckets."""
        lat = self.latency
        unknown = [c for c in cols if c not in lat.columns]
        if unknown:
            raise ValueError(
                f"cannot group by {', '.join(map(repr, unknown))}: not a column of the latency "
                f"table; columns: {', '.join(lat.columns)}"
            )
        mask = np.ones(len(lat), dtype=bool)
        for column, values in wanted.items():
            if values is None:
                continue
            names = _names(values)
            bad = sorted(set(names) - _KNOWN_VALUES[column])
            if bad:
                raise ValueError(
                    f"unknown {column} {', '.join(map(repr, bad))}; "
                    f"{column}s: {', '.join(sorted(_KNOWN_VALUES[column]))}"
                )
            mask &= lat[column].astype(object).isin(names).to_numpy()
        extra = [c for c in ("pid", "layer", "op", "target") if c not in cols]
        rows = lat.loc[mask, [*cols, *extra, "bucket_lo_ns", "bucket_hi_ns", "count", "bytes"]]
        rows = rows.astype({c: object for c in (*cols, *extra) if c != "pid"})
        return rows[rows["count"] > 0]

    def _max_seen(self) -> MaxSeen:
        """The slowest file syscall per (pid, op), from the ``files`` table."""
        files = self.files
        if files.empty:
            return MaxSeen()
        f = files[["pid", "op", "ops", "latency_max_ns"]].astype({"op": object})
        return MaxSeen().add_rows(f.to_dict("records"))

    @property
    def findings(self) -> pd.DataFrame:
        """The final verdicts of the diagnosis, most severe first, evidence parsed to dicts.

        The ``findings`` table holds every evaluation made during the run (the last window,
        every few seconds) and at the end (the whole trace). The final ones are the rows with
        the largest ``ts``; of those, the evaluation covering the most (earliest ``start``) is
        kept, and repeated rows are dropped. ``trace["findings"]`` is the raw table.
        """
        raw = self["findings"]
        if not raw.empty:
            raw = raw[raw["ts"] == raw["ts"].max()]
            raw = raw[raw["start"] == raw["start"].min()]
            raw = raw.drop_duplicates(subset=["kind", "pid", "summary", "evidence", "advice"])
            raw = raw.sort_values("severity", ascending=False, kind="stable")
        out = raw.reset_index(drop=True).copy()
        out["evidence"] = pd.Series([_evidence(e) for e in out["evidence"]], dtype=object)
        return out

    def top_files(self, n: int | None = 10) -> pd.DataFrame:
        """The files the traced processes spent most time on in syscalls, most first.

        One row per path (all processes together, so that every DataLoader worker's reads of a
        file add up): ``time_ns`` (sum of syscall latencies), ``reads``, ``read_bytes``,
        ``writes``, ``write_bytes``, ``pages_missed`` (brought into the page cache),
        ``cache_hit_pct`` (of the bytes read), ``fs_type``, ``pids`` (how many processes) and
        ``roles``. The terminal summary ranks per process and file instead.
        """
        files = self.files
        columns = ["path", "time_ns", "reads", "read_bytes", "writes", "write_bytes",
                   "pages_missed", "cache_hit_pct", "fs_type", "pids", "roles"]
        if files.empty:
            return pd.DataFrame(columns=columns)
        f = files.astype({c: object for c in ("path", "op", "role", "fs_type")})
        is_read, is_write = f["op"] == "read", f["op"] == "write"
        f = f.assign(reads=f["ops"].where(is_read, 0), read_bytes=f["bytes"].where(is_read, 0),
                     writes=f["ops"].where(is_write, 0),
                     write_bytes=f["bytes"].where(is_write, 0))
        g = f.groupby("path", sort=False)
        top = pd.DataFrame({
            "time_ns": g["latency_sum_ns"].sum(),
            "reads": g["reads"].sum(),
            "read_bytes": g["read_bytes"].sum(),
            "writes": g["writes"].sum(),
            "write_bytes": g["write_bytes"].sum(),
            "pages_missed": g["pages_missed"].sum(),
            "fs_type": g["fs_type"].first(),
            "pids": g["pid"].nunique(),
            "roles": g["role"].agg(lambda r: ",".join(sorted({str(x) for x in r.dropna()}))),
        })
        hit = 100 * (1 - top["pages_missed"] * PAGE_SIZE / top["read_bytes"].where(
            top["read_bytes"] > 0))
        top["cache_hit_pct"] = hit.clip(lower=0.0)
        top = top.reset_index().sort_values(["time_ns", "read_bytes", "write_bytes"],
                                            ascending=False, kind="stable")
        top = top[columns].reset_index(drop=True)
        return top if n is None else top.head(n)

    def loop_split(self, training_since: Mapping[int, int] | None = None) -> pd.DataFrame:
        """The training loop's time by state, per main process, from the ``loop`` table.

        `training_since` maps a pid to when its training started (its start-up ends:
        `tracer.core.diagnosis.Diagnosis.training_since`); the intervals that end by then are its
        start-up, counted in ``startup_s`` and left out of the shares, as the findings leave
        them out. One row per pid (the index): ``seconds`` (the loop's time after start-up),
        ``startup_s``, and ``<state>_pct`` for each state of `tracer.core.vocab.LOOP_STATES`
        (percent of ``seconds``; NaN when it is 0): `tracer.tracedir.sums.loop_split`.
        """
        rows = sums.loop_split(self.arrow("loop"), training_since)
        return _frame(rows, "pid", sums.LOOP_SPLIT_COLUMNS).astype("float64")

    def gpu_idle_by_cause(self, spans: pd.DataFrame | None = None) -> pd.DataFrame:
        """Per GPU (the index): ``sampled_s`` (time its NVML samples cover), ``idle_s`` (its
        hard idle spans: `spans`, by default the ``gpu_idle`` table) and ``<cause>_s`` for each
        cause found, most first (`tracer.tracedir.sums.gpu_idle_by_cause`)."""
        if spans is None:
            idle = self.arrow("gpu_idle", sums.COLUMNS["gpu_idle"])
        else:
            idle = pa.table({"gpu": spans["gpu"].to_numpy(dtype="int64"),
                             "cause": spans["cause"].astype(str).to_numpy(),
                             "duration_ns": spans["duration_ns"].to_numpy(dtype="int64")}
                            if not spans.empty else {"gpu": [], "cause": [], "duration_ns": []})
        rows = sums.gpu_idle_by_cause(self.arrow("gpu", sums.COLUMNS["gpu"]), idle)
        out = _frame(rows, "gpu", ["sampled_s", "idle_s"])
        if not out.empty:
            out.index = out.index.astype("int64")
        return out

    def device_summary(self) -> pd.DataFrame:
        """Per disk that did I/O (the index), over the trace: mean ``r_s``, ``rkb_s``, ``w_s``,
        ``wkb_s``, ``await_ms`` (of the intervals with requests), ``util_pct``,
        ``max_util_pct``, and ``others_read_pct``: the share of its read bytes that processes
        iotrace did not trace read (`device_users`; NaN without its rows); busiest first
        (`tracer.tracedir.sums.device_summary`)."""
        rows = sums.device_summary(self.arrow("devices"),
                                   self.arrow("device_users", sums.COLUMNS["device_users"]))
        return _frame(rows, "device", sums.DEVICE_COLUMNS)


def load(directory: str | os.PathLike[str]) -> TraceReader:
    """Open the trace directory `directory` written by ``iotrace -o DIR``.

    Reads and checks ``meta.json`` now; tables are read when first accessed. Raises TraceError when
    the directory or its ``meta.json`` is missing or unreadable, or when the trace was written with
    a schema version this iotrace does not read.
    """
    path = Path(directory)
    return TraceReader(path, read_meta(path))


def _frame(rows: list[dict], key: str, columns: list[str]) -> pd.DataFrame:
    """`rows` (`tracer.tracedir.sums`) as a frame indexed by `key`; with no rows, empty with
    `columns`."""
    if not rows:
        return pd.DataFrame(columns=columns, index=pd.Index([], name=key))
    return pd.DataFrame(rows).set_index(key)


def _names(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _percentile_qs(q: float | Sequence[float]) -> list[float]:
    """`percentiles`' q as a list, each checked to be in (0, 100]."""
    qs = [float(x) for x in ([q] if isinstance(q, int | float) else q)]
    for x in qs:
        if not 0 < x <= 100 or math.isnan(x):
            raise ValueError(f"percentile q={x:g} is out of range: give 0 < q <= 100")
    return qs


def _group_percentiles(group: pd.DataFrame, qs: list[float], names: list[str],
                       seen: MaxSeen | None) -> dict:
    """One group's row of `percentiles`: its count, bytes and each percentile, from its
    buckets summed over every interval and process (`seen`: the slowest file syscalls)."""
    buckets = group.groupby(["bucket_lo_ns", "bucket_hi_ns"], sort=True)[
        ["count", "bytes"]].sum()
    lo = buckets.index.get_level_values(0).to_numpy(dtype=np.int64)
    hi = buckets.index.get_level_values(1).to_numpy(dtype=np.int64)
    counts = buckets["count"].to_numpy(dtype=np.int64)
    top = None  # the slowest operation, when the files rows know it for the whole group
    if seen is not None and ((group["layer"] == "syscall")
                             & (group["target"] == "file")).all():
        per = group.groupby(["pid", "op"], sort=False)["count"].sum()
        top = seen.known({(int(p), str(o)): int(n) for (p, o), n in per.items()})
    return {"count": int(counts.sum()), "bytes": int(buckets["bytes"].sum()),
            **dict(zip(names, _interpolate(lo, hi, counts, qs, top), strict=True))}


def _percentile_frame(out: list[dict], keys: list[tuple], cols: list[str],
                      names: list[str]) -> pd.DataFrame:
    """`percentiles`' rows as a frame, indexed by the `by` columns."""
    frame = pd.DataFrame(out, columns=["count", "bytes", *names])
    frame = frame.astype({"count": "int64", "bytes": "int64", **dict.fromkeys(names, "float64")})
    if len(cols) == 1:
        frame.index = pd.Index([k[0] for k in keys], name=cols[0], dtype=object)
    elif cols:
        frame.index = pd.MultiIndex.from_tuples(keys, names=cols) if keys else (
            pd.MultiIndex.from_arrays([[]] * len(cols), names=cols))
    return frame


def _interpolate(lo: np.ndarray, hi: np.ndarray, counts: np.ndarray,
                 qs: Sequence[float], max_ns: int | None = None) -> list[float]:
    """Percentiles `qs` of the histogram with buckets [lo, hi) holding `counts` (sorted by lo),
    as `tracer.core.histogram.interpolate` finds them; NaN for an empty one."""
    lo_, hi_, n_ = lo.tolist(), hi.tolist(), counts.tolist()
    out = [interpolate(lo_, hi_, n_, q, max_ns) for q in qs]
    return [math.nan if v is None else v for v in out]


def _evidence(text: object) -> dict:
    """A finding's evidence, parsed; text that is not a JSON object is kept under "text"."""
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(str(text))
    except ValueError:
        return {"text": text}
    return value if isinstance(value, dict) else {"value": value}
