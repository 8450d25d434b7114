"""Read-only mappings for what an interval keeps for an hour: a kept interval's evidence is
mostly small dicts keyed by the same few pids, and a dict costs 224 bytes for one entry. A
`Frozen` mapping shares its keys with every other of the same keys and holds only its values
(an array when they are ints), in a fraction of that."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from typing import Any

MAX_SHARED = 4096  # key sets (and keys) kept to be shared; past that, the cache starts again

_key_sets: dict[tuple, tuple] = {}  # a dict's keys, in order -> the one tuple of them all share
_shared: dict = {}  # a key or value that repeats (a process's name, a cgroup) -> its one object


def shared(x: Any) -> Any:
    """`x`, as the one object every kept interval uses for its value (strings and tuples of
    them repeat from interval to interval: names, cgroups, keys)."""
    if isinstance(x, str | tuple):
        one = _shared.get(x)
        if one is not None:
            return one
        if len(_shared) >= MAX_SHARED:
            _shared.clear()
        _shared[x] = x
    return x


class Frozen(Mapping):
    """A dict's entries, read-only, in its order: its keys' tuple shared with every other of
    the same keys, its values a tuple (an array when they are ints)."""

    __slots__ = ("_keys", "_values")

    def __init__(self, d: Mapping) -> None:
        keys = tuple(shared(k) for k in d)
        one = _key_sets.get(keys)
        if one is None:
            if len(_key_sets) >= MAX_SHARED:
                _key_sets.clear()
            one = _key_sets[keys] = keys
        self._keys = one
        values = tuple(d.values())
        # (bool is an int that must come back a bool; an int past 64 bits stays a tuple's)
        if values and all(type(v) is int and -2**63 <= v < 2**63 for v in values):
            self._values: Any = array("q", values)
        else:
            self._values = tuple(v if type(v) is not str else shared(v) for v in values)

    def _at(self, key: Any) -> int:
        try:  # (a few keys: a scan of the tuple beats a dict of them, in time and memory)
            return self._keys.index(key)
        except ValueError:
            return -1

    def __getitem__(self, key: Any) -> Any:
        i = self._at(key)
        if i < 0:
            raise KeyError(key)
        return self._values[i]

    def get(self, key: Any, default: Any = None) -> Any:
        i = self._at(key)
        return default if i < 0 else self._values[i]

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self):  # type: ignore[override]
        return self._keys

    def values(self):  # type: ignore[override]
        return self._values

    def items(self):  # type: ignore[override]
        return list(zip(self._keys, self._values, strict=True))

    def __repr__(self) -> str:
        return f"Frozen({dict(self.items())!r})"


EMPTY: Mapping = Frozen({})  # every empty mapping kept


def frozen(d: Mapping, inner: Any = None) -> Mapping:
    """`d` as a kept interval holds it: EMPTY, or a `Frozen` of its entries, each value passed
    through `inner` first when given."""
    if not d:
        return EMPTY
    return Frozen({k: inner(v) for k, v in d.items()} if inner else d)


def counts(values: Any) -> array:
    """A list of counts (histogram slots) as an array: no int object per count, 4 bytes a
    count when all fit (an interval's do, but for a slot past 2**31 events)."""
    values = list(values)
    return array("i" if all(-2**31 <= n < 2**31 for n in values) else "q", values)
