"""Naming files the kernel sent no record of (tracer.live.files.FileTable), on real folders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import kernel_dev, needs_root
from tracer.core.abi import FileEvent
from tracer.live import files as files_module
from tracer.live.files import FOLDER, SIBLING, UNKNOWN, FileTable, _generation


def test_files_of_a_folder_first_read_by_a_process_that_has_exited(tmp_path: Path) -> None:
    """The folder's record came from a process (a DataLoader worker) that has exited since:
    its other files are still named from the folder's listing, not left "(inode N in ...)"."""
    files = [tmp_path / f"f{i}.bin" for i in range(3)]
    for f in files:
        f.write_bytes(b"x")
    st = [f.stat() for f in files]
    dev, dir_ino = kernel_dev(st[0].st_dev), tmp_path.stat().st_ino
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        table = FileTable()
        table.on_event(FileEvent(worker.pid, dev, st[0].st_ino, 3, "ext4",
                                 (files[0].name, *reversed(tmp_path.parts[1:])), False, False,
                                 dir_ino=dir_ino))
        first = table.get(dev, st[1].st_ino, 0, None, dir_ino)  # listed through its root
        assert (first.path, first.path_source) == (str(files[1]), SIBLING)
    finally:
        worker.kill()
        worker.wait()
    later = table.get(dev, st[2].st_ino, 0, None, dir_ino)
    assert (later.path, later.path_source) == (str(files[2]), SIBLING)
    gone = table.get(dev, st[2].st_ino + 10**9, 0, None, dir_ino)
    assert gone.path_source == UNKNOWN  # a file the folder does not have stays unnamed


def folder_record(table: FileTable, first: Path, pid: int) -> tuple[int, int]:
    """The kernel's record of `first`, which makes its folder known; (dev, folder inode)."""
    st, folder = first.stat(), first.parent
    dev = kernel_dev(st.st_dev)
    table.on_event(FileEvent(pid, dev, st.st_ino, _generation(str(first)) or 0, "ext4",
                             (first.name, *reversed(folder.parts[1:])), False, False,
                             dir_ino=folder.stat().st_ino))
    return dev, folder.stat().st_ino


def test_a_folder_the_kernel_added_folders_up_in_is_named(tmp_path: Path, monkeypatch) -> None:
    """Past a process's keep of folders the kernel adds their reads up in the folders'
    parent: a folder of no record, named as the parent of one that has one; asked again once
    a folder is known since, though the table of folders is full (here at one)."""
    monkeypatch.setattr(files_module, "MAX_FOLDERS", 1)
    (tmp_path / "data" / "c0").mkdir(parents=True)
    (tmp_path / "data" / "c0" / "f0").write_bytes(b"x")
    table = FileTable()
    dev, _ = folder_record(table, tmp_path / "data" / "c0" / "f0", os.getpid())
    up = table.folder(dev, (tmp_path / "data").stat().st_ino)
    assert (up.path, up.path_source) == (f"{tmp_path / 'data'}/", FOLDER)
    unknown = table.folder(dev, (tmp_path / "data").stat().st_ino + 10**9)
    assert unknown.path.startswith("(folder inode")
    (tmp_path / "more" / "c1").mkdir(parents=True)
    (tmp_path / "more" / "c1" / "f1").write_bytes(b"x")
    folder_record(table, tmp_path / "more" / "c1" / "f1", os.getpid())
    assert table.folder(dev, (tmp_path / "more").stat().st_ino).path == f"{tmp_path / 'more'}/"


def test_every_parent_the_kernel_added_folders_up_in_is_named(tmp_path: Path) -> None:
    """Several such parents asked for in a row (an interval's rows: `import torch` past the
    keep adds up dozens of __pycache__ folders in their parents), each named, though no
    folder became known between the asks."""
    table = FileTable()
    parents = [tmp_path / f"pkg{i}" for i in range(5)]
    for p in parents:
        (p / "__pycache__").mkdir(parents=True)
        (p / "__pycache__" / "m.pyc").write_bytes(b"x")
        dev, _ = folder_record(table, p / "__pycache__" / "m.pyc", os.getpid())
    for p in parents:
        assert table.folder(dev, p.stat().st_ino).path == f"{p}/"


def test_the_loops_read_in_flight_is_named_from_its_folder(tmp_path: Path) -> None:
    """The training loop's read in flight at an interval's end, of a file of a known folder
    that sent no record (and closed by the time the row is made), is named from the folder:
    the `threads` row's `syscall_path`."""
    from tracer.core import abi
    from tracer.live.aggregate import Aggregator, Reading
    from tracer.live.clock import Clock
    from tracer.live.processes import ProcessTable

    files = [tmp_path / f"s{i}.bin" for i in range(2)]
    for f in files:
        f.write_bytes(b"x")
    table = FileTable()
    dev, dir_ino = folder_record(table, files[0], os.getpid())
    st = files[1].stat()
    tid = 4242
    thread = abi.THREAD_TIME.pack(tid, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                  0, 0, b"python")
    read = next(code for code, name in abi.OPS.items() if name == "read")
    call = (50, read, abi.TARGET_FILE, dev, st.st_ino,
            _generation(str(files[1])) or 0, dir_ino)
    agg = Aggregator(ProcessTable(Clock()), files=table)
    rows = agg.interval(Reading({}, threads={tid: thread}, monotonic_ns=100,
                                in_flight={tid: call}), ts_ns=1).threads
    assert [(r["syscall_op"], r["syscall_path"]) for r in rows] == [("read", str(files[1]))]


