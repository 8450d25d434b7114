"""Files by (device, inode, generation): full paths sent once by the kernel, with a /proc/PID/fd
fallback.

Inode numbers repeat across file systems, so a file is always keyed by the file system's device
and its inode; and they repeat over time (a deleted file's number goes to the next file created),
so the inode's generation is part of the key: a new file under a reused number is a new key,
whose path the kernel sends as for any file seen first. The kernel walks the dentries (crossing
mount points) the first time a traced process touches a file; when that walk was cut short this
module asks /proc/PID/fd instead and says so in `path_source`.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from tracer.abi import NAME_LEN, FileEvent, dev_major_minor
from tracer.devices import device_name
from tracer.redact import Redactor

KERNEL, INODE, PROC_FD, PROC_MAPS, LOOKUP, TRUNCATED, UNKNOWN = (
    "kernel", "inode", "proc_fd", "proc_maps", "lookup", "truncated", "unknown")


@dataclass(frozen=True)
class FileInfo:
    path: str  # absolute, as the process sees it; " (deleted)" appended for unlinked files
    # kernel: dentry walk from an open file; inode: from the inode's dentry (page cache only),
    # joined to the mount point; proc_fd, proc_maps, lookup: user-space fallbacks
    path_source: str
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


def _mount_point(dev: int, pid: int) -> str | None:
    """Where the file system `dev` is mounted (its root) in the process's mount namespace."""
    major, minor = dev_major_minor(dev)
    want = f"{major}:{minor}"
    for path in (f"/proc/{pid}/mountinfo", "/proc/self/mountinfo"):
        try:
            with open(path) as f:
                # "36 25 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw": dev, root, mount point
                for line in f:
                    fields = line.split()
                    if len(fields) > 4 and fields[2] == want and fields[3] == "/":
                        return fields[4].replace("\\040", " ")
        except OSError:
            continue
    return None


def _fs_type(dev: int, mountinfo: str = "/proc/self/mountinfo") -> str:
    """The file system type of the mount with this device, from iotrace's own mount table."""
    major, minor = dev_major_minor(dev)
    want = f"{major}:{minor}"
    try:
        with open(mountinfo) as f:
            # "36 25 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw": type after " - "
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) > 2 and fields[2] == want and right:
                    return right.split()[0]
    except OSError:
        pass
    return ""


def _by_lookup(ev: FileEvent) -> str | None:
    """Finds a path whose long components the kernel cut at NAME_LEN - 1 bytes: each cut name
    is matched as a prefix inside the process's root (/proc/PID/root), and the one candidate
    with the same device and inode wins. A process already gone has no /proc/PID/root: then
    the tracer's own root is searched, which the inode check keeps exact (a chrooted process's
    file is then not found, rather than found wrong)."""
    if len(ev.names) == 0:
        return None
    parts = [glob.escape(n) + ("*" if len(n.encode()) >= NAME_LEN - 1 else "")
             for n in reversed(ev.names)]
    root = f"/proc/{ev.pid}/root"
    if not os.path.exists(root):
        root = ""
    want_dev = os.makedev(*dev_major_minor(ev.dev))
    for candidate in glob.glob(root + "/" + "/".join(parts)):
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if st.st_ino == ev.ino and st.st_dev == want_dev:
            return candidate[len(root):]
    return None


def _from_proc(pid: int, dev: int, ino: int) -> tuple[str, str] | None:
    """A file the kernel never walked (only seen through page-cache misses, e.g. a mapped
    binary or a file mmapped before attach): find it among the process's mappings and fds."""
    major, minor = dev_major_minor(dev)
    want = f"{major:02x}:{minor:02x}"
    try:
        with open(f"/proc/{pid}/maps") as f:
            # "7f2c1a000000-7f2c1a021000 r--p 00000000 fe:00 5398910   /usr/lib/x86_64/libc.so.6"
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[3] == want and parts[4] == str(ino):
                    return parts[5].rstrip("\n"), PROC_MAPS
    except OSError:
        pass
    want_dev = os.makedev(major, minor)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        link = f"/proc/{pid}/fd/{fd}"
        try:
            st = os.stat(link)
            if st.st_ino == ino and st.st_dev == want_dev:
                return os.readlink(link), PROC_FD
        except OSError:
            continue
    return None


class FileTable:
    def __init__(self, redactor: Redactor | None = None) -> None:
        self.by_id: dict[tuple[int, int, int], FileInfo] = {}  # (dev, ino, gen)
        self.redact = redactor or Redactor(False)

    def on_event(self, ev: FileEvent) -> FileInfo:
        path, source = ev.path, KERNEL
        if ev.fs_root:
            mnt = _mount_point(ev.dev, ev.pid)
            path, source = ((mnt.rstrip("/") + path) if mnt else path), INODE
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
        info = FileInfo(self.redact.path(path), source, ev.fs_type, device_name(ev.dev))
        self.by_id[(ev.dev, ev.ino, ev.gen)] = info
        return info

    def get(self, dev: int, ino: int, gen: int, pid: int | None = None) -> FileInfo:
        """The file's info; for one the kernel never sent (seen only through page-cache misses,
        or its event was lost), asks /proc/PID/maps and /proc/PID/fd once (which know inode
        numbers, not generations: the file found there is the one that has the number now)."""
        info = self.by_id.get((dev, ino, gen))
        if info is not None:
            return info
        found = _from_proc(pid, dev, ino) if pid else None
        if found:
            info = FileInfo(self.redact.path(found[0]), found[1], _fs_type(dev), device_name(dev))
            self.by_id[(dev, ino, gen)] = info
            return info
        return FileInfo(f"(inode {ino} on {device_name(dev)})", UNKNOWN, _fs_type(dev),
                        device_name(dev))
