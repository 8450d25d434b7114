"""The thin ctypes binding to libbpf.so.1: the only module of iotrace that uses ctypes.

It exposes just the libbpf calls the loader needs, raising :class:`LibbpfError` (with the errno
text) instead of returning NULL or a negative code. Everything else about BPF lives in loader.py,
maps.py, stats.py and ring.py.
The libc calls Python has no binding for are here too: prctl(PR_SET_PDEATHSIG) for the held
child (tracer.live.child), malloc_trim for the tracer's memory (tracer.live.session), a
read-only adjtimex for the host clock's NTP state (tracer.live.clock), and name_to_handle_at /
open_by_handle_at, which name a file from its inode (tracer.live.files). ctypes stays in one
module, whose libc handle is loaded at import, before any fork.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import ClassVar

from tracer.core.units import PAGE_SIZE

LIBBPF_ENV = "IOTRACE_LIBBPF"  # overrides the library path (tests, unusual installs)
DEFAULT_LIBBPF = "libbpf.so.1"

# enum bpf_map_type
BPF_MAP_TYPE_RINGBUF = 27
# flags of bpf_map_update_elem
BPF_ANY = 0
# enum libbpf_print_level
LIBBPF_WARN, LIBBPF_INFO, LIBBPF_DEBUG = 0, 1, 2
# enum bpf_stats_type
BPF_STATS_RUN_TIME = 0
# struct bpf_prog_info (include/uapi/linux/bpf.h): offsets of the fields read here. The kernel
# fills as much of the buffer as it knows: run_time_ns/run_cnt since 5.1, recursion_misses 5.12.
PROG_INFO_SIZE = 232  # through attach_btf_id, 8-aligned (Linux 6.x); a larger kernel struct is cut
PROG_INFO_NAME = 64  # char name[16] (BPF_OBJ_NAME_LEN), the kernel's truncated program name
PROG_INFO_RUN_TIME_NS = 192
PROG_INFO_RUN_CNT = 200
PROG_INFO_RECURSION_MISSES = 208


class LibbpfError(OSError):
    """A libbpf call failed; ``errno`` holds the reason."""


class LibbpfMissing(RuntimeError):
    """libbpf.so.1 could not be loaded."""


_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
RING_SAMPLE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)

_lib: ctypes.CDLL | None = None
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_log: list[str] = []  # libbpf's recent messages, for error reports
_first = itemgetter(0)
# What a kernel answers for a map operation it does not have (524: the kernel-internal ENOTSUPP)
_UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, 524)


PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h


def set_pdeathsig(sig: int) -> None:
    """prctl(PR_SET_PDEATHSIG): the signal this process gets when its parent thread dies (0:
    none). Safe in a forked child: it only calls into the libc loaded at import."""
    zero = ctypes.c_ulong(0)
    if _libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(int(sig)), zero, zero, zero) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def release_free_memory() -> None:
    """malloc_trim(0): the C library gives the pages its heap has free back to the kernel. Each
    interval frees the arrays of tens of thousands of per-file rows; glibc kept most of those
    pages (its heap is trimmed only from the top), and the tracer's resident memory grew by
    them interval after interval. Nothing where the C library has no malloc_trim (musl)."""
    trim = getattr(_libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


TIME_ERROR = 5  # adjtimex's state of a clock that NTP does not keep synchronised
_L = ctypes.c_long


class _Timex(ctypes.Structure):  # struct timex, include/uapi/linux/timex.h
    _fields_ = [("modes", ctypes.c_uint), ("offset", _L), ("freq", _L), ("maxerror", _L),
                ("esterror", _L), ("status", ctypes.c_int), ("constant", _L), ("precision", _L),
                ("tolerance", _L), ("time_sec", _L), ("time_usec", _L), ("tick", _L),
                ("ppsfreq", _L), ("jitter", _L), ("shift", ctypes.c_int), ("stabil", _L),
                ("jitcnt", _L), ("calcnt", _L), ("errcnt", _L), ("stbcnt", _L),
                ("tai", ctypes.c_int), ("_reserved", ctypes.c_int * 11)]


def adjtimex() -> tuple[int, int, int]:
    """adjtimex(2) that only reads (modes 0, no privilege needed): (clock state, maximum error
    in us, estimated error in us) of the kernel's NTP bookkeeping."""
    timex = _Timex()
    state = _libc.adjtimex(ctypes.byref(timex))
    if state < 0:
        raise OSError(ctypes.get_errno(), "adjtimex failed")
    return state, timex.maxerror, timex.esterror


