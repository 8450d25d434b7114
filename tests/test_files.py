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
from tracer.live.files import SIBLING, UNKNOWN, FileTable, _generation


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
