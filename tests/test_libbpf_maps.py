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


def test_a_key_in_a_slot_and_in_the_map_adds_up():
    """A key can be in its slot and in the hash map at once (slots.bpf.h): the reading adds the
    two. Counts are summed; the maximum latency is the later interval's, or the larger of the
    same interval's."""
    from tracer.core import abi
    from tracer.kernel.probes import add_file_stats, add_hists

    a = abi.FILE_STAT.pack(3, 300, 30, 1, 0, 20, 7)
    b = abi.FILE_STAT.pack(2, 200, 25, 0, 4, 15, 8)
    assert abi.FILE_STAT.unpack(add_file_stats(a, b)) == (5, 500, 55, 1, 4, 15, 8)
    assert abi.FILE_STAT.unpack(add_file_stats(b, a)) == (5, 500, 55, 1, 4, 15, 8)
    c = abi.FILE_STAT.pack(1, 100, 40, 0, 0, 40, 7)
    assert abi.FILE_STAT.unpack(add_file_stats(a, c)) == (4, 400, 70, 1, 0, 40, 7)
    h1 = bytes(abi.HIST_SIZE)[:-8] + (5).to_bytes(8, "little")
    h2 = (2).to_bytes(8, "little") + bytes(abi.HIST_SIZE - 16) + (1).to_bytes(8, "little")
    total = abi.decode_hist(add_hists(h1, h2))
    assert total[0, 0] == 2 and total[1, -1] == 6 and total.sum() == 8
