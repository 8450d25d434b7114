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

And the signs that the job is short of memory, as counts in the interval (null at a process's
first row, or when its cgroup changed):

- majfaults: the cgroup's major page faults (v1 `total_pgmajfault`, v2 `pgmajfault`): pages
  read back from disk or swap as they were touched;
- limit_hits: charges that found the cgroup at its limit (v1 `memory.failcnt`, v2
  memory.events' `max`), each of which reclaims before it goes on;
- swap_bytes: the cgroup's memory in swap now (v1 `total_swap`, v2 `memory.swap.current`);
- psi_*: pressure stall time (PSI, the `total=` microseconds of the `some` and `full` lines) of
  the job's v2 cgroup (its memory.pressure, io.pressure, cpu.pressure), which v2 keeps for every
  cgroup, and a hybrid host for the cgroups of its v2 hierarchy too; cgroup v1 has none, so a job
  in v2's root or with no v2 hierarchy gets the host's (/proc/pressure): psi_source says which.
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


PSI_RESOURCES = ("memory", "io", "cpu")
NO_COUNTS = {"majfaults": None, "limit_hits": None, "swap_bytes": None, "psi_source": None,
             "psi_memory_some_ns": None, "psi_memory_full_ns": None, "psi_io_some_ns": None,
             "psi_cpu_some_ns": None}


def parse_pressure(text: str) -> dict[str, int]:
    """A PSI file ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1234" and a `full` line) as
    {"some": ns, "full": ns}, from its cumulative microseconds."""
    out = {}
    for line in text.splitlines():
        kind, _, fields = line.partition(" ")
        for field in fields.split():
            name, _, value = field.partition("=")
            if name == "total" and value.isdigit():
                out[kind] = int(value) * 1000
    return out


class MemorySampler:
    """The `memory` rows of the main processes, once per interval."""

    def __init__(self, proc_root: str = "/proc", mounts: tuple[Path | None, Path | None] | None
                 = None, host_pressure: str = "/proc/pressure") -> None:
        """`mounts`: where the v1 memory hierarchy and the v2 one are (default: as mounted);
        `host_pressure`: the host's PSI files."""
        self.proc_root = proc_root
        self.v1, self.v2 = mounts if mounts is not None else _mounts()
        self.host_pressure = Path(host_pressure)
        # per pid, the cumulative counts of its last row, and whose they were (cgroup, source)
        self._prev: dict[int, tuple[tuple, dict[str, int | None]]] = {}

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
            counts: dict[str, int | None] = {}
            if found is not None:
                found_row, counts = self._cgroup(*found)
                row.update(found_row)
            psi_source, pressure = self._pressure(text)
            counts.update(pressure)
            row.update(self._deltas(pid, (row["cgroup"], psi_source), counts))
            row["psi_source"] = psi_source
            rows.append(row)
        for pid in set(self._prev) - set(mains):
            del self._prev[pid]
        return rows

    def _deltas(self, pid: int, whose: tuple, counts: dict[str, int | None]
                ) -> dict[str, int | None]:
        """The interval's part of the cumulative counts (swap_bytes is a level, as it is)."""
        out = dict(NO_COUNTS)
        out["swap_bytes"] = counts.pop("swap_bytes", None)
        prev = self._prev.get(pid)
        self._prev[pid] = (whose, counts)
        if prev is None or prev[0] != whose:
            return out  # first row, or another cgroup's counts
        for name, n in counts.items():
            was = prev[1].get(name)
            if n is not None and was is not None:
                out[name] = max(0, n - was)
        return out

    def _pressure(self, cgroup_text: str) -> tuple[str | None, dict[str, int | None]]:
        """(psi_source, cumulative PSI ns) of the process's v2 cgroup, else of the host."""
        path = next((line.split(":", 2)[2] for line in cgroup_text.splitlines()
                     if line.startswith("0::")), None)
        places = [("host", self.host_pressure, "{}")]
        if self.v2 is not None and path not in (None, "", "/"):
            places.insert(0, ("cgroup_v2", self.v2 / path.lstrip("/"), "{}.pressure"))
        for source, where, name in places:  # (a cgroup's are off with cgroup.pressure 0)
            found = {r: parse_pressure(_read(where / name.format(r)) or "")
                     for r in PSI_RESOURCES}
            if any(found.values()):
                return source, {"psi_memory_some_ns": found["memory"].get("some"),
                                "psi_memory_full_ns": found["memory"].get("full"),
                                "psi_io_some_ns": found["io"].get("some"),
                                "psi_cpu_some_ns": found["cpu"].get("some")}
        return None, {}  # no PSI (a kernel without it, psi=0, or the files unreadable)

    def _cgroup(self, version: str, path: str) -> tuple[dict, dict[str, int | None]]:
        """The row's cgroup columns, and its cumulative counts."""
        root = self.v1 if version == "cgroup_v1" else self.v2
        if root is None or path in ("", "/"):
            return {}, {}  # the root cgroup: the host's memory
        cg = root / path.lstrip("/")
        stat = parse_memory_stat(_read(cg / "memory.stat") or "")
        usage = _read(cg / ("memory.usage_in_bytes" if version == "cgroup_v1"
                            else "memory.current"))
        if usage is None:
            return {}, {}  # (a cgroup of another namespace's view, or gone)
        if version == "cgroup_v1":
            limit = stat.get("hierarchical_memory_limit")
            cache = stat.get("total_cache", 0) - stat.get("total_shmem", 0)
            failcnt = (_read(cg / "memory.failcnt") or "").strip()
            counts = {"majfaults": stat.get("total_pgmajfault"),
                      "limit_hits": int(failcnt) if failcnt.isdigit() else None,
                      "swap_bytes": stat.get("total_swap")}
        else:
            events = parse_memory_stat(_read(cg / "memory.events") or "")
            swap = (_read(cg / "memory.swap.current") or "").strip()
            counts = {"majfaults": stat.get("pgmajfault"), "limit_hits": events.get("max"),
                      "swap_bytes": int(swap) if swap.isdigit() else None}
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
                "usage_bytes": int(usage.strip()), "cache_bytes": max(0, cache)}, counts
