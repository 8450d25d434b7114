"""Files by (device, inode, generation): paths sent by the kernel once per folder, the other
files of a folder named from a handle of their inode or from the folder's listing, with
/proc/PID/fd fallbacks.

Inode numbers repeat across file systems, so a file is always keyed by the file system's device
and its inode; and they repeat over time (a deleted file's number goes to the next file created),
so the inode's generation is part of the key: a new file under a reused number is a new key.
The kernel walks the dentries (crossing mount points) the first time a traced process touches a
file of a folder it has not sent yet (or a deleted file); when that walk was cut short this
module asks /proc/PID/fd instead and says so in `path_source`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import glob
import os
import stat
import struct
import time
import weakref
from collections import OrderedDict
from typing import NamedTuple

from tracer.core.abi import (
    NAME_LEN,
    FileEvent,
    decode_file_event,
    dev_major_minor,
    file_event_ids,
)
from tracer.core.model import FOLDER_GEN
from tracer.core.redact import Redactor
from tracer.kernel import libbpf
from tracer.live.devices import device_name

KERNEL, INODE, PROC_FD, PROC_MAPS, LOOKUP, SIBLING, TRUNCATED, UNKNOWN, FOLDER = (
    "kernel", "inode", "proc_fd", "proc_maps", "lookup", "sibling", "truncated", "unknown",
    "folder")
FS_IOC_GETVERSION = 0x80087601  # _IOR('v', 1, long): the inode's generation (ext4, xfs, btrfs)
FILEID_INO32_GEN = 1  # a file handle of {u32 inode, u32 generation}: ext4's, xfs's (32-bit inodes)
RESCAN_S = 1.0  # a folder is listed again at most this often
# Files whose names are kept, the others named again when a row needs them: an interval's
# rows name at most rollup.KEEP_FILES files per process and op.
MAX_NAMED = 4096
MAX_FOLDERS = 16384  # folders whose paths are kept (a folder's path comes once, from a record)
LISTINGS = 64  # folder listings kept (a job reads a few folders at a time)
# A FUSE file system that gives no inode numbers in its listings (libfuse's high-level API
# without `use_ino`) lists every entry with this one.
FUSE_UNKNOWN_INO = 0xFFFFFFFF
PENDING = -1  # a listing's key of its entries without an inode number, not stat'ed yet


class FileInfo(NamedTuple):  # (a tuple: thousands kept, FileTable.by_id, and quick to make)
    path: str  # absolute, as the process sees it; " (deleted)" appended for unlinked files
    # kernel: dentry walk from an open file; inode: from the inode's dentry (page cache only),
    # joined to the mount point; proc_fd, proc_maps, lookup: user-space fallbacks
    # sibling: a file of a folder whose path came with another file's record, named from a
    # handle of its inode (device, inode and generation) or from the folder's listing;
    # folder: a row that adds up the files of a folder (the path ends with "/")
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


@functools.lru_cache(maxsize=256)
def _fs_type(dev: int, mountinfo: str = "/proc/self/mountinfo") -> str:
    """The file system type of the mount with this device, from iotrace's own mount table
    (read once per device: every row names its file system)."""
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


def _handle_format(folder: str, dir_ino: int) -> bool | None:
    """Whether the file system of `folder` (a path iotrace can open) names inodes by handles of
    {u32 inode, u32 generation}, seen on the folder's own handle; None when it cannot be told
    (the path is gone)."""
    try:
        kind, handle = libbpf.name_to_handle(folder)
    except OSError as e:
        return None if e.errno == errno.ENOENT else False
    return (kind == FILEID_INO32_GEN and len(handle) == 8
            and int.from_bytes(handle[:4], "little") == dir_ino)


def _path_by_handle(mount: int, ino: int, gen: int) -> str | None:
    """The path of inode `ino` of generation `gen` on the file system of fd `mount`, from a
    handle the kernel opens, checking the generation: three syscalls, where a listing of its
    folder reads every entry. Raises PermissionError without CAP_DAC_READ_SEARCH; None where
    that inode is not there now (ESTALE). The path is the dentry's, as iotrace's root sees it:
    the caller checks it, as a hard link's may be another folder's, and a dentry no longer
    cached comes back without its parents."""
    try:
        fd = libbpf.open_by_handle(mount, FILEID_INO32_GEN, struct.pack("<II", ino, gen),
                                   os.O_PATH)
    except PermissionError:
        raise
    except OSError:
        return None
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)


def _list_folder(folder: str, pid: int) -> tuple[str, dict[int, str]]:
    """(the root it was listed through, inode -> name of every entry of `folder`), a path as
    process `pid` sees it: d_ino from the listing, no stat per entry, and names only (a path is
    joined for the few entries a row asks for: joining every entry's was most of the cost).
    Through the process's root (a container's); the process gone, even while listing, through
    iotrace's own root (the caller checks device, inode and generation, so a file found there
    is the one)."""
    for root in (f"/proc/{pid}/root", ""):
        try:
            with os.scandir(root + folder) as it:
                index: dict = {entry.inode(): entry.name for entry in it}
        except OSError:
            continue
        if FUSE_UNKNOWN_INO in index:  # those entries' names, stat'ed when a row asks (_named)
            with contextlib.suppress(OSError), os.scandir(root + folder) as it:
                index[PENDING] = [e.name for e in it if e.inode() == FUSE_UNKNOWN_INO]
        return root, index
    return "", {}


def _named(index: dict, root: str, folder: str, ino: int) -> str | None:
    """The name of inode `ino` in a folder's listing; in a listing without inode numbers (a
    FUSE file system's), from a stat of its entries not stat'ed yet, until one is `ino`: each
    entry is stat'ed once per listing, and only while rows ask for files not found yet."""
    name = index.get(ino)
    pending = index.get(PENDING)
    while name is None and pending:
        entry = pending.pop()
        try:
            found = os.stat(os.path.join(root + folder, entry), follow_symlinks=False).st_ino
        except OSError:
            continue
        index[found] = entry
        name = entry if found == ino else None
    return name


