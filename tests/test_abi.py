"""tracer/core/abi.py follows bpf/iotrace.h: its layouts (tracer/core/abi_layout.py) are the linked
object's BTF and the header's, field by field, and its struct formats place every field there."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import pytest

from conftest import ROOT
from tracer.core import abi
from tracer.core.abi_layout import ENUMS, STRUCTS

OBJECT = ROOT / "tracer/bpf/iotrace.bpf.o"
GENERATOR = ROOT / "scripts/abi_layout.py"

# abi's struct formats: (format, its C struct, the nested structs it keeps as bytes, the field
# it stops before: the record's tail, sent in part)
FORMATS = {
    "CONFIG": ("iot_config", (), None),
    "HIST_KEY": ("hist_key", (), None),
    "PROC_EVENT": ("iot_proc_event", (), None),
    "DRAIN_EVENT": ("iot_drain_event", (), None),
    "TRACKED_INFO": ("tracked_info", (), None),
    "TRACK_REQUEST": ("track_request", (), None),
    "THREAD_TIME": ("thread_time", (), None),
    "FILE_KEY": ("file_key", (), None),
    "FILE_STAT": ("file_stat", (), None),
    "FOLD_STAT": ("fold_stat", (), None),
    "FOLD_GROUP": ("fold_group", (), None),
    "HIST_SLOT": ("hist_slot", ("key", "h"), None),
    "FILE_SLOT": ("file_slot", ("key", "st"), None),
    "SYS_START": ("sys_start", (), None),
    "WRITE_SPAN": ("write_span", (), None),
    "RQ_START": ("rq_start", (), None),
    "BLOCK_USER_KEY": ("block_user_key", (), None),
    "BLOCK_USER": ("block_user", (), None),
    "CPU_WAIT_KEY": ("cpu_wait_key", (), None),
    "CPU_WAIT": ("cpu_wait", (), None),
    "RQ_SLOT": ("rq_slot", ("s",), None),
    "FREE_SLOT_REQUEST": ("free_slot_request", (), None),
    "FILE_EVENT_HEAD": ("iot_file_event", (), "names"),
    "SLOW_EVENT": ("iot_slow_event", (), None),
    "CUDA_THREAD": ("cuda_thread", (), None),
}


def _generator():
    spec = importlib.util.spec_from_file_location("abi_layout_generator", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def btf_layout() -> tuple[dict, dict]:
    """(structs, enums) as scripts/abi_layout.py reads them from the built object's BTF."""
    if not OBJECT.exists():
        pytest.skip(f"{OBJECT} is not built (make build)")
    if not shutil.which("bpftool"):
        pytest.skip("needs bpftool")
    gen = _generator()
    return gen.generate(gen.btf_types(str(OBJECT)))


def test_layouts_are_the_objects(btf_layout):
    """Every field of every record of the ABI, and every enum member, as the object has them."""
    structs, enums = btf_layout
    for name in sorted(set(structs) | set(STRUCTS)):
        assert STRUCTS.get(name) == structs.get(name), f"struct {name}: run make build"
    for name in sorted(set(enums) | set(ENUMS)):
        assert ENUMS.get(name) == enums.get(name), f"enum {name}: run make build"


def test_generated_module_is_current(btf_layout):
    """tracer/core/abi_layout.py is the generator's text for the object, byte for byte."""
    text = _generator().render(*btf_layout)
    assert (ROOT / "tracer/core/abi_layout.py").read_text() == text, (
        "tracer/core/abi_layout.py is not the object's: run make build and commit it")


