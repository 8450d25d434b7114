"""The decoding of map entries that tracer/kernel reads (core/abi is the only place a layout is
unpacked): hand-made bytes in, the values the readers hand on out. No privileges."""

import numpy as np

from tracer.core import abi


def test_small_values():
    assert abi.decode_u32((7).to_bytes(4, "little")) == 7
    assert abi.decode_u64((1 << 40).to_bytes(8, "little")) == 1 << 40
    assert abi.decode_u64(None) == 0
    per_cpu = b"".join(n.to_bytes(8, "little") for n in (3, 0, 5, 1 << 33))
    assert abi.percpu_u64_sum(per_cpu) == 8 + (1 << 33)
    assert abi.percpu_u64_sum(None) == 0


def test_first_fields_name_the_process():
    assert abi.hist_key_tgid(abi.HIST_KEY.pack(41, 2, 1, 0, 1, 0)) == 41
    raw = abi.THREAD_TIME.pack(42, 1, 0, 5, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                               b"python")
    assert abi.thread_time_tgid(raw) == 42


def test_a_reclaim_in_progress_is_counted_up_to_the_read():
    """A thread in reclaim since 100 ns (its iowait then 20 ns), blocked (D) since 150: by 200,
    100 ns more of reclaim (5 before) and 50 more of it blocked (30 before)."""
    iowait = 3
    raw = abi.THREAD_TIME.pack(42, iowait, 0, 150, 1, 2, 3, 20, 0, 0, 0, 0, 100, 20, 5, 30, 1,
                               0, 0, 0, 0, b"pt_data_worker")
    t = abi.decode_thread_time(43, raw, 200)
    assert (t.iowait_ns, t.reclaim_ns, t.reclaim_blocked_ns, t.reclaims) == (70, 105, 80, 1)
    assert (t.fault_wait_ns, t.fault_sleeps) == (0, 0)


def test_a_sleep_in_a_fault_in_progress_is_counted_up_to_the_read():
    """A thread blocked (D) since 150 inside a page fault, 7 ns of earlier fault sleeps: by 200,
    50 more of both its iowait and its fault wait; its sleep is counted when it ends."""
    iowait = 3
    raw = abi.THREAD_TIME.pack(42, iowait, 1, 150, 1, 2, 3, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                               0x401000, 0x7FFC0000, 7, 2, b"python")
    t = abi.decode_thread_time(43, raw, 200)
    assert (t.iowait_ns, t.fault_wait_ns, t.fault_sleeps) == (70, 57, 2)
    not_in_fault = raw[:5] + b"\0" + raw[6:]
    assert abi.decode_thread_time(43, not_in_fault, 200).fault_wait_ns == 7


def test_a_syscall_in_flight():
    raw = abi.SYS_START.pack(100, 4096, 8, 9, 10, 1, abi.TARGET_FILE, 0, 0, 0, 0, 11)
    assert abi.decode_sys_start(raw) == (100, 1, abi.TARGET_FILE, 8, 10, 9, 11)
    assert abi.decode_sys_start(bytes(abi.SYS_START.size)) is None  # in no syscall


def test_held_block_requests():
    rec = abi.RQ_START.pack(1, 2, 3, 0, 4, 1234, 4096, 7 << 20, 0, 0, 0, 0, b"dd", 5)
    assert abi.decode_rq_start(rec) == abi.HeldRequest(2, 1234, 4096, 7 << 20)
    assert abi.decode_rq_slot(abi.RQ_SLOT.pack(5 << 6, rec)) == abi.decode_rq_start(rec)
    assert abi.decode_rq_slot(abi.RQ_SLOT.pack(0, rec)) is None  # a free slot
    assert abi.decode_block_user(abi.BLOCK_USER.pack(1, 2, 3)) == (1, 2, 3)


def _slot_words(key: bytes, value: bytes, tag: int | None = None) -> np.ndarray:
    """A hist slot as the mapped table holds it, as rows of u64 words; the key's own tag."""
    words = np.frombuffer(abi.HIST_SLOT.pack(0, key, value), dtype="<u8").copy()
    own = abi.slot_tag(words[1:2], words[2:3] & np.uint64(0xFFFFFFFF), 0)[0]  # arrays wrap
    words[0] = own if tag is None else tag
    return words


def test_held_slots_leave_out_a_slot_being_taken():
    key = abi.HIST_KEY.pack(7, 0, 1, 0, 1, 0)
    hist = (3).to_bytes(8, "little") + bytes(abi.HIST_SIZE - 8)
    good, taken = _slot_words(key, hist), _slot_words(key, hist, tag=99)
    got = abi.decode_held_slots(abi.HIST_SLOTS, np.array([4, 9]), np.stack([good, taken]))
    assert got == [((4, int(good[0])), key, hist)]


def test_socket_keys_name_their_process():
    assert abi.hist_key_target(abi.HIST_KEY.pack(43, 0, 1, 0, abi.TARGET_SOCKET, 0)) == (
        43, abi.TARGET_SOCKET)


def test_layouts_are_unpacked_in_abi_only():
    """Bytes from the kernel are decoded only in core/abi (docs/architecture.md): no other
    module of tracer/ unpacks one of its layouts, and the kernel boundary's stages unpack
    nothing at all (libbpf, the ctypes transport, and elf, the object's ELF header, aside)."""
    import re
    from pathlib import Path

    root = Path(abi.__file__).parent.parent
    layout = re.compile(r"abi\.[A-Z][A-Z0-9_]*\.(iter_)?unpack")
    raw = re.compile(r"\.unpack|struct\.|frombuffer|from_bytes")
    found = [f"{p.relative_to(root)}:{n}" for p in sorted(root.rglob("*.py")) if p.name != "abi.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if layout.search(line)]
    stages = ("loader", "maps", "stats", "ring", "probes")
    found += [f"kernel/{s}.py:{n}" for s in stages
              for n, line in enumerate((root / "kernel" / f"{s}.py").read_text().splitlines(), 1)
              if raw.search(line)]
    assert found == []
