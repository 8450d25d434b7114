"""The roll-up's grouping: factorize's codes against a sort's, and add_up's sums exact."""

from __future__ import annotations

import numpy as np

from tracer.core import abi, rollup


def _check(values: np.ndarray) -> None:
    codes, first = rollup.factorize(values)
    uniques, index = np.unique(values, return_index=True)
    assert len(first) == len(uniques)
    # the same partition: a code per distinct value, and the group's first row
    assert (values[first][codes] == values).all()
    assert len(np.unique(codes)) == len(first) and codes.min(initial=0) >= 0
    assert sorted(first.tolist()) == sorted(index.tolist())
    assert (codes[first] == np.arange(len(first))).all()


def test_factorize_gives_a_code_per_distinct_value(monkeypatch) -> None:
    rng = np.random.default_rng(7)
    _check(rng.integers(0, 2**64 - 1, 50_000, dtype=np.uint64))  # nearly all distinct
    _check(rng.integers(0, 300, 50_000, dtype=np.uint64))  # few groups
    _check(np.zeros(1000, dtype=np.uint64))
    _check(np.zeros(0, dtype=np.uint64))
    # values that all share one slot in every round (a slot is the top bits of the value
    # times a multiplier: 1 here): one value placed a round, all of them in the end
    monkeypatch.setattr(rollup, "_SLOT_MULS", (1,))
    _check(np.arange(300, dtype=np.uint64) % np.uint64(120))


def test_add_up_sums_exactly_and_sorts_by_key() -> None:
    rows = np.zeros(6, dtype=abi.file_counts_dtype())
    rows["tgid"] = [2, 1, 2, 1, 3, 2]
    rows["ino"] = [10, 11, 10, 11, 12, 13]
    rows["bytes"] = [2**62, 1, 2**62 - 1, 2, 5, 7]  # past a float's exact integers
    rows["latency_max_ns"] = [5, 9, 7, 1, 3, 4]
    rows["size"] = [1, 2, 3, 4, 5, 6]
    out, n = rollup.add_up(rows, ("tgid", "ino"))
    assert out[["tgid", "ino"]].tolist() == [(1, 11), (2, 10), (2, 13), (3, 12)]
    assert out["bytes"].tolist() == [3, 2**63 - 1, 7, 5]
    assert out["latency_max_ns"].tolist() == [9, 7, 4, 3]
    assert n.tolist() == [2, 2, 1, 1]
    # only the rows of `index`
    out, n = rollup.add_up(rows, ("tgid", "ino"), index=np.array([0, 1, 2, 5]))
    assert out[["tgid", "ino"]].tolist() == [(1, 11), (2, 10), (2, 13)]
    assert out["bytes"].tolist() == [1, 2**63 - 1, 7] and n.tolist() == [1, 2, 1]


def test_two_keys_of_one_hash_are_told_apart(monkeypatch) -> None:
    rows = np.zeros(4, dtype=abi.file_counts_dtype())
    rows["ino"] = [1, 2, 1, 2]
    rows["ops"] = [1, 10, 100, 1000]
    monkeypatch.setattr(rollup, "_hash", lambda r, by: np.zeros(len(r[by[0]]), dtype=np.uint64))
    out, n = rollup.add_up(rows, ("ino",))
    assert out["ino"].tolist() == [1, 2] and out["ops"].tolist() == [101, 1010]
    assert n.tolist() == [2, 2]


def _weighed_as_the_kernel(rows: np.ndarray, keep: int, share_pct: int) -> np.ndarray:
    """Which rows bpf/slots.bpf.h's fold_on_close folds when their files close in this order:
    each weighed against its (process, op)'s files weighed so far, itself included."""
    lat, nbytes, pages = (m.astype(int) for m in rollup._measures(rows))
    groups: dict[tuple[int, int], list[int]] = {}
    folded = np.zeros(len(rows), dtype=bool)
    for i, key in enumerate(zip(rows["tgid"].tolist(), rows["op"].tolist(), strict=True)):
        g = groups.setdefault(key, [0, 0, 0, 0])
        mine = (lat[i], nbytes[i], pages[i])
        g[0] += 1
        for k, v in enumerate(mine):
            g[1 + k] += v
        folded[i] = g[0] > keep and all(t == 0 or v * 100 < t * share_pct
                                        for v, t in zip(mine, g[1:], strict=True))
    return folded


def _sorted_folder_rows(rows: np.ndarray, n_files: np.ndarray) -> list[tuple]:
    fields = ("tgid", "dev", "ino", "op", *rollup.SUMMED, "latency_max_ns", "size")
    return sorted(zip(*(rows[f].tolist() for f in fields), n_files.tolist(), strict=True))


def test_files_folded_by_the_kernel_change_no_row() -> None:
    """The files the kernel folds at their close are those the roll-up would not keep: weighed
    against the totals so far, which only grow, they have less than the share of the end's.
    Rolled up with them in its groups' totals, a drain gives the same rows as with every file:
    the same files kept, the same folder rows with the same files in each."""
    rng = np.random.default_rng(3)
    n = 3000
    rows = np.zeros(n, dtype=abi.file_counts_dtype())
    rows["tgid"] = rng.integers(1, 4, n)
    rows["dev"] = 8
    rows["ino"] = np.arange(10_000, 10_000 + n)
    rows["dir_ino"] = rng.integers(500, 520, n)
    rows["op"] = next(code for code, name in abi.OPS.items() if name == "read")
    rows["ops"] = rng.integers(1, 4, n)
    rows["size"] = rng.integers(1, 64, n) * 4096
    rows["bytes"] = rows["size"]
    rows["latency_sum_ns"] = rng.lognormal(10, 1.5, n).astype(np.uint64)
    rows["latency_max_ns"] = rows["latency_sum_ns"]
    rows["pages_missed"] = rng.integers(0, 3, n) * rng.integers(0, 2, n)
    rows["opens"] = 1
    rows["open_latency_sum_ns"] = rng.integers(1000, 5000, n)
    rows["bytes"][rng.choice(n, 5, replace=False)] *= 200  # files that stand out by bytes
    folded = _weighed_as_the_kernel(rows, rollup.KEEP_FILES, rollup.KEEP_SHARE_PCT)
    assert 2000 < folded.sum() < n - 3 * rollup.KEEP_FILES
    # the kernel's rows of fold_stats: per (process, folder, op), with the files in each
    gone = rows[folded].copy()
    gone["ino"], gone["gen"] = gone["dir_ino"], 0
    by_folder, n_folded = rollup.add_up(gone, rollup.FOLDER_KEY)
    by_folder["dir_ino"] = by_folder["ino"]

    own, folder_rows, n_files = rollup.split(rows, rows[:0])
    own_f, folder_rows_f, n_files_f = rollup.split(rows[~folded], rows[:0], folded=by_folder,
                                                   folded_files=n_folded)
    assert own_f.tobytes() == own.tobytes() and len(own) > 0
    assert _sorted_folder_rows(folder_rows_f, n_files_f) == _sorted_folder_rows(folder_rows,
                                                                                n_files)