def _leaves(name: str, whole=(), stop=None, base=0):
    """(offset, size, kind) of each value that a struct format of `name` holds, in order, from
    the layouts alone: pad* fields hold none, char arrays and the fields in `whole` are bytes,
    arrays of scalars a value per element, nested structs their own fields."""
    for field, off, n, ty in STRUCTS[name][1]:
        if field == stop:
            return
        if field.startswith("pad"):
            continue
        elem, _, count = ty.rstrip("]").partition("[")
        if field in whole or elem == "char":
            yield base + off, n, "bytes"
        elif elem.startswith("struct "):
            assert not count, f"{name}.{field}: an array of structs"
            yield from _leaves(elem.removeprefix("struct "), base=base + off)
        else:
            k = int(count or 1)
            yield from ((base + off + i * n // k, n // k, elem) for i in range(k))


@pytest.mark.parametrize("attr", sorted(FORMATS))
def test_struct_formats_place_every_field(attr):
    """Each of abi's formats, packed with a distinct value per field, has each value at its
    field's offset and size in the layouts (so in the object), and is as long as the struct."""
    fmt = getattr(abi, attr)
    name, whole, stop = FORMATS[attr]
    leaves = list(_leaves(name, whole, stop))
    assert fmt.size == (dict((f, o) for f, o, _, _ in STRUCTS[name][1])[stop] if stop
                        else STRUCTS[name][0])
    # signed fields negative, unsigned ones with their top bit set: a format of the other
    # signedness cannot pack them
    values = [bytes([i + 1]) * n if kind == "bytes" else -(i + 1) if kind[0] == "s"
              else (1 << 8 * n) - 1 - i for i, (_, n, kind) in enumerate(leaves)]
    raw = fmt.pack(*values)
    assert fmt.unpack(raw) == tuple(values)
    for (off, n, kind), value in zip(leaves, values, strict=True):
        expect = value if kind == "bytes" else value.to_bytes(n, "little", signed=kind[0] == "s")
        assert raw[off:off + n] == expect, f"{attr}: the value at {off} is not {name}'s field there"


def test_formats_cover_every_record():
    """Every struct of the ABI is decoded by a format of abi, or nested in one (hist: decode_hist
    reads it as two rows of MAX_SLOTS counters)."""
    covered = {name for name, _, _ in FORMATS.values()}
    nested = {ty.removeprefix("struct ") for name in covered for _, _, _, ty in STRUCTS[name][1]
              if ty.startswith("struct ")}
    assert set(STRUCTS) == covered | nested
    assert [f[1:] for f in STRUCTS["hist"][1]] == [(0, 8 * abi.MAX_SLOTS, f"u64[{abi.MAX_SLOTS}]"),
                                                    (8 * abi.MAX_SLOTS, 8 * abi.MAX_SLOTS,
                                                     f"u64[{abi.MAX_SLOTS}]")]


def test_numpy_fields_are_the_layouts():
    """file_counts_dtype: a struct file_key then its struct file_stat, each field in its place."""
    dtype = abi.file_counts_dtype()
    key_size = STRUCTS["file_key"][0]
    assert dtype.itemsize == key_size + STRUCTS["file_stat"][0]
    for struct_name, base in (("file_key", 0), ("file_stat", key_size)):
        for field, off, n, _ in STRUCTS[struct_name][1]:
            name = "_pad" if field.startswith("pad") else field
            assert dtype.fields[name][1] == base + off and dtype.fields[name][0].itemsize == n


def test_names_are_the_enums():
    """abi's names of enum values are the enums' members, each at its value."""
    for names, enum, prefix in ((abi.LAYERS, "iot_layer", "IOT_LAYER_"), (abi.OPS, "iot_op", "IOT_OP_"),
                                (abi.TARGETS, "iot_target", "IOT_TARGET_"),
                                (abi.ATTRIBUTIONS, "iot_attribution", "IOT_ATTR_"),
                                (abi.THREAD_STATES, "iot_thread_state", "IOT_THREAD_")):
        assert {ENUMS[enum][prefix + (n or "none").upper()]: n for n in names.values()} == names
    assert [ENUMS["iot_waker"]["IOT_WAKER_" + w.upper()] for w in abi.WAKERS] == [0, 1, 2, 3]
    assert {ENUMS["iot_cuda_call"]["IOT_CUDA_" + n.upper()]: n for n in abi.CUDA_CALLS.values()} \
        == abi.CUDA_CALLS
    assert len(abi.CUDA_CALLS) == ENUMS["iot_cuda_call"]["IOT_CUDA_CALLS"]
    assert len(abi.WAKERS) == ENUMS["iot_waker"]["IOT_WAKERS"]
    assert abi.MAX_SLOTS == ENUMS["iot_limits"]["IOT_MAX_SLOTS"] == 40


def _probe() -> str:
    """A C program that prints, compiled with bpf/iotrace.h, every struct's size, every field's
    offset and size, and every enum member's value that the layouts name."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <linux/types.h>",
             '#include "iotrace.h"', "int main(void) {"]
    for name, (_, fields) in STRUCTS.items():
        lines.append(f'    printf("{name} %zu\\n", sizeof(struct {name}));')
        for f, _, _, _ in fields:
            lines.append(f'    printf("{name}.{f} %zu\\n{name}.{f}:size %zu\\n", '
                         f"offsetof(struct {name}, {f}), sizeof(((struct {name} *)0)->{f}));")
    for members in ENUMS.values():
        lines += [f'    printf("{m} %lld\\n", (long long){m});' for m in members]
    lines += ['    printf("slot_tag_small %llu\\nslot_tag_big %llu\\n", '
              "(unsigned long long)slot_tag(1, 2, 3),",
              "           (unsigned long long)slot_tag(~0ull, 0x123456789abcdefull, 6));",
              "    return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, int]:
    """The header's sizes, offsets and enum values, as the C compiler here sees them."""
    if not shutil.which("cc"):
        pytest.skip("needs a C compiler")
    d = tmp_path_factory.mktemp("abi")
    (d / "probe.c").write_text(_probe())
    subprocess.run(["cc", "-I", str(ROOT / "bpf"), "-o", str(d / "probe"), str(d / "probe.c")],
                   check=True)
    out = subprocess.run([str(d / "probe")], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def test_layouts_are_the_headers(c_layout):
    """The layouts against the header, compiled here: every struct, field and enum member (this
    runs without a built object too)."""
    for name, (size, fields) in STRUCTS.items():
        assert c_layout[name] == size, name
        for f, off, n, _ in fields:
            assert (c_layout[f"{name}.{f}"], c_layout[f"{name}.{f}:size"]) == (off, n), f"{name}.{f}"
    for members in ENUMS.values():
        for m, value in members.items():
            assert c_layout[m] == value, m


def test_hist_key_layout(c_layout):
    assert c_layout["hist_key"] == abi.HIST_KEY.size
    # "<IIBBBB": tgid 0, dev 4, layer 8, op 9, target 10, attribution 11
    assert [c_layout[f"hist_key.{f}"] for f in ("tgid", "dev", "layer", "op", "target",
                                                 "attribution")] == [0, 4, 8, 9, 10, 11]


def test_hist_layout(c_layout):
    assert c_layout["hist"] == abi.HIST_SIZE
    assert c_layout["hist.bytes"] == 8 * abi.MAX_SLOTS


def test_proc_event_layout(c_layout):
    assert c_layout["iot_proc_event"] == abi.PROC_EVENT.size
    assert [c_layout[f"iot_proc_event.{f}"] for f in ("kind", "pid", "ppid", "exit_code",
                                                       "ts_ns", "comm", "ns_pid")] == [
        0, 4, 8, 12, 16, 24, 40]


def test_other_records(c_layout):
    assert c_layout["file_key"] == abi.FILE_KEY.size
    assert c_layout["file_stat"] == abi.FILE_STAT.size
    assert c_layout["iot_file_event"] == abi.FILE_EVENT_SIZE
    assert c_layout["iot_file_event.names"] == abi.FILE_EVENT_HEAD.size
    assert c_layout["iot_slow_event"] == abi.SLOW_EVENT.size
    assert c_layout["thread_time"] == abi.THREAD_TIME.size
    assert c_layout["thread_time.comm"] == abi.THREAD_TIME.size - abi.COMM_LEN
    assert c_layout["tracked_info"] == abi.TRACKED_INFO.size


def test_file_identity_layouts(c_layout):
    """A file is (dev, ino, generation) everywhere: in the kernel's keys, its first-sight
    record and slow events, at the offsets the struct formats here decode."""
    assert (c_layout["file_id"], c_layout["file_id.gen"], c_layout["file_id.ino"]) == (16, 4, 8)
    assert [c_layout[f"file_key.{f}"] for f in ("ino", "gen", "op", "buf")] == [8, 16, 20,
                                                                             abi.FILE_KEY_BUF]
    assert c_layout["file_stat.dir_ino"] == 48 and c_layout["sys_start.dir_ino"] == abi.SYS_START.size - 8
    assert c_layout["iot_file_event.gen"] == 32 and c_layout["iot_file_event.len"] == 36
    assert c_layout["iot_file_event.dir_ino"] == 40 and c_layout["iot_file_event.fstype"] == 48
    assert [c_layout[f"iot_slow_event.{f}"] for f in ("ino", "file_gen", "layer", "op", "ts_ns",
                                                       "comm", "dir_ino")] == [16, 28, 32, 33, 40,
                                                                               72, 88]
    raw = abi.SLOW_EVENT.pack(abi.EVENT_SLOW, 1, 2, 3, 4, 5, 6, 1, 2, 7, 8, 9, 10, b"x", 11)
    ev = abi.decode_slow_event(raw)
    assert (ev.ino, ev.file_dev, ev.file_gen, ev.layer, ev.op, ev.ts_ns, ev.dir_ino) == (
        4, 5, 6, "syscall", "fsync", 7, 11)
    head = abi.FILE_EVENT_HEAD.pack(abi.EVENT_FILE, 1, 2, -1, 3, 0, 0, 0xFEED, 0, 77, b"ext4")
    fe = abi.decode_file_event(head)  # a record is only as long as the names it carries
    assert (fe.ino, fe.gen, fe.dir_ino, fe.fs_type, fe.names) == (3, 0xFEED, 77, "ext4", ())
    names = b"f.bin\0data\0var\0"  # packed, the base name first
    head = abi.FILE_EVENT_HEAD.pack(abi.EVENT_FILE, 1, 2, -1, 3, 3, 0, 0, len(names), 0, b"ext4")
    assert abi.decode_file_event(head + names).path == "/var/data/f.bin"


def test_constants(c_layout):
    assert c_layout["iot_config"] == abi.CONFIG.size
    assert c_layout["IOT_MAX_SLOTS"] == abi.MAX_SLOTS
    assert c_layout["IOT_COMM_LEN"] == abi.COMM_LEN
    assert (c_layout["IOT_PATH_DEPTH"], c_layout["IOT_NAME_LEN"], c_layout["IOT_PATH_BYTES"]) == (
        abi.PATH_DEPTH, abi.NAME_LEN, abi.PATH_BYTES)
    assert abi.LAYERS[c_layout["IOT_LAYER_SYSCALL"]] == "syscall"
    assert abi.LAYERS[c_layout["IOT_LAYER_BLOCK"]] == "block"
    assert abi.LAYERS[c_layout["IOT_LAYER_BLOCK_QUEUE"]] == "block_queue"
    assert abi.OPS[c_layout["IOT_OP_READ"]] == "read"
    assert abi.OPS[c_layout["IOT_OP_FSYNC"]] == "fsync"
    assert abi.OPS[c_layout["IOT_OP_OTHER"]] == "other"
    assert abi.TARGETS[c_layout["IOT_TARGET_PIPE"]] == "pipe"
    assert abi.ATTRIBUTIONS[c_layout["IOT_ATTR_READAHEAD"]] == "readahead"
    assert c_layout["IOT_EVENT_EXIT"] == abi.EVENT_EXIT
    assert c_layout["IOT_MAPS"] == len(abi.MAP_FULL_MAPS)
    for i, name in enumerate(abi.MAP_FULL_MAPS):
        assert c_layout[f"IOT_MAP_{name.upper()}"] == i


def test_decode_round_trip():
    raw = abi.HIST_KEY.pack(1234, (254 << 20) | 16, 2, 0, 0, 3)
    key = abi.decode_hist_key(raw)
    assert key == abi.HistKey(1234, (254 << 20) | 16, "block", "read", None, "readahead")
    assert abi.dev_major_minor(key.dev) == (254, 16)
    ev = abi.decode_proc_event(abi.PROC_EVENT.pack(3, 10, 0, 7, 99, b"python3\0garbage!", 0))
    assert (ev.kind, ev.pid, ev.exit_code, ev.ts_ns, ev.comm) == (abi.EVENT_EXIT, 10, 7, 99,
                                                                   "python3")


def test_block_users_layout(c_layout):
    """Who used a disk (block.bpf.c's block_users) and the record of an untraced request."""
    assert c_layout["rq_start"] == abi.RQ_START.size
    assert (c_layout["rq_start.kthread"], c_layout["rq_start.cgroup"],
            c_layout["rq_start.comm"]) == (46, 48, 56)
    assert c_layout["block_user_key"] == abi.BLOCK_USER_KEY.size
    assert [c_layout[f"block_user_key.{f}"] for f in ("op", "traced", "kthread", "rest",
                                                       "cgroup", "comm")] == [4, 5, 6, 7, 8, 16]
    assert c_layout["block_user"] == abi.BLOCK_USER.size and c_layout["block_user.service_ns"] == 16
    key = abi.decode_block_user_key(abi.BLOCK_USER_KEY.pack(7, 0, 0, 1, 0, 42, b"dd\0x"))
    assert key == abi.BlockUserKey(7, "read", False, True, False, 42, "dd")


def test_slot_tables_layout_and_tag(c_layout):
    """The slot tables (slots.bpf.h) are read in place by user space, which checks each slot's
    tag against its key: the layouts and the tag function must be the kernel's."""
    assert c_layout["hist_slot"] == abi.HIST_SLOT.size
    assert c_layout["hist_slot.key"] == 8 and c_layout["hist_slot.h"] == abi.HIST_SLOT.size - abi.HIST_SIZE
    assert c_layout["file_slot"] == abi.FILE_SLOT.size
    assert c_layout["file_slot.key"] == 8
    assert c_layout["file_slot.st"] == abi.FILE_SLOT.size - abi.FILE_STAT.size
    assert c_layout["free_slot_request"] == abi.FREE_SLOT_REQUEST.size
    assert c_layout["slot_tag_small"] == abi.slot_tag(1, 2, 3)
    assert c_layout["slot_tag_big"] == abi.slot_tag(2**64 - 1, 0x123456789ABCDEF, 6)


def test_slot_tags_checked_against_their_keys():
    """User space keeps a slot only when its tag is its key's (a slot being taken has the new
    key's tag before the key): built here from the same words slots.bpf.h hashes."""
    import numpy as np

    gen = 0xDEADBEEF  # the inode's generation: a reused inode number is another key
    fkey = abi.FILE_KEY.pack(4242, 0x800001, 123456789, gen, 1, 1)  # buf 1: not in the tag
    ftag = abi.slot_tag(4242 | 0x800001 << 32, 123456789, gen | 1 << 32)
    stat = abi.FILE_STAT.pack(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    other = abi.FILE_KEY.pack(4242, 0x800001, 987654321, gen, 1, 0)
    reused = abi.FILE_KEY.pack(4242, 0x800001, 123456789, gen + 1, 1, 0)
    raw = b"".join(abi.FILE_SLOT.pack(ftag, k, stat) for k in (fkey, other, reused))
    rows = np.frombuffer(raw, dtype="<u8").reshape(3, -1)
    assert abi.slot_tags_ok(abi.FILE_SLOTS, rows).tolist() == [True, False, False]
    assert abi.decode_file_key(fkey) == (4242, 0x800001, 123456789, gen, "write")
    hkey = abi.HIST_KEY.pack(4242, 0, 1, 0, 1, 0)
    htag = abi.slot_tag(4242, 1 | 0 << 8 | 1 << 16, 0)
    hraw = abi.HIST_SLOT.pack(htag, hkey, bytes(abi.HIST_SIZE))
    hrows = np.frombuffer(hraw + abi.HIST_SLOT.pack(htag ^ 2, hkey, bytes(abi.HIST_SIZE)),
                          dtype="<u8").reshape(2, -1)
    assert abi.slot_tags_ok(abi.HIST_SLOTS, hrows).tolist() == [True, False]


def test_a_key_in_a_slot_and_in_the_map_adds_up():
    """A key can be in its slot and in the hash map at once (slots.bpf.h): the reading adds the
    two. Counts are summed, the opens counted in the key too; the maximum latency is the
    larger."""
    import numpy as np

    from tracer.core import abi, rollup

    key = abi.FILE_KEY.pack(7, 8, 9, 10, 0, 1)
    a = abi.FILE_STAT.pack(3, 300, 30, 1, 0, 20, 5, 1, 7, 7, 0)
    b = abi.FILE_STAT.pack(2, 200, 25, 0, 4, 15, 5, 2, 9, 6, 0)
    both = abi.file_counts(key * 2, a + b)
    own, folders, n = rollup.split(both, both[:0])
    assert own[["op", "ops", "bytes", "latency_sum_ns", "pages_missed", "pages_dirtied",
                "latency_max_ns", "dir_ino"]].tolist() == [(0, 5, 500, 55, 1, 4, 20, 5),
                                                           (abi.OP_OPEN, 3, 0, 16, 0, 0, 7, 5)]
    assert len(folders) == 0 and n.sum() == 0 and np.all(own["tgid"] == 7)
    h1 = bytes(abi.HIST_SIZE)[:-8] + (5).to_bytes(8, "little")
    h2 = (2).to_bytes(8, "little") + bytes(abi.HIST_SIZE - 16) + (1).to_bytes(8, "little")
    total = abi.decode_hist(abi.add_hists(h1, h2))
    assert total[0, 0] == 2 and total[1, -1] == 6 and total.sum() == 8


def test_block_request_records(c_layout):
    """The records of block requests in flight, which user space reads at the end for requests
    whose end no completion program saw (kernel/maps.Maps.block_unseen)."""
    assert c_layout["rq_start"] == abi.RQ_START.size
    assert c_layout["rq_slot"] == abi.RQ_SLOT.size and c_layout["rq_slot.s"] == 8
    fields = abi.RQ_START.unpack(abi.RQ_START.pack(1, 2, 3, 0, 4, 5, 6, 7, 8, 9, 1, 10, b"dd",
                                                  11))
    assert fields == (1, 2, 3, 0, 4, 5, 6, 7, 8, 9, 1, 10, b"dd" + bytes(14), 11)  # in order
    assert (c_layout["rq_start.issue_ns"], c_layout["rq_start.tgid"],
            c_layout["rq_start.data_len"], c_layout["rq_start.op"],
            c_layout["rq_start.dir_ino"]) == (8, 32, 36, 44, 72)


def test_syscall_in_flight_record(c_layout):
    """A thread's syscall in flight, which user space reads for the training loop's thread
    (kernel/maps.Maps.syscalls_in_flight)."""
    assert c_layout["sys_start"] == abi.SYS_START.size
    fields = abi.SYS_START.unpack(abi.SYS_START.pack(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12))
    assert fields == (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)  # offsets below follow this order
    assert (c_layout["sys_start.file"], c_layout["sys_start.op"], c_layout["sys_start.target"],
            c_layout["sys_start.counters_at"], c_layout["sys_start.last_sent"]) == (
                16, 32, 33, 36, 40)
