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
