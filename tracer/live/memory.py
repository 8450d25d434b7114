"""The memory a job may use, per main process and interval: its memory cgroup's limit, usage and
page cache (cgroup v1 or v2), and the host's MemAvailable: the rows of the `memory` table.

A memory cgroup's limit bounds its page cache as well as its processes' memory, so a data set
larger than what the limit leaves is read from disk again on every pass, however much memory
the host has free. Read once per interval (a job may move into a cgroup after it starts):

- v1: /proc/PID/cgroup's `N:...memory...:/path`, under the hierarchy mounted with the memory
  controller; memory.usage_in_bytes; memory.stat's `hierarchical_memory_limit` (the smallest
  limit of the cgroup and those above it) and `total_cache` less `total_shmem` (its files' pages;
  shared memory and tmpfs are in `cache` too but are no file's cache).
- v2: /proc/PID/cgroup's `0::/path`, under the cgroup2 mount; memory.current; the smallest
  memory.max of the cgroup and those above it ("max": none); memory.stat's `file` less `shmem`.
- neither (no memory controller, or the process is in the root): the host's alone.

A v1 limit of 2**62 bytes or more is the kernel's "no limit" (it prints PAGE_COUNTER_MAX pages).
"""

from __future__ import annotations

from pathlib import Path

import psutil

from tracer.core.model import MemoryRow
from tracer.live.cgroups import hierarchies

NO_LIMIT = 1 << 62


def parse_memory_stat(text: str) -> dict[str, int]:
    """memory.stat as {name: value}: "total_cache 104857600" lines (v1), "file 104857600" (v2)."""
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[name] = int(value)
    return out


def memory_cgroup(cgroup_text: str) -> tuple[str, str] | None:
    """("cgroup_v1" or "cgroup_v2", path) of the memory cgroup in /proc/PID/cgroup's text; the v1
    memory controller's line wins over the v2 line (on a hybrid host it is the one that limits)."""
    v2 = None
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            return "cgroup_v1", parts[2]
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    return ("cgroup_v2", v2) if v2 is not None else None


def _mounts() -> tuple[Path | None, Path | None]:
    """Where the v1 memory hierarchy and the v2 one are mounted (None: not mounted)."""
    v1, v2 = hierarchies("memory")
    return Path(v1) if v1 else None, Path(v2) if v2 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


class MemorySampler:
    """The `memory` rows of the main processes, once per interval."""

    def __init__(self, proc_root: str = "/proc", mounts: tuple[Path | None, Path | None] | None
                 = None) -> None:
        """`mounts`: where the v1 memory hierarchy and the v2 one are (default: as mounted)."""
        self.proc_root = proc_root
        self.v1, self.v2 = mounts if mounts is not None else _mounts()

    def sample(self, ts_ns: int, mains: list[int]) -> list[MemoryRow]:
        available = int(psutil.virtual_memory().available)
        rows = []
        for pid in mains:
            text = _read(Path(self.proc_root, str(pid), "cgroup"))
            if text is None:
                continue  # gone
            row: MemoryRow = {"ts": ts_ns, "pid": pid, "source": "host", "cgroup": None,
                              "limit_bytes": None, "usage_bytes": None, "cache_bytes": None,
                              "available_bytes": available}
            found = memory_cgroup(text)
            if found is not None:
                row.update(self._cgroup(*found))
            rows.append(row)
        return rows

    def _cgroup(self, version: str, path: str) -> dict:
        root = self.v1 if version == "cgroup_v1" else self.v2
        if root is None or path in ("", "/"):
            return {}  # the root cgroup: the host's memory
        cg = root / path.lstrip("/")
        stat = parse_memory_stat(_read(cg / "memory.stat") or "")
        usage = _read(cg / ("memory.usage_in_bytes" if version == "cgroup_v1"
                            else "memory.current"))
        if usage is None:
            return {}  # (a cgroup of another namespace's view, or gone)
        if version == "cgroup_v1":
            limit = stat.get("hierarchical_memory_limit")
            cache = stat.get("total_cache", 0) - stat.get("total_shmem", 0)
        else:
            limit = None
            d = cg
            while d != root and root in d.parents:
                value = (_read(d / "memory.max") or "max").strip()
                if value.isdigit():
                    limit = int(value) if limit is None else min(limit, int(value))
                d = d.parent
            cache = stat.get("file", 0) - stat.get("shmem", 0)
        return {"source": version, "cgroup": path,
                "limit_bytes": limit if limit is not None and limit < NO_LIMIT else None,
                "usage_bytes": int(usage.strip()), "cache_bytes": max(0, cache)}
