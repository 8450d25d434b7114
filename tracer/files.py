"""Files by (device, inode): full paths sent once by the kernel, with a /proc/PID/fd fallback.

Inode numbers repeat across file systems, so a file is always keyed by the file system's device
and its inode. The kernel walks the dentries (crossing mount points) the first time a traced
process touches a file; when that walk was cut short this module asks /proc/PID/fd instead and
says so in `path_source`.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from tracer.abi import NAME_LEN, FileEvent, dev_major_minor
from tracer.devices import device_name

KERNEL, PROC_FD, LOOKUP, TRUNCATED, UNKNOWN = "kernel", "proc_fd", "lookup", "truncated", "unknown"


@dataclass(frozen=True)
class FileInfo:
    path: str  # absolute, as the process sees it; " (deleted)" appended for unlinked files
    path_source: str  # kernel | proc_fd | lookup | truncated | unknown
    fs_type: str
    device: str  # the file system's device: a disk name (vda1 -> vda's partition) or MAJ:MIN


def _from_proc_fd(pid: int, fd: int, ino: int) -> str | None:
    """The path of fd `fd` of `pid` if it is still that inode."""
    if fd < 0:
        return None
    link = f"/proc/{pid}/fd/{fd}"
    try:
        if os.stat(link).st_ino != ino:
            return None
        return os.readlink(link)
    except OSError:
        return None


def _by_lookup(ev: FileEvent) -> str | None:
    """Finds a path whose long components the kernel cut at NAME_LEN - 1 bytes: each cut name
    is matched as a prefix inside the process's root (/proc/PID/root), and the one candidate
    with the same device and inode wins."""
    if len(ev.names) == 0:
        return None
    parts = [glob.escape(n) + ("*" if len(n.encode()) >= NAME_LEN - 1 else "")
             for n in reversed(ev.names)]
    root = f"/proc/{ev.pid}/root"
    want_dev = os.makedev(*dev_major_minor(ev.dev))
    for candidate in glob.glob(root + "/" + "/".join(parts)):
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if st.st_ino == ev.ino and st.st_dev == want_dev:
            return candidate[len(root):]
    return None


class FileTable:
    def __init__(self) -> None:
        self.by_id: dict[tuple[int, int], FileInfo] = {}

    def on_event(self, ev: FileEvent) -> FileInfo:
        path, source = ev.path, KERNEL
        if ev.truncated:
            fallback = _from_proc_fd(ev.pid, ev.fd, ev.ino)
            if fallback is not None:
                path, source = fallback, PROC_FD
            elif (found := _by_lookup(ev)) is not None:
                path, source = found, LOOKUP
            else:
                path, source = "..." + path, TRUNCATED
        if ev.deleted and not path.endswith(" (deleted)"):
            path += " (deleted)"
        info = FileInfo(path, source, ev.fs_type, device_name(ev.dev))
        self.by_id[(ev.dev, ev.ino)] = info
        return info

    def get(self, dev: int, ino: int) -> FileInfo:
        info = self.by_id.get((dev, ino))
        if info is None:  # its first-sight event was lost (ring buffer full)
            info = FileInfo(f"(inode {ino} on {device_name(dev)})", UNKNOWN, "", device_name(dev))
        return info
