"""Naming files the kernel sent no record of (tracer.live.files.FileTable), on real folders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tracer.core.abi import FileEvent
from tracer.live.files import SIBLING, UNKNOWN, FileTable


def kernel_dev(st_dev: int) -> int:
    return (os.major(st_dev) << 20) | os.minor(st_dev)


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
