"""The file reads one main process and its descendants did in one interval, as the diagnosis
keeps them: bounded (MAX_READ_PATHS files, MAX_READ_FOLDERS folders) and, once the interval is
kept, frozen into arrays (`Sums`; an hour of intervals is kept).
"""

from __future__ import annotations

import functools
import re
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from tracer.core.diagnosis.compact import shared
from tracer.core.diagnosis.thresholds import MAX_READ_FOLDERS, MAX_READ_PATHS
from tracer.core.model import FileRow
from tracer.core.units import MAX_SLOTS

# Reads that are not the data set: the interpreter, libraries and the system's own files.
_PSEUDO_FS = {"proc", "sysfs", "cgroup", "cgroup2", "devtmpfs", "devpts", "debugfs", "tracefs",
              "securityfs", "bpf", "configfs", "bdev", "pipefs", "sockfs", "anon_inodefs"}
_SYSTEM_ROOTS = ("/proc/", "/sys/", "/dev/", "/run/", "/etc/", "/lib/", "/lib64/", "/usr/lib/",
                 "/usr/lib64/", "/usr/local/lib/", "/usr/share/")
_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python3", "/__pycache__/")
_LIBRARY_NAME = re.compile(r"(\.(py|pyc|pyi|pyd|pth|so)|\.so(\.\d+)+|/pyvenv\.cfg)$")


@functools.lru_cache(maxsize=4096)  # every interval asks again about the same files
def is_library(path: str, fs_type: str) -> bool:
    """A file that is not the data set: the interpreter's and libraries' files (site-packages,
    .py, .pyc, .so), the system's (/etc, /usr/lib, ...) and pseudo file systems (/proc, /sys)."""
    return (fs_type in _PSEUDO_FS or path.startswith(_SYSTEM_ROOTS)
            or any(part in path for part in _LIBRARY_PARTS) or bool(_LIBRARY_NAME.search(path)))


@dataclass(slots=True)
class Reads:
    """File reads of one main process and its descendants in one interval."""

    bytes: int = 0
    missed: int = 0  # bytes that came from disk: pages missed, at most the bytes read per file
    files: dict[tuple[str, str], int] = field(default_factory=dict)  # (path, fs_type) -> bytes
    opens: int = 0
    # the files of folder rows (a folder's files added up, core/rollup.py), by (path, fs_type)
    folder_files: dict[tuple[str, str], int] = field(default_factory=dict)
    # folder -> [bytes read, of them read again (files read in an earlier interval), and of
    # those the bytes that missed the page cache]
    by_dir: dict[str, list[int]] = field(default_factory=dict)

    def add(self, path: str, fs: str, nbytes: int, missed: int,
            folder_files: int | None = None, max_paths: int | None = MAX_READ_PATHS,
            reread: int = 0, reread_missed: int = 0) -> None:
        """A file's read bytes, or a folder row's (`folder_files`: how many files it adds up).
        Past `max_paths` files, a file counts in its folder's entry, as one of its files.
        `reread`: of `nbytes`, those of a later pass, `reread_missed` of which came from disk."""
        self.bytes += nbytes
        self.missed += missed
        # a folder row's path is its folder's, with a "/" at the end
        folder = path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"
        if max_paths is not None:
            folder = nearest(folder, self.by_dir.__contains__, len(self.by_dir))
        acc = self.by_dir.setdefault(folder, [0, 0, 0])
        acc[0] += nbytes
        acc[1] += reread
        acc[2] += reread_missed
        key = (path, fs)
        if (folder_files is None and max_paths is not None and key not in self.files
                and len(self.files) >= max_paths):
            key, folder_files = (path.rsplit("/", 1)[0] + "/", fs), 1
        if folder_files is not None and max_paths is not None:
            key = (nearest(key[0], lambda p: (p, fs) in self.folder_files,
                            len(self.folder_files)), fs)
        self.files[key] = self.files.get(key, 0) + nbytes
        if folder_files is not None:
            self.folder_files[key] = self.folder_files.get(key, 0) + folder_files

    def merge(self, other: Reads) -> None:
        self.bytes += other.bytes
        self.missed += other.missed
        self.opens += other.opens
        for key, n in other.files.items():
            self.files[key] = self.files.get(key, 0) + n
        for key, n in other.folder_files.items():
            self.folder_files[key] = self.folder_files.get(key, 0) + n
        for d, counts in other.by_dir.items():
            acc = self.by_dir.setdefault(d, [0, 0, 0])
            for i, n in enumerate(counts):
                acc[i] += n

    def file_count(self) -> int:
        """Files read: a file's row counts one, a folder row the files it adds up."""
        return len(self.files) - len(self.folder_files) + sum(self.folder_files.values())

    def frozen(self) -> Reads:
        """These reads as an interval keeps them for an hour: read-only, in arrays instead of
        dicts of ints, folders' keys shared between intervals and files' packed (`Sums`)."""
        self.files = Sums(self.files)  # type: ignore[assignment]
        self.folder_files = Sums(self.folder_files)  # type: ignore[assignment]
        self.by_dir = Sums(self.by_dir, width=3)  # type: ignore[assignment]
        return self


