"""Reading whole BPF maps: the batched read (BPF_MAP_LOOKUP_BATCH, 512 entries per syscall)
gives exactly what one lookup per key gives, on a real kernel map; take_rows() reads and
zeroes a range of a mapped array."""

from __future__ import annotations

import os

import pytest

from conftest import needs_root
from tracer.kernel import libbpf as _libbpf

pytestmark = [needs_root, pytest.mark.kernel]


def filled(n: int) -> _libbpf.Map:
    m = _libbpf.create_map(_libbpf.BPF_MAP_TYPE_HASH, 24, 56, 8192)
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


def test_take_rows_reads_then_zeroes_the_range_only():
    """take_rows maps just the pages of its range (how the file log is drained): rows that
    start, end or cross a page inside the range come back, those in use only; the whole range
    is zero after, and the rows beside it are untouched."""
    size = 112  # abi.FILE_SLOT's: 4096 is no multiple of it, so rows cross pages
    m = _libbpf.create_map(_libbpf.BPF_MAP_TYPE_ARRAY, 4, size, 200, _libbpf.BPF_F_MMAPABLE)
    try:
        def row(i: int) -> bytes:
            return (i + 1).to_bytes(8, "little") + bytes(range(8, size))

        used = [29, 36, 37, 73, 74]  # 36 crosses the first page's end, 73 the second's
        for i in used:
            m.update(i.to_bytes(4, "little"), row(i))
        rows = _libbpf.take_rows(m.fd, size, 30, 74)
        assert [r.tobytes() for r in rows] == [row(i) for i in (36, 37, 73)]
        for i in range(30, 74):
            assert m.lookup(i.to_bytes(4, "little")) == bytes(size)
        assert m.lookup((29).to_bytes(4, "little")) == row(29)
        assert m.lookup((74).to_bytes(4, "little")) == row(74)
        assert len(_libbpf.take_rows(m.fd, size, 50, 50)) == 0
    finally:
        os.close(m.fd)