class _Bounded(OrderedDict):
    """A dict that forgets its oldest entries past `limit` (insertion order). An OrderedDict:
    a plain dict finds its oldest entry by walking over the slots of those deleted before it,
    thousands of them once it is full, at every insert."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.added = 0  # keys added so far, the forgotten ones too

    def __setitem__(self, key, value) -> None:
        if key not in self:
            self.added += 1
        super().__setitem__(key, value)
        while len(self) > self.limit:
            self.popitem(last=False)


class FileTable:
    """Names files by (dev, ino, gen). The kernel sends a file's path only when its folder is
    new to it (bpf/files.bpf.h, dirs_seen): the others of a known folder are named from a
    handle of their inode, or from the folder's listing, when a row first needs the name. Both
    tables are bounded, so the memory does not grow with the files a job reads: a name
    forgotten is looked up again."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        self.by_id: dict[tuple[int, int, int], FileInfo] = _Bounded(MAX_NAMED)  # (dev, ino, gen)
        self._records: dict[tuple[int, int, int], bytes] = _Bounded(MAX_NAMED)  # not decoded yet
        self.redact = redactor or Redactor(False)
        # (dev, folder inode) -> (its path as the process sees it, that pid), from the records
        self.folders: dict[tuple[int, int], tuple[str, int]] = _Bounded(MAX_FOLDERS)
        self._listings: dict[tuple[int, int], tuple[float, dict]] = _Bounded(LISTINGS)
        # dev -> an open folder of that file system, which names files by FILEID_INO32_GEN
        # handles (None: it does not, or iotrace may not); closed at every interval's end
        self._mounts: dict[int, int | None] = {}
        weakref.finalize(self, _close_all, self._mounts)
        self._folder_rows: dict[tuple[int, int], tuple[tuple[str, int] | None, FileInfo]] = (
            _Bounded(MAX_FOLDERS))  # (dev, folder inode) -> (its entry in folders, its row's info)
        self._recovered = 0
        self._unnamed: set[tuple[int, int, int]] = set()  # shown as "(inode N in folder)"
        # (dev, folder inode) -> its parent folder's inode (0: not known), for rollup.fold_folders
        self._parents: dict[tuple[int, int], int] = _Bounded(MAX_FOLDERS)
        self._parents_asked: dict[int, int] = {}  # dev -> folders.added at _a_parent's last search

    def on_record(self, raw: bytes) -> None:
        """A first-sight record as the ring buffer gives it. One of a folder whose path is known
        is kept as it came and decoded when a row first needs its name: a DataLoader's batch
        files in /dev/shm each send one (written, so their folder's listing may not have them
        later), thousands an interval, and nearly all are added up in their folder's row."""
        dev, ino, gen, dir_ino, now = file_event_ids(raw)
        if not now and dir_ino and (dev, dir_ino) in self.folders:
            self._records[(dev, ino, gen)] = raw
            self.by_id.pop((dev, ino, gen), None)  # sent again: renamed since, maybe
        else:
            self.on_event(decode_file_event(raw))

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
        elif source != TRUNCATED and ev.dir_ino:
            self.folders[(ev.dev, ev.dir_ino)] = (os.path.dirname(path), ev.pid)
        fs_type = ev.fs_type
        if fs_type in ("fuse", "fuseblk"):  # the kernel's name; mountinfo's has the subtype
            fs_type = _fs_type(ev.dev) or fs_type
        info = FileInfo(self.redact.path(path), source, fs_type, device_name(ev.dev))
        self.by_id[(ev.dev, ev.ino, ev.gen)] = info
        return info

    def get(self, dev: int, ino: int, gen: int, pid: int | None = None,
            dir_ino: int = 0) -> FileInfo:
        """The file's info; for one the kernel sent no record of (its folder was known, it was
        seen only through page-cache misses, or its record was lost): from its folder's listing
        (which checks the generation), else /proc/PID/maps and /proc/PID/fd (which know inode
        numbers, not generations: the file found there is the one that has the number now)."""
        info = self.by_id.get((dev, ino, gen))
        if info is not None:
            return info
        if (raw := self._records.pop((dev, ino, gen), None)) is not None:
            return self.on_event(decode_file_event(raw))
        if gen == FOLDER_GEN:  # the totals of a folder's files (Aggregator.file_totals)
            return self.folder(dev, ino)
        found = None
        if dir_ino and (path := self._in_folder(dev, dir_ino, ino, gen)) is not None:
            found = (path, SIBLING)
        if found is None and pid:
            found = _from_proc(pid, dev, ino)
        if found:
            info = FileInfo(self.redact.path(found[0]), found[1], _fs_type(dev), device_name(dev))
            self.by_id[(dev, ino, gen)] = info
            return info
        self._unnamed.add((dev, ino, gen))
        where = self.folders.get((dev, dir_ino))
        return FileInfo(f"(inode {ino} in {self.redact.path(where[0]) if where else device_name(dev)})",
                        UNKNOWN, _fs_type(dev), device_name(dev))

    def folder(self, dev: int, dir_ino: int) -> FileInfo:
        """A folder as the row of the files added up in it: its path with a "/" at the end.
        Asked for by thousands of rows an interval, each made once per path of the folder."""
        where = self.folders.get((dev, dir_ino)) or self._a_parent(dev, dir_ino)
        made = self._folder_rows.get((dev, dir_ino))
        if made is not None and made[0] == where:
            return made[1]
        path = (self.redact.path(where[0]).rstrip("/") + "/" if where
                else f"(folder inode {dir_ino} on {device_name(dev)})")
        info = FileInfo(path, FOLDER, _fs_type(dev), device_name(dev))
        self._folder_rows[(dev, dir_ino)] = (where, info)
        return info

    def _a_parent(self, dev: int, dir_ino: int) -> tuple[str, int] | None:
        """The path of a folder no record named: the kernel adds a process's reads past its
        keep of folders up in their folders' parents (bpf/slots.bpf.h), whose rows user space
        may not have named on its own (rollup.fold_folders asks only for the parents of the
        folders it moves up). Each known folder of the device is asked its parent once."""
        if self._parents_asked.get(dev) == self.folders.added:
            return None  # every folder known was asked since one was last added
        for key in [k for k in self.folders if k[0] == dev and k not in self._parents]:
            self.parent(*key)
            if (where := self.folders.get((dev, dir_ino))) is not None:
                return where  # the others are asked when another parent is wanted
        self._parents_asked[dev] = self.folders.added
        return None

    def parent(self, dev: int, dir_ino: int) -> int:
        """The inode of the folder that holds folder `dir_ino` of device `dev`, 0 when its path
        is not known or its parent is on another file system; the parent's path is kept, so
        that folder() names its row. One stat per folder, through the root of the process that
        read it (a container's), else iotrace's own."""
        key = (dev, dir_ino)
        up = self._parents.get(key)
        if up is not None:
            return up
        up, where = 0, self.folders.get(key)
        if where is not None and (path := os.path.dirname(where[0].rstrip("/"))) != where[0]:
            for root in (f"/proc/{where[1]}/root", ""):
                try:
                    st = os.stat(root + path)
                except (OSError, ValueError):
                    continue
                if st.st_dev == os.makedev(*dev_major_minor(dev)) and st.st_ino != dir_ino:
                    up = st.st_ino
                    if (dev, up) not in self.folders:
                        self.folders[(dev, up)] = (path, where[1])
                break
        self._parents[key] = up
        return up

    def lost_paths(self) -> tuple[int, int]:
        """(files of a known folder named without a record of their own, files still without a
        name) so far."""
        return self._recovered, sum(k not in self.by_id for k in self._unnamed)

    def _in_folder(self, dev: int, dir_ino: int, ino: int, gen: int) -> str | None:
        """The path of a file of a known folder, from a handle of its inode, else from the
        folder's listing: one listing serves every file in it; a file missing from it is looked
        for again in a listing made after RESCAN_S (it was created since)."""
        where = self.folders.get((dev, dir_ino))
        if where is None:
            return None
        if (path := self._by_handle(dev, dir_ino, ino, gen, *where)) is not None:
            self._recovered += 1
            return path
        now = time.monotonic()
        at, root, index = self._listings.get((dev, dir_ino), (None, "", None))
        listed = index is None or (ino not in index and now - at >= RESCAN_S)
        if listed:
            root, index = _list_folder(*where)
            self._listings[(dev, dir_ino)] = (now, root, index)
        name = _named(index, root, where[0], ino)
        path = None if name is None else os.path.join(where[0], name)
        same = path is not None and _same_file(root + path, dev, ino, gen)
        if path is not None and not listed and not same:
            # The listing's paths go through the root of the process that first read the
            # folder: once it has exited (a DataLoader worker of an earlier epoch) they lead
            # nowhere, and every file not named yet stayed unnamed. Listed again, they go
            # through iotrace's own root.
            root, index = _list_folder(*where)
            self._listings[(dev, dir_ino)] = (now, root, index)
            name = _named(index, root, where[0], ino)
            path = None if name is None else os.path.join(where[0], name)
            same = path is not None and _same_file(root + path, dev, ino, gen)
        if not same:
            return None
        self._recovered += 1
        return path

    def _by_handle(self, dev: int, dir_ino: int, ino: int, gen: int, folder: str,
                   pid: int) -> str | None:
        """The path of a file of `folder` (as process `pid` sees it) named from a handle of its
        inode, checked to be that inode in that folder; None where the file system has no such
        handles, iotrace lacks the capability, or the name is not found this way."""
        if ino >> 32 or gen >> 32 or (mount := self._mount(dev, dir_ino, folder, pid)) is None:
            return None
        try:
            link = _path_by_handle(mount, ino, gen)
        except PermissionError:
            os.close(mount)
            self._mounts[dev] = None
            return None
        if link is None:
            return None
        path = os.path.join(folder, os.path.basename(link))
        if link == path:  # the process sees the file system where iotrace does: no stat
            return path
        # Through the process's root (a container's); the process gone, through iotrace's.
        for root in (f"/proc/{pid}/root", ""):
            if _same_file(root + path, dev, ino, 0):  # 0: the handle checked the generation
                return path
        return None

    def close_folders(self) -> None:
        """Closes the folders held open for naming by handles, once an interval's rows are
        named: an open folder would keep its file system from being unmounted."""
        _close_all(self._mounts)
        self._mounts.clear()

    def _mount(self, dev: int, dir_ino: int, folder: str, pid: int) -> int | None:
        """The open folder through which files of file system `dev` are named by handles: the
        first folder of it asked for, kept open; None where it has no such handles."""
        if dev in self._mounts:  # also where the file system has no such handles
            return self._mounts[dev]
        for root in (f"/proc/{pid}/root", ""):
            usable = _handle_format(root + folder, dir_ino)
            if usable is None:  # the path is gone: the next root, or another folder later
                continue
            fd = None
            if usable:
                try:
                    fd = os.open(root + folder, os.O_RDONLY | os.O_DIRECTORY)  # O_PATH: EBADF
                except OSError:
                    continue
            self._mounts[dev] = fd
            return fd
        return None


def _close_all(mounts: dict[int, int | None]) -> None:
    for fd in mounts.values():
        if fd is not None:
            os.close(fd)