MAX_HANDLE_SZ = 128  # include/linux/exportfs.h


class _FileHandle(ctypes.Structure):  # struct file_handle, include/uapi/linux/fcntl.h
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                ("f_handle", ctypes.c_ubyte * MAX_HANDLE_SZ)]


def name_to_handle(path: str) -> tuple[int, bytes]:
    """name_to_handle_at(2) of `path` (links not followed): (handle type, handle bytes), the
    file system's own name for the inode, which open_by_handle takes back."""
    fh, mount_id = _FileHandle(handle_bytes=MAX_HANDLE_SZ), ctypes.c_int()
    if _libc.name_to_handle_at(-100, os.fsencode(path), ctypes.byref(fh),  # AT_FDCWD
                               ctypes.byref(mount_id), 0) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fh.handle_type, bytes(fh.f_handle[:fh.handle_bytes])


def open_by_handle(mount_fd: int, handle_type: int, handle: bytes, flags: int) -> int:
    """open_by_handle_at(2): a new fd of the inode `handle` names on the file system of
    `mount_fd` (CAP_DAC_READ_SEARCH). ESTALE where no such inode is there now: for ext4's and
    xfs's handles, an inode of that number but another generation."""
    fh = _FileHandle(handle_bytes=len(handle), handle_type=handle_type)
    ctypes.memmove(fh.f_handle, handle, len(handle))
    fd = _libc.open_by_handle_at(mount_fd, ctypes.byref(fh), flags)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def _sig(fn, restype, *argtypes):
    fn.restype = restype
    fn.argtypes = list(argtypes)


def lib() -> ctypes.CDLL:
    """Loads libbpf once; raises LibbpfMissing with the reason."""
    global _lib
    if _lib is not None:
        return _lib
    path = os.environ.get(LIBBPF_ENV, DEFAULT_LIBBPF)
    try:
        so = ctypes.CDLL(path, use_errno=True)
    except OSError as e:
        raise LibbpfMissing(f"cannot load {path}: {e}") from None
    vp, cp, i, u32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32
    _sig(so.libbpf_major_version, u32)
    _sig(so.libbpf_minor_version, u32)
    _sig(so.libbpf_set_print, vp, _PRINT_FN)
    _sig(so.bpf_object__open_file, vp, cp, vp)
    _sig(so.bpf_object__load, i, vp)
    _sig(so.bpf_object__close, None, vp)
    _sig(so.bpf_object__find_map_by_name, vp, vp, cp)
    _sig(so.bpf_object__find_program_by_name, vp, vp, cp)
    _sig(so.bpf_object__next_program, vp, vp, vp)
    _sig(so.bpf_program__name, cp, vp)
    _sig(so.bpf_program__section_name, cp, vp)
    _sig(so.bpf_program__set_autoload, i, vp, ctypes.c_bool)
    _sig(so.bpf_program__autoload, ctypes.c_bool, vp)
    _sig(so.bpf_program__attach, vp, vp)
    _sig(so.bpf_program__attach_tracepoint, vp, vp, cp, cp)
    _sig(so.bpf_program__attach_uprobe_opts, vp, vp, i, cp, ctypes.c_size_t,
         ctypes.POINTER(UprobeOpts))
    _sig(so.bpf_program__fd, i, vp)
    _sig(so.bpf_prog_test_run_opts, i, i, ctypes.POINTER(TestRunOpts))
    _sig(so.bpf_map__set_max_entries, i, vp, u32)
    _sig(so.bpf_map__max_entries, u32, vp)
    _sig(so.bpf_enable_stats, i, i)
    # libbpf 1.1 (Debian 12) has no bpf_prog_get_info_by_fd (1.2+): the generic call does it.
    _sig(so.bpf_obj_get_info_by_fd, i, i, vp, ctypes.POINTER(u32))
    _sig(so.bpf_link__destroy, i, vp)
    _sig(so.bpf_map__fd, i, vp)
    _sig(so.bpf_map__initial_value, vp, vp, ctypes.POINTER(ctypes.c_size_t))
    _sig(so.bpf_object__find_map_by_name, vp, vp, cp)
    _sig(so.bpf_map_update_elem, i, i, vp, vp, ctypes.c_uint64)
    _sig(so.bpf_map_lookup_elem, i, i, vp, vp)
    _sig(so.bpf_map_delete_elem, i, i, vp)
    _sig(so.bpf_map_lookup_and_delete_elem, i, i, vp, vp)
    _sig(so.bpf_map_get_next_key, i, i, vp, vp)
    _sig(so.bpf_map_lookup_batch, i, i, vp, vp, vp, vp, ctypes.POINTER(u32), vp)
    _sig(so.bpf_map_lookup_and_delete_batch, i, i, vp, vp, vp, vp, ctypes.POINTER(u32), vp)
    _sig(so.bpf_map_create, i, i, cp, u32, u32, u32, vp)
    _sig(so.ring_buffer__new, vp, i, RING_SAMPLE_FN, vp, vp)
    _sig(so.ring_buffer__poll, i, vp, i)
    _sig(so.ring_buffer__consume, i, vp)
    _sig(so.ring_buffer__free, None, vp)
    _sig(so.btf__load_vmlinux_btf, vp)
    _sig(so.btf__find_by_name_kind, i, vp, cp, u32)
    _sig(so.btf__free, None, vp)
    _sig(so.libbpf_probe_bpf_map_type, i, i, vp)
    _sig(so.libbpf_num_possible_cpus, i)
    _libc.vsnprintf.restype = i
    _libc.vsnprintf.argtypes = [cp, ctypes.c_size_t, cp, vp]
    so.libbpf_set_print(_print_cb)
    _lib = so
    return so


