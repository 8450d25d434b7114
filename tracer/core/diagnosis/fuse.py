"""Data read through FUSE: the mount a folder of the data set is on, the process that serves it,
and what that process did while the job read (the `fuse` rows, tracer.live.fuse), for the
evidence of the findings that the loop waited on its reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from tracer.core.diagnosis.thresholds import MAX_PEERS

if TYPE_CHECKING:
    from tracer.core.diagnosis.evidence import IntervalEvidence
    from tracer.core.model import FuseRow


class FuseSample(NamedTuple):
    """A `fuse` row as an interval keeps it for an hour: a tuple, its strings the live
    sampler's own (the same objects every interval)."""

    mount_point: str
    fs_type: str
    source: str
    daemon_pid: int | None
    daemon_comm: str | None
    found_by: str | None
    cpu_ns: int | None
    disk_read_bytes: int | None
    disk_write_bytes: int | None
    net_rx_bytes: int | None
    rtt_us: float | None
    peers: str | None

    @classmethod
    def of(cls, row: FuseRow) -> FuseSample:
        return cls(*(row.get(f) for f in cls._fields))  # type: ignore[arg-type]


def is_fuse(fs_type: str) -> bool:
    """`fuse`, `fuseblk` and their subtypes (`fuse.sshfs`, `fuse.gcsfuse`, ...): mountinfo
    names a FUSE file system by the type its daemon gives."""
    return fs_type in ("fuse", "fuseblk") or fs_type.startswith(("fuse.", "fuseblk."))


def _inside(path: str, point: str) -> bool:
    return path == point or path.startswith(point.rstrip("/") + "/")


def _int(v: object) -> int | None:
    """A count of a row (a trace read back has floats where a nullable column had nulls)."""
    return None if v is None or v != v else int(v)  # type: ignore[arg-type]


def served_by(ivs: Sequence[IntervalEvidence], top: tuple[str, str] | None) -> dict | None:
    """When the folder `top` (path, file system type) is on a FUSE mount that the `fuse` rows
    of `ivs` name: the mount (point, type, source), its daemon (pid, name, how it was found)
    and the daemon's activity over those intervals: its share of a CPU, the bytes a second it
    read and wrote on storage and received over TCP, its TCP peers and their mean RTT.
    None otherwise."""
    if top is None or not is_fuse(top[1]):
        return None
    rows = [(iv, r) for iv in ivs for r in iv.fuse if _inside(top[0], r.mount_point)]
    if not rows:
        return None
    point = max((r.mount_point for _, r in rows), key=len)
    rows = [(iv, r) for iv, r in rows if r.mount_point == point]
    last = rows[-1][1]
    sums = [0, 0, 0, 0]  # CPU ns, disk read, disk written, received
    seconds = 0.0
    rtts: list[float] = []
    peers: list[str] = []
    received = False
    for iv, r in rows:
        got = [_int(n) for n in (r.cpu_ns, r.disk_read_bytes, r.disk_write_bytes,
                                  r.net_rx_bytes)]
        if got[0] is not None:
            seconds += iv.interval_ns / 1e9
            sums = [a + (b or 0) for a, b in zip(sums, got, strict=True)]
            received = received or got[3] is not None
        if r.rtt_us is not None and r.rtt_us == r.rtt_us:
            rtts.append(float(r.rtt_us))
        for p in (r.peers or "").split(", "):
            if p and p not in peers and len(peers) < MAX_PEERS:
                peers.append(p)
    pid = _int(last.daemon_pid)

    def rate(n: int) -> int | None:
        return round(n / seconds) if seconds else None

    return {
        "mount_point": point, "fs_type": last.fs_type, "source": last.source,
        "daemon_pid": pid, "daemon_comm": last.daemon_comm if pid is not None else None,
        "found_by": last.found_by if pid is not None else None,
        "seconds": round(seconds, 1),
        "daemon_cpu_pct": round(100 * sums[0] / 1e9 / seconds, 1) if seconds else None,
        "daemon_disk_read_bytes_s": rate(sums[1]),
        "daemon_disk_write_bytes_s": rate(sums[2]),
        "daemon_net_rx_bytes_s": rate(sums[3]) if received else None,
        "daemon_rtt_us": round(sum(rtts) / len(rtts), 1) if rtts else None,
        "daemon_peers": peers,
    }
