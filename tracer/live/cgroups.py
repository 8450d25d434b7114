"""Cgroup ids, as the block programs read them from a bio, to paths and the processes in them.

The id is the kernfs id of the cgroup's directory, which is its inode number (on 64-bit hosts),
in the hierarchy that holds the blk-cgroup controller: cgroup v1's blkio hierarchy where it is
mounted, else the v2 hierarchy. Ids are unique within one hierarchy only, so only that one is
searched. A walk of the hierarchy maps every directory's inode number to its path; an unknown id
(a cgroup made since) walks it again, at most once per RESCAN_S.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable

RESCAN_S = 5.0
MAX_DIRS = 100_000  # a walk stops there (a host with more cgroups names the rest by id)
MAX_PROCS = 4096  # processes read per cgroup when naming a kernel thread's requests


def hierarchies(controller: str, mountinfo: str = "/proc/self/mountinfo"
                ) -> tuple[str | None, str | None]:
    """Mount points of the cgroup v1 hierarchy that holds `controller` and of the v2 one
    (None: not mounted)."""
    v1 = v2 = None
    try:
        with open(mountinfo) as f:
            for line in f:
                head, _, tail = line.partition(" - ")
                fields, rest = head.split(), tail.split()
                if len(fields) < 5 or len(rest) < 3:
                    continue
                if rest[0] == "cgroup" and controller in rest[2].split(",") and v1 is None:
                    v1 = fields[4]
                elif rest[0] == "cgroup2" and v2 is None:
                    v2 = fields[4]
    except OSError:
        pass
    return v1, v2


def blkcg_root(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The mount point of the hierarchy whose cgroups the bios carry (v1 blkio, else v2)."""
    v1, v2 = hierarchies("blkio", mountinfo)
    return v1 or v2


class CgroupNames:
    """Paths (relative to the hierarchy's root, as /proc/PID/cgroup shows them) of cgroup ids."""

    def __init__(self, root: str | None = None) -> None:
        self.root = root if root is not None else blkcg_root()
        self._paths: dict[int, str] = {}
        self._walked = float("-inf")

    def _walk(self) -> None:
        self._walked = time.monotonic()
        if not self.root:
            return
        paths: dict[int, str] = {}
        try:
            paths[os.stat(self.root).st_ino] = "/"
        except OSError:
            return
        stack = [(self.root, "")]
        while stack and len(paths) < MAX_DIRS:
            top, rel = stack.pop()
            try:
                with os.scandir(top) as it:
                    for e in it:
                        if e.is_dir(follow_symlinks=False):
                            paths[e.inode()] = f"{rel}/{e.name}"
                            stack.append((e.path, f"{rel}/{e.name}"))
            except OSError:
                continue  # removed meanwhile
        self._paths = paths

    def path(self, cgroup_id: int) -> str | None:
        """The cgroup's path, None when the id is 0 or names no cgroup (one removed since)."""
        if not cgroup_id:
            return None
        found = self._paths.get(cgroup_id)
        if found is None and time.monotonic() - self._walked >= RESCAN_S:
            self._walk()
            found = self._paths.get(cgroup_id)
        return found

    def processes(self, path: str | None, exclude: Iterable[int] = ()) -> Counter[str]:
        """The names of the processes in cgroup `path` but those of `exclude`, with how many of
        each (none when it is gone). None for the root cgroup: a kernel thread's requests there
        are the host's own (writeback, the journal), and it holds every process not in one."""
        names: Counter[str] = Counter()
        if not self.root or not path or path == "/":
            return names
        skip = set(exclude)
        try:
            with open(os.path.join(self.root, path.lstrip("/"), "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()[:MAX_PROCS]]
        except (OSError, ValueError):
            return names
        for pid in pids:
            if pid in skip:
                continue
            try:
                with open(f"/proc/{pid}/comm") as f:
                    names[f.read().strip()] += 1
            except OSError:
                continue
        return names


def describe(names: Counter[str], most: int = 3) -> str | None:
    """"4 x dd, python3": the `most` most common names, with their counts when above one."""
    if not names:
        return None
    top = [f"{n} x {name}" if n > 1 else name for name, n in names.most_common(most)]
    more = len(names) - most
    return ", ".join(top) + (f" and {more} more" if more > 0 else "")
