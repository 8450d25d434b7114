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

import fcntl
import glob
import os
import stat
import time
from dataclasses import dataclass

from tracer.core.abi import NAME_LEN, FileEvent, dev_major_minor
from tracer.core.redact import Redactor
from tracer.live.devices import device_name

KERNEL, INODE, PROC_FD, PROC_MAPS, LOOKUP, SIBLING, TRUNCATED, UNKNOWN = (
    "kernel", "inode", "proc_fd", "proc_maps", "lookup", "sibling", "truncated", "unknown")
FS_IOC_GETVERSION = 0x80087601  # _IOR('v', 1, long): the inode's generation (ext4, xfs, btrfs)
RESCAN_S = 1.0  # a file system's known directories are listed again at most this often


@dataclass(frozen=True)
class FileInfo:
    path: str  # absolute, as the process sees it; " (deleted)" appended for unlinked files
    # kernel: dentry walk from an open file; inode: from the inode's dentry (page cache only),
    # joined to the mount point; proc_fd, proc_maps, lookup: user-space fallbacks
    # sibling: its path came from no record (the kernel's was lost), but from a directory of
    # files whose paths did come, where an entry has its device, inode and generation
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


def _generation(path: str) -> int | None:
    """The inode generation of regular file `path`, None where the file system does not say."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        return int.from_bytes(fcntl.ioctl(fd, FS_IOC_GETVERSION, bytes(8))[:4], "little")
    except OSError:
        return None
    finally:
        os.close(fd)


def _same_file(host_path: str, dev: int, ino: int, gen: int) -> bool:
    try:
        st = os.stat(host_path, follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_ino != ino or st.st_dev != os.makedev(
            *dev_major_minor(dev)):
        return False
    found = _generation(host_path) if gen else None
    return found is None or found == gen


def _list_dirs(dirs: dict[str, int]) -> dict[int, tuple[str, str]]:
    """Inode -> (path as the process sees it, path here) of every entry of `dirs` (directory ->
    a pid whose root it is under): d_ino from the listing, no stat per entry."""
    index: dict[int, tuple[str, str]] = {}
    for d, pid in dirs.items():
        root = f"/proc/{pid}/root"
        if not os.path.exists(root):
            root = ""
        try:
            with os.scandir(root + d) as it:
                for entry in it:
                    index[entry.inode()] = (os.path.join(d, entry.name), entry.path)
        except OSError:
            continue
    return index


class FileTable:
    def __init__(self, redactor: Redactor | None = None) -> None:
        self.by_id: dict[tuple[int, int, int], FileInfo] = {}  # (dev, ino, gen)
        self.redact = redactor or Redactor(False)
        # For files whose record never came (the ring buffer was full): the directories of
        # files with a kernel path, by file system, listed when such a file is first met.
        self._dirs: dict[int, dict[str, int]] = {}
        self._index: dict[int, dict[int, tuple[str, str]]] = {}
        self._listed_at: dict[int, float] = {}
        self._not_found: set[tuple[int, int, int]] = set()
        self._unnamed: set[tuple[int, int, int]] = set()  # shown as "(inode N on dev)"
        self._recovered = 0

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
        elif source != TRUNCATED:
            self._dirs.setdefault(ev.dev, {})[os.path.dirname(path)] = ev.pid
        info = FileInfo(self.redact.path(path), source, ev.fs_type, device_name(ev.dev))
        self.by_id[(ev.dev, ev.ino, ev.gen)] = info
        return info

    def get(self, dev: int, ino: int, gen: int, pid: int | None = None) -> FileInfo:
        """The file's info; for one the kernel never sent (seen only through page-cache misses,
        or its event was lost), asks /proc/PID/maps and /proc/PID/fd once (which know inode
        numbers, not generations: the file found there is the one that has the number now),
        then the directories of known files on its file system (which check the generation)."""
        info = self.by_id.get((dev, ino, gen))
        if info is not None:
            return info
        found = _from_proc(pid, dev, ino) if pid else None
        if not found and (path := self._by_sibling(dev, ino, gen)) is not None:
            found = (path, SIBLING)
            self._recovered += 1
        if found:
            info = FileInfo(self.redact.path(found[0]), found[1], _fs_type(dev), device_name(dev))
            self.by_id[(dev, ino, gen)] = info
            return info
        self._unnamed.add((dev, ino, gen))
        return FileInfo(f"(inode {ino} on {device_name(dev)})", UNKNOWN, _fs_type(dev),
                        device_name(dev))

    def lost_paths(self) -> tuple[int, int]:
        """(files named from their directory, files still without a name) so far."""
        return self._recovered, sum(k not in self.by_id for k in self._unnamed)

    def _by_sibling(self, dev: int, ino: int, gen: int) -> str | None:
        """A file whose record was lost, found in a directory of files whose records came (a
        data set's files share a few directories). The listing is kept: one listing serves
        every file it holds; one missing from it is looked for again in a listing made after
        RESCAN_S, then given up."""
        key = (dev, ino, gen)
        dirs = self._dirs.get(dev)
        if not dirs or key in self._not_found:
            return None
        hit = self._index.get(dev, {}).get(ino)
        if hit is None:
            now = time.monotonic()
            if now - self._listed_at.get(dev, -RESCAN_S) < RESCAN_S:
                return None  # asked again next interval
            self._index[dev] = _list_dirs(dirs)
            self._listed_at[dev] = now
            hit = self._index[dev].get(ino)
        if hit is None or not _same_file(hit[1], dev, ino, gen):
            self._not_found.add(key)
            return None
        return hit[0]