@_PRINT_FN
def _print_cb(level: int, fmt: bytes, args: int) -> int:
    buf = ctypes.create_string_buffer(1 << 16)
    _libc.vsnprintf(buf, len(buf), fmt, args)
    msg = buf.value.decode(errors="replace").rstrip()
    if level <= LIBBPF_INFO and msg:
        _log.append(msg)
        del _log[:-50]
    if os.environ.get("IOTRACE_DEBUG"):
        os.write(2, (msg + "\n").encode())
    return 0


def recent_log() -> list[str]:
    """The last warnings libbpf printed (verifier errors, attach failures)."""
    return list(_log)


def version() -> tuple[int, int]:
    so = lib()
    return so.libbpf_major_version(), so.libbpf_minor_version()


def _check_ptr(ptr: int | None, what: str) -> int:
    if not ptr:
        err = ctypes.get_errno() or errno.EINVAL
        raise LibbpfError(err, f"{what}: {os.strerror(err)}")
    return ptr


def _check_rc(rc: int, what: str) -> int:
    if rc < 0:
        err = -rc if rc != -1 else (ctypes.get_errno() or errno.EINVAL)
        raise LibbpfError(err, f"{what}: {os.strerror(err)}")
    return rc


class TestRunOpts(ctypes.Structure):
    """struct bpf_test_run_opts (libbpf's bpf.h)."""

    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p),
                ("data_out", ctypes.c_void_p), ("data_size_in", ctypes.c_uint32),
                ("data_size_out", ctypes.c_uint32), ("ctx_in", ctypes.c_void_p),
                ("ctx_out", ctypes.c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


class UprobeOpts(ctypes.Structure):
    """struct bpf_uprobe_opts (libbpf.h), as libbpf 1.1 has it (1.2 adds fields after these)."""

    _fields_ = [("sz", ctypes.c_size_t), ("ref_ctr_offset", ctypes.c_size_t),
                ("bpf_cookie", ctypes.c_uint64), ("retprobe", ctypes.c_bool),
                ("func_name", ctypes.c_char_p)]


class Program:
    """A program of a BpfObject (owned by it)."""

    def __init__(self, ptr: int):
        self._ptr = ptr

    @property
    def name(self) -> str:
        return lib().bpf_program__name(self._ptr).decode()

    @property
    def section(self) -> str:
        return lib().bpf_program__section_name(self._ptr).decode()

    @property
    def autoload(self) -> bool:
        return bool(lib().bpf_program__autoload(self._ptr))

    @autoload.setter
    def autoload(self, on: bool) -> None:
        _check_rc(lib().bpf_program__set_autoload(self._ptr, on), f"set_autoload {self.name}")

    @property
    def fd(self) -> int:
        """The loaded program's fd (owned by its object)."""
        return _check_rc(lib().bpf_program__fd(self._ptr), f"fd of program {self.name}")

    def run(self, ctx: bytes) -> int:
        """Runs a loaded SEC("syscall") program once on `ctx` (BPF_PROG_TEST_RUN); its return
        value, as a signed 32-bit number."""
        return self.run_ctx(ctx)[0]

    def run_ctx(self, ctx: bytes) -> tuple[int, bytes]:
        """run(), and `ctx` as the program left it (the kernel copies a syscall program's
        context back)."""
        buf = ctypes.create_string_buffer(ctx, len(ctx))
        opts = TestRunOpts(sz=ctypes.sizeof(TestRunOpts), ctx_in=ctypes.addressof(buf),
                           ctx_size_in=len(ctx))
        _check_rc(lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)), f"run {self.name}")
        return ctypes.c_int32(opts.retval).value, buf.raw

    def attach(self) -> Link:
        return Link(_check_ptr(lib().bpf_program__attach(self._ptr), f"attach {self.name}"))

    def attach_tracepoint(self, category: str, name: str) -> Link:
        """Attaches a SEC("tp") program to classic tracepoint category:name (libbpf finds its
        id in tracefs); one program may be attached to several."""
        ptr = lib().bpf_program__attach_tracepoint(self._ptr, category.encode(), name.encode())
        return Link(_check_ptr(ptr, f"attach {self.name} to {category}:{name}"))


    def attach_uprobe(self, path: str, func_name: str, cookie: int, retprobe: bool) -> Link:
        """Attaches a SEC("uprobe") (`retprobe`: SEC("uretprobe")) program to the entry (return)
        of function `func_name` of the ELF file at `path`, for every process that maps it (pid
        -1); `cookie` is what bpf_get_attach_cookie() gives the program there."""
        opts = UprobeOpts(sz=ctypes.sizeof(UprobeOpts), bpf_cookie=cookie, retprobe=retprobe,
                          func_name=func_name.encode())
        ptr = lib().bpf_program__attach_uprobe_opts(self._ptr, -1, path.encode(), 0,
                                                    ctypes.byref(opts))
        return Link(_check_ptr(ptr, f"attach {self.name} to {func_name} in {path}"))


