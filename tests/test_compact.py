"""What a kept interval holds for an hour: read-only mappings that answer as the dicts did."""

import sys

import pytest

from tracer.core.diagnosis.compact import EMPTY, counts, frozen


def test_a_frozen_mapping_answers_as_its_dict():
    d = {101: 5, 102: -(2**40)}
    f = frozen(d)
    assert f == d and d == f and dict(f) == d and list(f.items()) == list(d.items())
    assert (f[101], f.get(102), f.get(7), f.get(7, 0), 101 in f, 7 in f, len(f)) == (
        5, -(2**40), None, 0, True, False, 2)
    with pytest.raises(KeyError):
        f[7]
    with pytest.raises(TypeError):
        f[101] = 6  # type: ignore[index]


def test_values_come_back_with_their_types():
    f = frozen({"a": True, "b": 2**70, "c": 1.5, "d": None, "e": "x"})
    assert [type(v) for v in f.values()] == [bool, int, float, type(None), str]
    assert f["b"] == 2**70


def test_repeated_keys_and_strings_are_stored_once():
    one = frozen({(1, "dataloader_worker"): "cgroup/a" + "b", 2: 3})
    two = frozen({(1, "dataloader_worker"): "cgroup/a" + "b", 2: 4})
    assert one.keys() is two.keys()
    assert one[(1, "dataloader_worker")] is two[(1, "dataloader_worker")]
    assert frozen({}) is EMPTY
    # one entry: a fraction of a dict's 224 bytes
    assert sys.getsizeof(one) + sys.getsizeof(one.values()) < sys.getsizeof({1: 2})


def test_counts_take_4_bytes_each_unless_one_needs_8():
    assert counts([0, 3, 2**31 - 1]).itemsize == 4
    assert list(counts([0, 2**31])) == [0, 2**31] and counts([2**31]).itemsize == 8