NO_COUNTS = (0,) * MAX_SLOTS  # the slot counts of an interval without any, shared by all

def _folder(key: str | tuple[str, str]) -> bool:
    return (key if isinstance(key, str) else key[0]).endswith("/")


class Sums:
    """A read-only mapping of a frozen `Reads`, to ints or (width > 1) tuples of ints: what
    its readers use of a dict. Folders' keys are shared between intervals; files' keys, which
    rarely repeat (a data set's files are read once an epoch), are packed into one compressed
    string, unpacked when read (by the rules, over the window)."""

    __slots__ = ("_keys", "_packed", "_pairs", "_values", "_width")

    def __init__(self, d: dict, width: int = 1) -> None:
        keys: list = []
        packed: list[str] = []
        for k in d:
            one = shared(k) if _folder(k) else None
            keys.append(one)
            if one is None:  # (a path holds no NUL)
                packed.append(k if isinstance(k, str) else "\0".join(k))
        self._keys, self._width = tuple(keys), width
        self._pairs = any(isinstance(k, tuple) for k in d)  # keys (path, fs type), else paths
        self._packed = zlib.compress("\0".join(packed).encode("utf-8", "surrogateescape"), 1
                                     ) if packed else None
        # (int(): a trace read back with pandas has floats where a nullable column had nulls)
        values = [int(n) for n in (d.values() if width == 1 else
                                   (n for counts in d.values() for n in counts))]
        # (4 bytes a count where every count fits: most intervals' do)
        self._values = array("i" if all(-2**31 <= n < 2**31 for n in values) else "q", values)

    def values(self) -> Iterable:
        if self._width == 1:
            return self._values
        w = self._width
        return [tuple(self._values[i:i + w]) for i in range(0, len(self._values), w)]

    def items(self) -> Iterator[tuple]:
        return zip(self, self.values(), strict=True)

    def __iter__(self) -> Iterator:
        if self._packed is None:
            return iter(self._keys)
        parts = iter(zlib.decompress(self._packed).decode("utf-8", "surrogateescape")
                     .split("\0"))
        return iter([k if k is not None else (next(parts), next(parts)) if self._pairs
                     else next(parts) for k in self._keys])

    def __len__(self) -> int:
        return len(self._keys)


def nearest(folder: str, known: Callable[[str], bool], count: int) -> str:
    """`folder` (with its "/" at the end) while fewer than MAX_READ_FOLDERS folders are known
    (`count`); past that a new folder counts in its parent's entry, past twice that a new
    parent in its own parent's, and so on up to the root."""
    limit = MAX_READ_FOLDERS
    while count >= limit and folder != "/" and not known(folder):
        folder = folder[:-1].rsplit("/", 1)[0] + "/"
        limit *= 2
    return folder


def count_files(paths: Iterable[str], in_folder: dict[str, int]) -> int:
    """Files behind `paths`: one each, a folder row's path the files it adds up."""
    return sum(in_folder.get(p, 1) for p in paths)


def folder_files_of(row: FileRow) -> int | None:
    """How many files a folder row adds up; None for a file's own row."""
    return row.get("file_count") or 0 if row.get("path_source") == "folder" else None
