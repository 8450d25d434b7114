"""A workload for a tracer that falls behind: opens and reads every file under a directory (its
subfolders too) once, in name order, after SIGUSR1 (once "r" is on the ready fd); writes "d"
when done and exits on a second SIGUSR1. Run as `python many_files.py DIR READY_FD`."""

import os
import signal
import subprocess
import sys
from pathlib import Path


def start(folder: Path, names) -> tuple[subprocess.Popen, int]:
    """Makes `names` (64 bytes each; "sub/name" in a subfolder) in the new `folder` and starts
    this workload on it, set up and waiting for SIGUSR1: (the process, the fd its "d" comes on)."""
    folder.mkdir()
    for name in names:
        path = folder / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * 64)
    ready_r, ready_w = os.pipe()
    work = subprocess.Popen([sys.executable, __file__, str(folder), str(ready_w)],
                            pass_fds=(ready_w,))
    os.close(ready_w)
    if os.read(ready_r, 1) != b"r":
        raise RuntimeError("many_files.py did not get ready")
    return work, ready_r


def main() -> None:
    folder, ready = sys.argv[1], int(sys.argv[2])
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    names = sorted(os.path.join(d, n) for d, _, files in os.walk(folder) for n in files)
    os.write(ready, b"r")
    signal.sigwait({signal.SIGUSR1})
    for name in names:
        fd = os.open(name, os.O_RDONLY)
        os.read(fd, 4096)
        os.close(fd)
    os.write(ready, b"d")
    signal.sigwait({signal.SIGUSR1})


if __name__ == "__main__":
    main()
