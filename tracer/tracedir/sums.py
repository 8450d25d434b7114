"""The whole trace's sums that its first screen prints, from Arrow tables with numpy: the
training loop's time by state per main process, each GPU's idle time by cause, each disk's
iostat-style means, the processes' last roles.

No pandas: the live tracer prints these at its end, where importing pandas would add a fifth
to its memory. `TraceReader.loop_split`, `gpu_idle_by_cause` and `device_summary` are these
rows as DataFrames, so a notebook, ``iotrace report`` and the live run print the same numbers.
Each function returns a list of rows (dicts), NaN where a share has nothing to divide.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from tracer.core.vocab import LOOP_STATES, RANK

LOOP_SPLIT_COLUMNS = ["seconds", "startup_s", *(f"{s}_pct" for s in LOOP_STATES)]
# Of the tables the sums read only some columns of, those columns (`TraceTables.arrow`).
COLUMNS = {"processes": ["pid", "role", "rank"], "gpu": ["gpu", "sample_period_ns"],
           "gpu_idle": ["gpu", "cause", "duration_ns"],
           "device_users": ["device", "op", "who", "bytes"]}
DEVICE_COLUMNS = ["r_s", "rkb_s", "w_s", "wkb_s", "await_ms", "util_pct", "max_util_pct",
                  "others_read_pct"]


def ints(table: pa.Table, name: str) -> np.ndarray:
    """Column `name` as int64 (timestamps as ns since the epoch), nulls as 0: a loop state
    that a trace from before it lacks took no time."""
    column = table.column(name)
    if column.null_count:
        column = column.fill_null(0)
    values = column.to_numpy()
    return values.view(np.int64) if values.dtype.kind == "M" else values.astype(np.int64)


def floats(table: pa.Table, name: str) -> np.ndarray:
    """Column `name` as float64, nulls as NaN."""
    return np.asarray(table.column(name).to_numpy(), dtype=np.float64)


def loop_split(loop: pa.Table, training_since: Mapping[int, int] | None = None) -> list[dict]:
    """The training loop's time by state, a row per main process in pid order, from ``loop``
    rows. `training_since` maps a pid to when its training started (its start-up ends); the
    intervals that end by then are its start-up, counted in ``startup_s`` and left out of the
    shares. A row: ``pid``, ``seconds`` (the loop's time after start-up), ``startup_s`` and
    ``<state>_pct`` for each state of `LOOP_STATES` (percent of ``seconds``; NaN when it is 0).
    """
    if loop.num_rows == 0:
        return []
    since = training_since or {}
    pids, row_pid = np.unique(ints(loop, "pid"), return_inverse=True)
    limit = np.array([since.get(int(p), -1) for p in pids], dtype=np.int64)
    startup = ints(loop, "ts") <= limit[row_pid]
    train = ~startup
    states = np.zeros((len(LOOP_STATES), len(pids)), dtype=np.int64)
    for sums, state in zip(states, LOOP_STATES, strict=True):
        np.add.at(sums, row_pid[train], ints(loop, f"{state}_ns")[train])
    before = np.zeros(len(pids), dtype=np.int64)
    np.add.at(before, row_pid[startup], ints(loop, "interval_ns")[startup])
    total = states.sum(axis=0)
    shares = 100 * states / np.where(total > 0, total, np.nan)
    return [{"pid": int(pid), "seconds": total[i] / 1e9, "startup_s": before[i] / 1e9,
             **{f"{s}_pct": float(shares[j, i]) for j, s in enumerate(LOOP_STATES)}}
            for i, pid in enumerate(pids)]


def gpu_idle_by_cause(gpu: pa.Table, spans: pa.Table | None) -> list[dict]:
    """A row per GPU in index order: ``gpu``, ``sampled_s`` (time its NVML samples cover, from
    ``gpu`` rows), ``idle_s`` (its hard idle `spans`, ``gpu_idle`` rows) and ``<cause>_s`` for
    each cause found, most first (causes of equal time by name)."""
    if gpu.num_rows == 0:
        return []
    gpus, row_gpu = np.unique(ints(gpu, "gpu"), return_inverse=True)
    sampled = np.zeros(len(gpus), dtype=np.int64)
    np.add.at(sampled, row_gpu, ints(gpu, "sample_period_ns"))
    idle: dict[int, Counter[str]] = {int(g): Counter() for g in gpus}
    by_cause: Counter[str] = Counter()
    if spans is not None and spans.num_rows:
        for g, cause, ns in zip(ints(spans, "gpu").tolist(), spans.column("cause").to_pylist(),
                                ints(spans, "duration_ns").tolist(), strict=True):
            if g in idle:
                idle[g][cause] += ns
            by_cause[cause] += ns
    causes = sorted(by_cause, key=lambda c: (-by_cause[c], c))
    return [{"gpu": int(g), "sampled_s": sampled[i] / 1e9,
             "idle_s": sum(idle[int(g)].values()) / 1e9,
             **{f"{c}_s": idle[int(g)][c] / 1e9 for c in causes}}
            for i, g in enumerate(gpus)]


def device_summary(devices: pa.Table, users: pa.Table) -> list[dict]:
    """A row per disk that did I/O, busiest first: ``device`` and its means over the trace
    (``devices`` rows), ``r_s``, ``rkb_s``, ``w_s``, ``wkb_s``, ``await_ms`` (of the intervals
    with requests), ``util_pct``, ``max_util_pct``, and ``others_read_pct``: the share of its
    read bytes that processes iotrace did not trace read (``device_users`` rows; NaN without
    them)."""
    if devices.num_rows == 0:
        return []
    disks = Strings()
    row_dev = disks.codes(devices.column("device"))
    n = len(disks.names)
    mean = {c: _means(floats(devices, c), row_dev, n)
            for c in ("r_s", "rkb_s", "w_s", "wkb_s", "util_pct")}
    busy = (floats(devices, "r_s") + floats(devices, "w_s")) > 0
    mean["await_ms"] = _means(np.where(busy, floats(devices, "await_ms"), np.nan), row_dev, n)
    mean["max_util_pct"] = np.full(n, np.nan)
    np.fmax.at(mean["max_util_pct"], row_dev, floats(devices, "util_pct"))
    total, others = np.zeros(n, np.int64), np.zeros(n, np.int64)
    if users.num_rows:
        user_dev = disks.codes(users.column("device"))
        read = _is(users, "op", "read")
        other = read & ~_is(users, "who", "traced")
        nbytes = ints(users, "bytes")
        known = user_dev < n  # (a disk with users' rows only is not in the summary)
        np.add.at(total, user_dev[read & known], nbytes[read & known])
        np.add.at(others, user_dev[other & known], nbytes[other & known])
    rows = []
    for i in sorted(range(n), key=disks.names.__getitem__):
        if not mean["r_s"][i] + mean["w_s"][i] > 0:
            continue
        share = 100 * int(others[i]) / int(total[i]) if total[i] > 0 else math.nan
        rows.append({"device": disks.names[i],
                     **{c: float(mean[c][i]) for c in DEVICE_COLUMNS[:-1]},
                     "others_read_pct": share})
    return sorted(rows, key=lambda r: -r["util_pct"])  # stable: ties stay in name order


class Strings:
    """Numbers for the values of string columns, the same across chunks and tables, each of
    which has a dictionary of its own: a column's rows as numbers without a Python object
    per row. `names[i]` is number i's string."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str] = []
        self._last: tuple[pa.Array, np.ndarray] | None = None  # a table's row groups repeat it

    def codes(self, column: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Each row's number (a column without nulls)."""
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        parts = [np.zeros(0, np.int64)]
        for chunk in chunks:
            if not pa.types.is_dictionary(chunk.type):
                chunk = chunk.dictionary_encode()
            dictionary = chunk.dictionary
            if self._last is not None and self._last[0].equals(dictionary):
                number = self._last[1]
            else:  # per value of the dictionary, not per row
                number = np.fromiter((self._id(s) for s in dictionary.to_pylist()), np.int64,
                                     len(dictionary))
                self._last = dictionary, number
            parts.append(number[np.asarray(chunk.indices.to_numpy(zero_copy_only=False))])
        return np.concatenate(parts)

    def _id(self, name: str) -> int:
        i = self.ids.get(name)
        if i is None:
            i = self.ids[name] = len(self.names)
            self.names.append(name)
        return i


def _is(table: pa.Table, name: str, value: str) -> np.ndarray:
    """Which rows of string column `name` are `value`."""
    strings = Strings()
    codes = strings.codes(table.column(name))
    return codes == strings.ids.get(value, -1)


def _means(values: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per group, the mean of its values that are not NaN (NaN when it has none)."""
    known = ~np.isnan(values)
    sums = np.bincount(group[known], weights=values[known], minlength=n)
    counts = np.bincount(group[known], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def last_processes(processes: pa.Table) -> dict[int, tuple[str, int | None]]:
    """Each process's role and rank (None: not a rank) from its last ``processes`` row (rolled
    as it ran, a process has a row each time it changed), in the order of those last rows."""
    last: dict[int, tuple[str, int | None]] = {}
    if processes.num_rows == 0:
        return last
    for pid, role, rank in zip(processes.column("pid").to_pylist(),
                               processes.column("role").to_pylist(),
                               processes.column("rank").to_pylist(), strict=True):
        last.pop(pid, None)  # to the end: ordered by last rows
        last[pid] = (role, rank)
    return last


def role_counts(processes: pa.Table) -> dict[str, int]:
    """How many processes had each role (``{"main": 1, "dataloader_worker": 8}``), most first."""
    return dict(Counter(role for role, _ in last_processes(processes).values()).most_common())


def rank_numbers(processes: pa.Table) -> dict[int, int]:
    """Each rank's RANK, by pid, from its last ``processes`` row."""
    return {pid: rank for pid, (role, rank) in last_processes(processes).items()
            if role == RANK and rank is not None}