def test_top_files_named_again_once_forgotten(tmp_path: Path, monkeypatch) -> None:
    """The summary's top files: one whose name the table forgot (it keeps the last
    MAX_NAMED) is named again from its folder."""
    from tracer.core.model import FileTotals
    from tracer.render.summary import render_top_files

    monkeypatch.setattr(files_module, "MAX_NAMED", 1)
    files = [tmp_path / f"f{i}.bin" for i in range(3)]
    for f in files:
        f.write_bytes(b"x")
    table = FileTable()
    dev, dir_ino = folder_record(table, files[0], os.getpid())
    keys = [(dev, f.stat().st_ino, _generation(str(f)) or 0) for f in files]
    for key in keys[1:]:  # the last one named pushes out the one before
        assert table.get(*key, None, dir_ino).path_source == SIBLING
    totals = FileTotals(dir_ino=dir_ino)
    totals.add("read", 1, 1, 1000, 0, 0, 1000)
    lines = render_top_files({(os.getpid(), *keys[1]): totals}, table)
    assert lines[-1].endswith(str(files[1]))


def test_a_file_of_another_generation_is_not_named(tmp_path: Path) -> None:
    """A key whose generation is not the inode's now (the file was deleted and its number
    given to another) must not take the new file's name, by handle or by listing."""
    files = [tmp_path / f"f{i}.bin" for i in range(2)]
    for f in files:
        f.write_bytes(b"x")
    gen = _generation(str(files[1]))
    if not gen:
        pytest.skip("this file system gives no inode generations")
    table = FileTable()
    dev, dir_ino = folder_record(table, files[0], os.getpid())
    ino = files[1].stat().st_ino
    stale = table.get(dev, ino, (gen + 1) % 2**32, None, dir_ino)
    assert stale.path_source == UNKNOWN
    named = table.get(dev, ino, gen, None, dir_ino)
    assert (named.path, named.path_source) == (str(files[1]), SIBLING)


@needs_root
@pytest.mark.kernel
def test_files_are_named_from_a_handle_without_listing_their_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With CAP_DAC_READ_SEARCH, a file of a known folder on ext4 is named from a handle of its
    inode: its folder is never listed (a listing reads every entry: a thousand per ImageNet
    class folder, for each file a row names)."""
    if files_module._handle_format(str(tmp_path), tmp_path.stat().st_ino) is not True:
        pytest.skip("this file system has no {inode, generation} handles")
    files = [tmp_path / f"f{i}.bin" for i in range(50)]
    for f in files:
        f.write_bytes(b"x")

    def no_listing(folder: str, pid: int):
        raise AssertionError(f"{folder} was listed")

    monkeypatch.setattr(files_module, "_list_folder", no_listing)
    table = FileTable()
    dev, dir_ino = folder_record(table, files[0], os.getpid())
    for f in files[1:]:
        info = table.get(dev, f.stat().st_ino, _generation(str(f)) or 0, None, dir_ino)
        assert (info.path, info.path_source) == (str(f), SIBLING)
    assert table.lost_paths() == (49, 0)
    table.close_folders()  # what the Aggregator does after each interval's rows
    held = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")]
    assert str(tmp_path) not in held  # nothing keeps the file system from being unmounted


def record(dev: int, ino: int, gen: int, dir_ino: int, path: str, flags: int = 0) -> bytes:
    """A first-sight record as the ring buffer gives it: its names packed, the base name first."""
    from tracer.core import abi

    names = "\0".join(reversed(path.strip("/").split("/"))).encode() + b"\0"
    return abi.FILE_EVENT_HEAD.pack(abi.EVENT_FILE, os.getpid(), dev, 7, ino,
                                    path.count("/"), flags, gen, len(names), dir_ino,
                                    b"tmpfs") + names


def test_records_of_a_known_folder_are_decoded_when_a_row_names_them(monkeypatch) -> None:
    """A DataLoader's batch files in /dev/shm each send a record (written, then deleted): those
    of a folder already known wait as they came until a row asks for the name, which is then
    the record's, though the file is gone. A new folder's record, and one whose path the
    kernel cut, are decoded at once (the folder names its other files; the cut path is
    completed from the fd while it is open)."""
    from tracer.core import abi

    decoded = []
    monkeypatch.setattr(files_module, "decode_file_event",
                        lambda raw: decoded.append(raw) or abi.decode_file_event(raw))
    table, dev, shm = FileTable(), 23, 1000
    table.on_record(record(dev, 1, 5, shm, "/dev/shm/torch_1_0"))
    assert len(decoded) == 1 and table.folders[(dev, shm)][0] == "/dev/shm"
    batches = [record(dev, ino, 5, shm, f"/dev/shm/torch_1_{ino}",
                      abi.FILE_DELETED if ino % 2 else 0) for ino in range(2, 1002)]
    for raw in batches:
        table.on_record(raw)
    assert len(decoded) == 1  # none of the thousand yet
    named = table.get(dev, 7, 5, os.getpid(), shm)
    assert (named.path, named.path_source, named.fs_type) == (
        "/dev/shm/torch_1_7 (deleted)", "kernel", "tmpfs")
    assert table.get(dev, 8, 5).path == "/dev/shm/torch_1_8" and len(decoded) == 3
    assert table.get(dev, 8, 6, None, shm).path_source == UNKNOWN  # another generation
    table.on_record(record(dev, 5000, 5, shm, "/dev/shm/cut", abi.FILE_TRUNCATED))
    assert len(decoded) == 4
    table.on_record(record(dev, 8, 5, shm, "/dev/shm/renamed"))  # its record sent again
    assert table.get(dev, 8, 5).path == "/dev/shm/renamed"
