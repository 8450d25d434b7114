"""Reading whole BPF maps: the batched read (BPF_MAP_LOOKUP_BATCH, 512 entries per syscall)
gives exactly what one lookup per key gives, on a real kernel map."""

from __future__ import annotations

import os

import pytest

from conftest import needs_root
from tracer.kernel import libbpf as _libbpf

pytestmark = [needs_root, pytest.mark.kernel]


def filled(n: int) -> _libbpf.Map:
    m = _libbpf.create_hash_map(24, 56, 8192)
    for i in range(n):
        m.update(i.to_bytes(24, "little"), (3 * i + 1).to_bytes(56, "little"))
    return m


def per_key(m: _libbpf.Map) -> dict[bytes, bytes]:
    return {k: m.lookup(k) for k in m.all_keys()}


@pytest.mark.parametrize("n", [0, 1, _libbpf.Map.BATCH, _libbpf.Map.BATCH + 1, 5000])
def test_batched_read_equals_one_lookup_per_key(n):
    m = filled(n)
    try:
        items = m._items_batched()
        assert len(items) == n  # every entry once
        assert dict(items) == per_key(m) == {
            i.to_bytes(24, "little"): (3 * i + 1).to_bytes(56, "little") for i in range(n)}
        assert dict(m.items()) == dict(items)
    finally:
        os.close(m.fd)


def test_take_returns_the_value_as_deleted():
    """Idle per-file counters leave the kernel map through take(): the value comes back with the
    delete (what was added after the last read is not lost), and the entry is gone."""
    m = filled(3)
    try:
        key = (1).to_bytes(24, "little")
        m.update(key, (99).to_bytes(56, "little"))  # counted after the last read
        assert m.take(key) == (99).to_bytes(56, "little")
        assert m.lookup(key) is None and len(m.items()) == 2
        assert m.take(key) is None  # no such entry
    finally:
        os.close(m.fd)


@pytest.mark.parametrize("delete", [False, True])
@pytest.mark.parametrize("chunk", [513, 700, 4096])
def test_chunked_read_equals_one_lookup_per_key(monkeypatch, chunk, delete):
    """raw_chunks hands the map over a chunk of entries at a time: every entry once, with its
    value, also where a chunk fills in the middle of a batch (the next hash bucket does not
    fit the room left: the call is made again into the emptied buffers). With `delete`
    (BPF_MAP_LOOKUP_AND_DELETE_BATCH, how an ended interval's counters leave the kernel) the
    same entries come, and the map is empty after."""
    monkeypatch.setattr(_libbpf.Map, "CHUNK", chunk)
    m = filled(5000)
    try:
        want = per_key(m)
        got = {}
        for keys, values in m.raw_chunks(delete=delete):
            assert 0 < len(keys) // 24 <= chunk and len(keys) // 24 == len(values) // 56
            for i in range(len(keys) // 24):
                k = bytes(keys[i * 24:(i + 1) * 24])
                assert k not in got
                got[k] = bytes(values[i * 56:(i + 1) * 56])
        assert got == want
        assert per_key(m) == ({} if delete else want)
    finally:
        os.close(m.fd)