class Link:
    """An attachment; destroying it detaches the program (fd-based, so process exit does too)."""

    def __init__(self, ptr: int):
        self._ptr: int | None = ptr

    def destroy(self) -> None:
        if self._ptr:
            lib().bpf_link__destroy(self._ptr)
            self._ptr = None


class BpfObject:
    """An opened (then loaded) BPF object file; closing it frees its programs and maps."""

    def __init__(self, path: str):
        self.path = path
        self._ptr: int | None = _check_ptr(
            lib().bpf_object__open_file(path.encode(), None), f"open {path}"
        )

    def programs(self) -> Iterator[Program]:
        prog = lib().bpf_object__next_program(self._ptr, None)
        while prog:
            yield Program(prog)
            prog = lib().bpf_object__next_program(self._ptr, prog)

    def program(self, name: str) -> Program:
        return Program(
            _check_ptr(lib().bpf_object__find_program_by_name(self._ptr, name.encode()), name)
        )

    def _map(self, name: str) -> int:
        ptr = lib().bpf_object__find_map_by_name(self._ptr, name.encode())
        return _check_ptr(ptr, f"map {name} in {self.path}")

    def map_fd(self, name: str) -> int:
        return _check_rc(lib().bpf_map__fd(self._map(name)), f"fd of map {name}")

    def set_max_entries(self, name: str, n: int) -> None:
        """Resizes map `name` before load."""
        _check_rc(lib().bpf_map__set_max_entries(self._map(name), n), f"resize map {name}")

    def max_entries(self, name: str) -> int:
        return lib().bpf_map__max_entries(self._map(name))

    def set_config(self, config: bytes) -> None:
        """Writes the object's `const volatile struct iot_config config` (section .rodata.config)
        before load."""
        sz = ctypes.c_size_t()
        data = lib().bpf_map__initial_value(self._map(".rodata.config"), ctypes.byref(sz))
        _check_ptr(data, f".rodata.config of {self.path}")
        if sz.value != len(config):
            raise LibbpfError(errno.EINVAL, f"config of {self.path} is {sz.value} bytes, not {len(config)}")
        ctypes.memmove(data, config, len(config))

    def load(self) -> None:
        _check_rc(lib().bpf_object__load(self._ptr), f"load {os.path.basename(self.path)}")

    def close(self) -> None:
        if self._ptr:
            lib().bpf_object__close(self._ptr)
            self._ptr = None


