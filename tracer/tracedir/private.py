"""Trace files are readable by their owner only: they hold full command lines, paths and
process names. Modes are set outright (not left to the umask, which may be 000)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

FILE_MODE = 0o600
DIR_MODE = 0o700


def open_private(path: str | os.PathLike[str]) -> BinaryIO:
    """Opens `path` for writing (created or truncated), mode 0600 whatever it had."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a file left from before keeps its mode through O_CREAT
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def mkdir_private(path: Path) -> None:
    """Creates folder `path` (and missing parents), mode 0700 whatever the umask."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)
