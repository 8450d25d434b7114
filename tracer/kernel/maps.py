"""Reads the loaded object's maps: the kernel boundary's stage that makes a reading.

:class:`Maps` takes the cumulative counters (histograms, thread times, who used each disk), the
syscall each main thread is in, what the kernel dropped (map-full inserts, block requests whose
end no program saw), and drains an ended interval's per-file counters after flipping the epoch.
It hands raw bytes (and arrays) on; every layout is decoded in tracer/core/abi.
"""

from __future__ import annotations

import itertools
import mmap
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from tracer.core import abi
from tracer.kernel import libbpf as _libbpf
from tracer.kernel.libbpf import Map, MappedArray, take_rows
from tracer.kernel.loader import BUFFERED_MAPS, FILE_LOG, RQ_SLOTS, Loader

if TYPE_CHECKING:
    import numpy as np

# At the end of a trace, how long the disks of held block records are watched for a moment with
# nothing in flight (block_unseen): a job on the same disk keeps a request in flight 62 % of the
# time here (iowork --direct, queue depth 1), so one look misses a record that ended unseen.
LEFTOVER_WAIT_S = 0.5
LOG_CHUNK = 4096  # records of the log taken at a time: a drain holds a chunk's copies, not the log's


class Maps:
    """The maps of a loaded Loader, read (and entries freed) from user space."""

    def __init__(self, loader: Loader):
        fd = loader.map_fd
        bits = loader.slot_bits
        self._loader = loader
        self.threads = Map(fd("threads"), abi.TGID.size, abi.THREAD_TIME.size)
        self.hists = Map(fd("hists"), abi.HIST_KEY.size, abi.HIST_SIZE)
        # the per-file and per-folder counters, a map per interval buffer (maps.bpf.h)
        self.file_stats, self.folder_stats = (
            tuple(Map(fd(part), abi.FILE_KEY.size, abi.FILE_STAT.size)
                  for part in BUFFERED_MAPS[m]) for m in ("file_stats", "folder_stats"))
        # the files folded at their close (slots.bpf.h, fold_on_close), and what they were
        # weighed against
        self.fold_stats = tuple(Map(fd(part), abi.FILE_KEY.size, abi.FOLD_STAT.size)
                                for part in BUFFERED_MAPS["fold_stats"])
        self._fold_groups = Map(fd("fold_groups"), 8, abi.FOLD_GROUP.size)
        self.read_files_fd = fd("read_files")  # a bit per file read whole (live/rereads.py)
        self._read_files_words = loader.read_files_words
        self._rcu_sync = Map(fd("rcu_sync"), 4, 4)
        self._rcu_inner = fd("rcu_inner")
        # by abi.HIST_SLOTS, abi.FILE_SLOTS
        self._slots = [MappedArray(fd("hist_slots"), abi.HIST_SLOT.size, 1 << bits["hist_slots"]),
                       MappedArray(fd("file_slots"), abi.FILE_SLOT.size,
                                   2 << bits["file_slots"], writable=True)]
        self._file_log_fd = fd(FILE_LOG)  # mapped only while drained: libbpf.take_rows says why
        self._file_log_used = Map(fd("file_log_used"), 4, 8)
        self._file_log_entries = loader.file_log_entries  # per buffer
        # Where the last reading found each key in a slot table: [(index, tag)], by raw key.
        self._hist_at: dict[bytes, list[tuple[int, int]]] = {}
        self.epoch = Map(fd(".data.epoch"), 4, 8)
        self.max_epoch = 0
        ncpu = _libbpf.num_possible_cpus()
        self._map_full = Map(fd("map_full"), 4, 8 * ncpu)
        self._unseen = Map(fd("block_unseen"), 4, 8 * ncpu)
        self._rq_slots = Map(fd(RQ_SLOTS), 4, abi.RQ_SLOT.size)
        self._rq_starts = Map(fd("rq_starts"), 8, abi.RQ_START.size)
        self._sys_starts = Map(fd("sys_starts"), abi.TGID.size, abi.SYS_START.size)
        self._write_spans = Map(fd("write_spans"), abi.TGID.size, abi.WRITE_SPAN.size)
        self._block_users = Map(fd("block_users"), abi.BLOCK_USER_KEY.size, abi.BLOCK_USER.size)
        self._cpu_waits = Map(fd("cpu_waits"), abi.CPU_WAIT_KEY.size, abi.CPU_WAIT.size)
        self._cpu_waits_freed = Map(fd("cpu_waits_freed"), 4, 8)
        self._cpu_waits_deleted = 0
        self._max_entries = loader.max_entries

    def close(self) -> None:
        """Unmaps the slot tables; safe to call twice."""
        for slots in self._slots:
            slots.close()
        self._slots.clear()

    # -- cumulative counters ----------------------------------------------------------------------
    def _read_both(self, m: Map, table: int, add: Callable[[bytes, bytes], bytes]
                   ) -> tuple[dict[bytes, bytes], dict[bytes, list[tuple[int, int]]]]:
        """Every key of hash map `m` and of its slot table, a key found in both added up with
        `add`; and the slots each key was found in."""
        out = dict(m.items())
        at: dict[bytes, list[tuple[int, int]]] = {}
        for where, key, value in abi.decode_held_slots(table, *self._slots[table].held()):
            at.setdefault(key, []).append(where)
            other = out.get(key)
            out[key] = value if other is None else add(other, value)
        return out, at

    def read_hists(self) -> dict[bytes, bytes]:
        """Cumulative histograms by raw key (see abi.decode_hist_key / abi.decode_hist): those
        of the slot table and of the `hists` map, added up for a key found in both."""
        out, self._hist_at = self._read_both(self.hists, abi.HIST_SLOTS, abi.add_hists)
        return out

    def delete_hists(self, keys: list[bytes]) -> None:
        """Frees these keys' histograms (processes gone), in the map and in the slot table."""
        for k in keys:
            self.hists.delete(k)
            for i, tag in self._hist_at.pop(k, ()):
                self._loader.free_slot(abi.HIST_SLOTS, i, tag)

    def read_block_users(self) -> dict[bytes, bytes]:
        """Who used each disk (block.bpf.c's block_users), cumulative, by raw key
        (abi.decode_block_user_key; values abi.decode_block_user): the traced processes'
        requests and every other process's, by cgroup and name."""
        return dict(self._block_users.items())

    def read_cpu_waits(self) -> dict[bytes, bytes]:
        """Who had the CPUs while traced threads waited for one (sched.bpf.c's cpu_waits),
        cumulative, by raw key (abi.decode_cpu_wait_key; values abi.decode_cpu_wait)."""
        return dict(self._cpu_waits.items())

    def delete_cpu_waits(self, keys: list[bytes]) -> None:
        """Frees these keys of `cpu_waits` (processes gone), and tells the kernel how many it
        has freed in all: its named keys in use are those it made less those."""
        self._cpu_waits_deleted += sum(self._cpu_waits.delete(k) for k in keys)
        if keys:
            self._cpu_waits_freed.update(bytes(4), self._cpu_waits_deleted.to_bytes(8, "little"))

    def read_threads(self) -> dict[int, bytes]:
        """Per-thread time accounting by thread id (abi.decode_thread_time)."""
        return {abi.decode_u32(k): v for k, v in self.threads.items()}

    def delete_threads(self, tids: list[int]) -> None:
        for tid in tids:
            self.threads.delete(abi.TGID.pack(tid))

    def syscalls_in_flight(self, pids) -> dict[int, tuple[int, int, int, int, int, int, int]]:
        """The syscall each process's main thread is in right now, by pid: (start, op, target,
        dev, ino, gen, dir_ino) of its file, start in CLOCK_MONOTONIC ns, for the traced
        syscalls only.
        Task storage is looked up by a pidfd (the loader's), which names the thread-group
        leader: the training loop's thread."""
        out = {}
        for pid in pids:
            fd = self._loader.pidfd(pid)
            if fd is None:
                continue  # gone
            raw = self._sys_starts.lookup(abi.TGID.pack(fd))
            call = None if raw is None else abi.decode_sys_start(raw)
            if call is not None:
                out[pid] = call
        return out

    def write_spans(self, pids) -> dict[int, bytes]:
        """Each process's main thread's write spans (abi.decode_write_span), by pid, for those
        that ever opened a file for writing; looked up through a pidfd as syscalls_in_flight."""
        out = {}
        for pid in pids:
            fd = self._loader.pidfd(pid)
            raw = None if fd is None else self._write_spans.lookup(abi.TGID.pack(fd))
            if raw is not None:
                out[pid] = raw
        return out

    def read_files(self) -> np.ndarray:
        """The kernel's bitmap of the files read whole (maps.bpf.h, read_files) as bytes,
        writable, mapped until the array is dropped: the kernel maps an array's every page at
        mmap(), so kept mapped it would be resident in full for good."""
        size = self._read_files_words * 8
        return abi.read_files_bits(mmap.mmap(self.read_files_fd, size, mmap.MAP_SHARED,
                                             mmap.PROT_READ | mmap.PROT_WRITE))

    # -- an interval's per-file counters -------------------------------------------------------
    def next_epoch(self) -> int:
        """Starts a new interval: the programs add to the other per-file buffer (max_epoch & 1,
        slots.bpf.h); returns the interval that ended, whose buffer drain_file_stats takes."""
        self.max_epoch += 1
        self.epoch.update(b"\0\0\0\0", self.max_epoch.to_bytes(8, "little"))
        return self.max_epoch - 1

    def drain_next(self, row_dtype=None) -> abi.Drain:
        """Starts a new per-file buffer and takes the old one out (drain_file_stats): at an
        interval's end, and before it when the kernel asks (slots.bpf.h, ask_drain)."""
        return self.drain_file_stats(self.next_epoch() & 1, row_dtype)

    def drain_file_stats(self, buf: int, row_dtype=None) -> abi.Drain:
        """The per-file, per-folder and folded counters of the interval that used buffer `buf`
        (the interval next_epoch() just ended), taken out of the kernel: abi.Drain, its arrays
        of abi.file_counts_dtype(), or of `row_dtype`, which begins with its fields, the others
        zero (made in place: a copy to add columns was the largest array of an interval; the
        folded rows need its re-read fields). First waits until no program still adds to that
        buffer (one that read max_epoch before next_epoch() changed it), so nothing comes
        after."""
        import numpy as np

        self._rcu_sync.update(b"\0\0\0\0", self._rcu_inner.to_bytes(4, "little"))
        slots = self._slots[abi.FILE_SLOTS]
        half = slots.max_entries // 2
        lo = buf * half
        _, rows = slots.held(lo, lo + half)
        slots.words[lo:lo + half] = 0  # the next interval but one starts from empty slots
        # the buffer's log: its records in use, taken in order (a count past the end: all)
        key = buf.to_bytes(4, "little")
        used = min(abi.decode_u64(self._file_log_used.lookup(key)), self._file_log_entries)
        lo = buf * self._file_log_entries
        logged = (take_rows(self._file_log_fd, abi.FILE_SLOT.size, i, min(i + LOG_CHUNK, lo + used))
                  for i in range(lo, lo + used, LOG_CHUNK))
        dtype = row_dtype or abi.file_counts_dtype()
        files = self._drain_map(self.file_stats[buf], "file_stats", dtype,
                                itertools.chain([rows], logged), len(rows) + used)
        self._file_log_used.update(key, bytes(8))
        folders = self._drain_map(self.folder_stats[buf], "folder_stats", dtype)
        folded, n_folded = [], []
        if "reread_bytes" in dtype.names:
            for keys, values in self.fold_stats[buf].raw_chunks(delete=True):
                n = len(keys) // abi.FILE_KEY.size
                folded.append(np.zeros(n, dtype=dtype))
                n_folded.append(np.zeros(n, dtype=np.int64))
                abi.fold_counts_into(folded[-1], n_folded[-1], keys, values)
        # the weights of the buffer's files start again from nothing at its next use
        for k, _ in self._fold_groups.items():
            if abi.fold_group_buf(k) == buf:
                self._fold_groups.delete(k)
        return abi.Drain(files, folders,
                         np.concatenate(folded) if folded else np.zeros(0, dtype=dtype),
                         np.concatenate(n_folded) if n_folded else np.zeros(0, dtype=np.int64))

    def _drain_map(self, m: Map, name: str, dtype, slot_rows: Iterable = (), n_slot_rows: int = 0):
        """The entries of a file_key -> file_stat map that no program adds to any more (an
        ended interval's buffer), taken out, after those of `slot_rows` (arrays of at most
        `n_slot_rows` rows in all, as abi.FILE_SLOT's words, those with a tag that is not their
        key's and those whose counters were folded left out), as rows of `dtype`. Read a chunk
        at a time into an array whose pages take memory only as rows are written (zero-filled:
        the fields past file_stat's are zero)."""
        import numpy as np

        size = (n_slot_rows + self._max_entries[name]) * dtype.itemsize
        out = np.ndarray(size // dtype.itemsize, dtype=dtype,
                         buffer=mmap.mmap(-1, size, mmap.MAP_PRIVATE))
        n = 0
        for rows in slot_rows:
            n += abi.file_slots_into(out[n:], rows)
        for keys, values in m.raw_chunks(delete=True):
            n += abi.file_counts_into(out[n:], keys, values)
        return out[:n]

    # -- what the kernel dropped ------------------------------------------------------------------
    @staticmethod
    def _percpu_sum(m: Map, index: int) -> int:
        """Slot `index` of a per-CPU array of u64, summed over the CPUs."""
        return abi.percpu_u64_sum(m.lookup(index.to_bytes(4, "little")))

    def map_full_drops(self) -> dict[str, int]:
        """Inserts the kernel refused because a map was full, by map (abi.MAP_FULL_MAPS),
        cumulative, summed over CPUs: each is an operation whose counts were lost."""
        return {name: self._percpu_sum(self._map_full, i)
                for i, name in enumerate(abi.MAP_FULL_MAPS)}

    def block_unseen(self, in_flight: Callable[[], Mapping[int, int]] | None = None,
                     wait_s: float = LEFTOVER_WAIT_S) -> tuple[int, int]:
        """(requests, bytes) of traced block requests that were issued and whose end no
        completion program saw (block.bpf.c, `block_unseen`), cumulative: those found when
        their address started a new request, and with `in_flight` (at the end of a trace: the
        requests each disk has in flight now, by device number) the records still held. A
        request still in flight holds one too: of each disk's records issued before this call,
        as many as the disk has requests in flight are taken to be those, the rest ended
        unseen. The disk is read again (for up to `wait_s`; 0: one look) until it has none in
        flight: then every record left ended unseen, which is exact even while other processes
        (another iotrace's job) use the disk. A disk never idle in that time keeps the best lower
        bound seen. The records stay where they are: the kernel counts one when its address
        starts a new request, by which time a later call no longer finds it held."""
        requests, nbytes = self._percpu_sum(self._unseen, 0), self._percpu_sum(self._unseen, 1)
        if in_flight is None:
            return requests, nbytes
        since_ns = time.monotonic_ns()  # the clock of bpf_ktime_get_ns()
        best: dict[int, tuple[int, int]] = {}  # disk -> (requests, bytes), the most found
        exact: set[int] = set()  # disks seen idle: their count is exact
        deadline = since_ns + int(wait_s * 1e9)
        while True:
            # in flight read before the records: a record of a request still in flight at
            # that read is held then, so records - in flight never counts one of those
            busy_now = in_flight()
            issued = self._issued_before(since_ns)
            for dev, lengths in issued.items():
                busy = busy_now.get(dev, len(lengths))  # unknown disk: none counted
                n = len(lengths) - busy
                if n > best.get(dev, (0, 0))[0]:
                    best[dev] = (n, sum(sorted(lengths)[:n]))  # the least it can be
                if busy == 0:
                    exact.add(dev)
            if issued.keys() <= exact or time.monotonic_ns() >= deadline:
                break
            time.sleep(0.0005)
        for n, b in best.values():
            requests, nbytes = requests + n, nbytes + b
        return requests, nbytes

    def _issued_before(self, since_ns: int) -> dict[int, list[int]]:
        """disk -> data_len of each held record of a traced request issued before `since_ns`
        (others' requests are recorded too, for block_users)."""
        held = [r for r in (abi.decode_rq_slot(v) for _, v in self._rq_slots.items()) if r]
        held += [abi.decode_rq_start(v) for _, v in self._rq_starts.items()]
        issued: dict[int, list[int]] = {}
        for r in held:
            if 0 < r.issue_ns < since_ns and r.tgid:
                issued.setdefault(r.dev, []).append(r.data_len)
        return issued