class Map:
    """Typed access to a map by fd: keys and values are bytes of fixed sizes."""

    def __init__(self, fd: int, key_size: int, value_size: int):
        self.fd, self.key_size, self.value_size = fd, key_size, value_size

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        _check_rc(lib().bpf_map_update_elem(self.fd, key, value, flags), "map update")

    def lookup(self, key: bytes) -> bytes | None:
        buf = ctypes.create_string_buffer(self.value_size)
        if lib().bpf_map_lookup_elem(self.fd, key, buf) < 0:
            return None
        return buf.raw

    def delete(self, key: bytes) -> bool:
        return lib().bpf_map_delete_elem(self.fd, key) == 0

    def take(self, key: bytes) -> bytes | None:
        """Deletes the entry and returns its value at that moment (None: there was none), in one
        BPF_MAP_LOOKUP_AND_DELETE_ELEM (hash maps: Linux 5.14+), so that nothing added between a
        read and the delete is lost; older kernels get a lookup, then a delete."""
        buf = ctypes.create_string_buffer(self.value_size)
        rc = lib().bpf_map_lookup_and_delete_elem(self.fd, key, buf)
        if rc == 0:
            return buf.raw
        err = -rc if rc != -1 else ctypes.get_errno()
        if err not in _UNSUPPORTED:
            return None  # ENOENT: no such entry
        value = self.lookup(key)
        self.delete(key)
        return value

    def all_keys(self) -> list[bytes]:
        out: list[bytes] = []
        cur = ctypes.create_string_buffer(self.key_size)
        nxt = ctypes.create_string_buffer(self.key_size)
        so = lib()
        prev = None
        while so.bpf_map_get_next_key(self.fd, prev, nxt) == 0:
            out.append(nxt.raw)
            ctypes.memmove(cur, nxt, self.key_size)
            prev = cur
        return out

    BATCH = 512  # entries per BPF_MAP_LOOKUP_BATCH call (hists: 320 KiB of values)

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every (key, value), read BATCH entries per syscall where the kernel
        can (hash maps, Linux 5.6+); else one get_next_key and one lookup per key, two syscalls
        per entry, which is what made a trace of a job with thousands of files expensive."""
        try:
            return self._items_batched()
        except LibbpfError as e:
            if e.errno not in _UNSUPPORTED:
                raise
        out = []
        for k in self.all_keys():
            v = self.lookup(k)
            if v is not None:
                out.append((k, v))
        return out

    def _items_batched(self) -> list[tuple[bytes, bytes]]:
        ks, vs = self.key_size, self.value_size
        out: list[tuple[bytes, bytes]] = []
        for kraw, vraw in self._batches():
            # split into entries in C (a "Ns" field keeps every byte, trailing zeros too):
            # half the time of slicing in a Python loop
            out.extend(zip(map(_first, struct.iter_unpack(f"{ks}s", kraw)),
                           map(_first, struct.iter_unpack(f"{vs}s", vraw)), strict=True))
        return out

    def _batches(self):
        """(keys, values) of BATCH entries at most at a time, as raw bytes, n keys then n values."""
        ks, vs, n = self.key_size, self.value_size, self.BATCH
        keys = ctypes.create_string_buffer(ks * n)
        values = ctypes.create_string_buffer(vs * n)
        for _, got in self._lookup_batches(keys, values, n, accumulate=False):
            # copy out only the filled part of the buffers
            yield ctypes.string_at(keys, got * ks), ctypes.string_at(values, got * vs)

    def _lookup_batches(self, keys, values, capacity: int, accumulate: bool,
                        refill: bool = False, delete: bool = False):
        """BPF_MAP_LOOKUP_BATCH (`delete`: BPF_MAP_LOOKUP_AND_DELETE_BATCH) until the whole map
        is read, BATCH entries a call at most into `keys` and `values` (buffers of `capacity`
        entries): each call's at their start, or, `accumulate`, after the calls' before.
        Yields (first entry, entries) of each call; with `refill`, (-1, 0) when the buffers
        are full, and fills them again from their start once the caller has taken what they
        hold."""
        so, ks, vs = lib(), self.key_size, self.value_size
        call = so.bpf_map_lookup_and_delete_batch if delete else so.bpf_map_lookup_batch
        token = [ctypes.create_string_buffer(max(ks, 8)) for _ in range(2)]  # hash: a bucket
        n, first = 0, True
        while True:
            at = n if accumulate else 0
            if refill and at >= capacity:
                yield -1, 0
                n = at = 0
            count = ctypes.c_uint32(min(self.BATCH, capacity - at))
            if not count.value:
                return
            rc = call(self.fd, None if first else token[0], token[1],
                      ctypes.addressof(keys) + at * ks, ctypes.addressof(values) + at * vs,
                      ctypes.byref(count), None)
            if rc == -errno.ENOSPC and refill and at:
                # the next bucket of a hash map has more entries than the room left: the same
                # call again into emptied buffers (the kernel did not move past that bucket)
                yield -1, 0
                n = 0
                continue
            if rc < 0 and rc != -errno.ENOENT:  # ENOENT: the last batch (count entries)
                raise LibbpfError(-rc, f"map lookup batch: {os.strerror(-rc)}")
            yield at, count.value
            n += count.value
            if rc < 0:
                return
            ctypes.memmove(token[0], token[1], len(token[0]))
            first = False

    CHUNK = 16384  # entries raw_chunks reads before handing them over (1.3 MiB for file_stats)
    # (key size, value size, CHUNK) -> the two buffers raw_chunks fills, shared by the maps of
    # those sizes: the per-file and per-folder maps of both buffers are read one after the other
    _chunks: ClassVar[dict[tuple[int, int, int], tuple[ctypes.Array, ctypes.Array]]] = {}

    def raw_chunks(self, delete: bool = False) -> Iterator[tuple[memoryview, memoryview]]:
        """Every key and every value, CHUNK entries at a time (n keys, then n values in the same
        order) for decoding in bulk (numpy), with no Python object per entry: views of two
        buffers made once and filled again for each chunk, so that a chunk is used before the
        next is asked for, and the next map's reading starts after this one's ends. A map of
        131 072 entries read whole took 10 MiB of buffers, held by the tracer for good.
        `delete`: each entry is deleted as it is read (a map no program writes to any more:
        one that adds to an entry after it was read loses that)."""
        ks, vs = self.key_size, self.value_size
        chunk = Map._chunks.get((ks, vs, self.CHUNK))
        if chunk is None:
            chunk = Map._chunks[ks, vs, self.CHUNK] = (
                ctypes.create_string_buffer(ks * self.CHUNK),
                ctypes.create_string_buffer(vs * self.CHUNK))
        keys, values = chunk
        n = 0
        try:
            for at, got in self._lookup_batches(keys, values, self.CHUNK, accumulate=True,
                                                refill=True, delete=delete):
                if at < 0:
                    yield memoryview(keys)[:n * ks], memoryview(values)[:n * vs]
                    n = 0
                else:
                    n = at + got
        except LibbpfError as e:
            if e.errno not in _UNSUPPORTED or n:
                raise
            yield self._raw_items_one_by_one(delete)
            return
        if n:
            yield memoryview(keys)[:n * ks], memoryview(values)[:n * vs]

    def _raw_items_one_by_one(self, delete: bool) -> tuple[memoryview, memoryview]:
        items = self.items()
        for k, _ in items if delete else ():
            self.delete(k)
        return (memoryview(b"".join(k for k, _ in items)),
                memoryview(b"".join(v for _, v in items)))


def _in_use(words):
    """The indices of the rows of `words` (a mapped array's, as u64 words) whose first word is
    not zero. The first words are copied first: nonzero() must not see them change under it."""
    return words[:, 0].copy().nonzero()[0]


class MappedArray:
    """A BPF array map made with BPF_F_MMAPABLE, read in place through mmap (no syscall)."""

    def __init__(self, fd: int, value_size: int, max_entries: int, writable: bool = False):
        self.value_size, self.max_entries = value_size, max_entries
        if value_size % 8:
            raise ValueError("MappedArray: values must be whole u64 words")
        size = value_size * max_entries
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
        self._words = None  # a numpy view, made on first use (numpy loads after attach)

    @property
    def words(self):
        """The entries as rows of little-endian u64 words, in place (a numpy view)."""
        if self._words is None:
            import numpy as np

            self._words = np.frombuffer(self._mm, dtype="<u8").reshape(self.max_entries, -1)
        return self._words

    def held(self, start: int = 0, stop: int | None = None):
        """(indices, rows): the entries of [start, stop) whose first 8 bytes are not zero, and
        a copy of them as rows of u64 words. The kernel changes entries meanwhile: one freed
        between the two steps comes back with a first word of 0."""
        words = self.words[start:stop]
        index = _in_use(words)
        return index + start, words[index]

    def close(self) -> None:
        self._words = None
        self._mm.close()


def take_rows(fd: int, value_size: int, start: int, stop: int):
    """The entries of [start, stop) of BPF_F_MMAPABLE array `fd` whose first 8 bytes are not
    zero, as a copy in rows of u64 words; then all of [start, stop) is zeroed. Only the pages
    of those entries are mapped, and only during the call: the kernel maps every page of an
    array's mapping at mmap(), so one kept mapped is resident in full, used or not."""
    import numpy as np

    if value_size % 8:
        raise ValueError("take_rows: values must be whole u64 words")
    if stop <= start:
        return np.empty((0, value_size // 8), dtype="<u8")
    page = PAGE_SIZE
    first = start * value_size // page * page
    end = stop * value_size
    mm = mmap.mmap(fd, end - first, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                   offset=first)
    try:
        skip = start * value_size - first
        words = np.frombuffer(mm, dtype="<u8", count=(end - first - skip) // 8,
                              offset=skip).reshape(stop - start, -1)
        rows = words[_in_use(words)]
        words[:] = 0
        del words  # the view must go before the mapping can close
    finally:
        mm.close()
    return rows


BPF_MAP_TYPE_HASH = 1
BPF_MAP_TYPE_ARRAY = 2
BPF_F_MMAPABLE = 1 << 10


class _MapCreateOpts(ctypes.Structure):  # struct bpf_map_create_opts, up to map_extra
    _fields_ = [("sz", ctypes.c_size_t), ("btf_fd", ctypes.c_uint32),
                ("btf_key_type_id", ctypes.c_uint32), ("btf_value_type_id", ctypes.c_uint32),
                ("btf_vmlinux_value_type_id", ctypes.c_uint32), ("inner_map_fd", ctypes.c_uint32),
                ("map_flags", ctypes.c_uint32), ("map_extra", ctypes.c_uint64)]


def create_map(map_type: int, key_size: int, value_size: int, max_entries: int,
               map_flags: int = 0) -> Map:
    """A new BPF map of this process (freed when its fd closes): a map to test against."""
    opts = _MapCreateOpts(sz=ctypes.sizeof(_MapCreateOpts), map_flags=map_flags)
    fd = _check_rc(lib().bpf_map_create(map_type, b"iotrace_test", key_size, value_size,
                                        max_entries, ctypes.byref(opts)), "bpf_map_create")
    return Map(fd, key_size, value_size)


class RingBuffer:
    """Reads a BPF ring buffer; `on_sample(data: bytes)` runs for each record during poll()."""

    def __init__(self, fd: int, on_sample: Callable[[bytes], None]):
        def cb(_ctx, data, size):
            on_sample(ctypes.string_at(data, size))
            return 0

        self._cb = RING_SAMPLE_FN(cb)  # keep a reference: libbpf calls it later
        self._ptr: int | None = _check_ptr(
            lib().ring_buffer__new(fd, self._cb, None, None), "ring_buffer__new"
        )

    def poll(self, timeout_ms: int) -> int:
        """Waits up to `timeout_ms` for a wakeup, then takes every record there is: the
        programs wake the reader only when the buffer fills up (events_wakeup in
        bpf/maps.bpf.h), so most records are taken here without one."""
        n = lib().ring_buffer__poll(self._ptr, timeout_ms)
        if n < 0 and n != -errno.EINTR:
            _check_rc(n, "ring_buffer__poll")
        m = lib().ring_buffer__consume(self._ptr)
        if m < 0 and m != -errno.EINTR:
            _check_rc(m, "ring_buffer__consume")
        return max(n, 0) + max(m, 0)

    def close(self) -> None:
        if self._ptr:
            lib().ring_buffer__free(self._ptr)
            self._ptr = None


@dataclass(frozen=True)
class ProgStats:
    """What the kernel counted for one program while BPF stats were on (cumulative)."""

    run_cnt: int
    run_time_ns: int
    recursion_misses: int | None  # None: the kernel predates the field (< 5.12)


def prog_stats(fd: int) -> ProgStats:
    """run_cnt, run_time_ns and recursion_misses of a loaded program, from BPF_OBJ_GET_INFO_BY_FD
    (all 0 unless BPF stats are enabled: see enable_stats)."""
    buf = ctypes.create_string_buffer(PROG_INFO_SIZE)
    size = ctypes.c_uint32(PROG_INFO_SIZE)
    _check_rc(lib().bpf_obj_get_info_by_fd(fd, buf, ctypes.byref(size)), "BPF_OBJ_GET_INFO_BY_FD")
    raw = buf.raw

    def u64(off: int) -> int | None:
        return int.from_bytes(raw[off:off + 8], "little") if size.value >= off + 8 else None

    return ProgStats(u64(PROG_INFO_RUN_CNT) or 0, u64(PROG_INFO_RUN_TIME_NS) or 0,
                     u64(PROG_INFO_RECURSION_MISSES))


def enable_stats() -> int:
    """Turns on the kernel's run-time statistics of every BPF program (BPF_ENABLE_STATS with
    BPF_STATS_RUN_TIME) and returns an fd: they stay on while it is open, and the kernel turns
    them back off when the last such fd closes (also when the process is killed), unless
    kernel.bpf_stats_enabled was set by sysctl. Raises LibbpfError (EPERM without
    CAP_SYS_ADMIN, EINVAL before Linux 5.8)."""
    return _check_rc(lib().bpf_enable_stats(BPF_STATS_RUN_TIME), "BPF_ENABLE_STATS")


BTF_KIND_STRUCT, BTF_KIND_TYPEDEF = 4, 8
_vmlinux_btf: int | None = None


def has_btf_tracepoint(name: str) -> bool:
    """True when the kernel's BTF knows tracepoint `name` (tp_btf programs can attach to it):
    it has the typedef btf_trace_<name>."""
    return _btf_has(f"btf_trace_{name}", BTF_KIND_TYPEDEF)


def btf_has_struct(name: str) -> bool:
    """True when the kernel's BTF has `struct name`: a kernel feature seen without bpf(), so
    without privilege."""
    return _btf_has(name, BTF_KIND_STRUCT)


def _btf_has(name: str, kind: int) -> bool:
    """The kernel's BTF is parsed once for a run of questions (libbpf's own lookup parses it
    again on every call, ~10 ms each), until forget_vmlinux_btf()."""
    global _vmlinux_btf
    so = lib()
    if _vmlinux_btf is None:
        _vmlinux_btf = so.btf__load_vmlinux_btf() or 0
    if not _vmlinux_btf:
        return False
    return so.btf__find_by_name_kind(_vmlinux_btf, name.encode(), kind) > 0


def forget_vmlinux_btf() -> None:
    """Frees the kernel's parsed BTF: megabytes that a tracer, once its programs are chosen,
    would hold for the rest of its run. A later question parses it again."""
    global _vmlinux_btf
    if _vmlinux_btf:
        lib().btf__free(_vmlinux_btf)
    _vmlinux_btf = None


def num_possible_cpus() -> int:
    return _check_rc(lib().libbpf_num_possible_cpus(), "libbpf_num_possible_cpus")


def probe_ringbuf() -> bool:
    """Creates a ring buffer map: needs privilege (without it libbpf answers 0, as for a kernel
    that lacks the map type)."""
    return lib().libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, None) == 1
