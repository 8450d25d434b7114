"""FUSE mounts the traced processes read through (gcsfuse, s3fs, mountpoint-s3, JuiceFS,
blobfuse serve object stores so): which file system (its type and source, from mountinfo), the
process that serves it, and what that process did each interval while the job read.

The server of a mount is the process holding a /dev/fuse file of the mount's connection. The
kernel names a connection by the super block's device number (`fc->dev`, the number that
/sys/fs/fuse/connections/ lists) and, from Linux 6.16, says it in the fdinfo of every /dev/fuse
file (`fuse_connection:`); on an older kernel the holder is known only when it is the one
process that holds /dev/fuse, or the one of them whose command line names the mount point.
Finding it walks every process's fds, once per mount (cached).

The server is not traced: its activity is read once per interval (its CPU time and storage
bytes from /proc/PID/stat and /proc/PID/io; its TCP connections' ends, bytes received and RTT
from one sock_diag dump), which costs the same per mount however many requests it serves, and
keeps it out of the tracked set, whose processes the roles, the loops and the rules all take
for the job's."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
from dataclasses import dataclass
from typing import NamedTuple

from tracer.core.diagnosis.fuse import is_fuse
from tracer.core.diagnosis.thresholds import MAX_PEERS
from tracer.core.model import FileRow, FuseRow
from tracer.live.peers import _address

FUSE_RDEV = os.makedev(10, 229)  # /dev/fuse: misc device, minor FUSE_MINOR
FDINFO, ONLY_HOLDER, CMDLINE = "fdinfo", "only_holder", "cmdline"
_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
MAX_MOUNTS = 64  # FUSE mounts followed (a job reads through one or two)


def _dev_number(device: str, sys_class_block: str = "/sys/class/block") -> str | None:
    """"MAJ:MIN" of a `files.device`: as it is, or a disk's (fuseblk) from sysfs."""
    if ":" in device:
        return device
    try:
        with open(f"{sys_class_block}/{device}/dev") as f:
            return f.read().strip()
    except OSError:
        return None


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (space, tab, newline, backslash)."""
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, ch)
    return field


def mount_of(device: str, path: str, pid: int, proc: str = "/proc"
             ) -> tuple[str, str, str] | None:
    """(mount point, file system type, source) of the mount of `device` ("MAJ:MIN") that
    holds `path`, as process `pid` sees its mounts (iotrace's own when it is gone): of several
    mounts of that device (bind mounts), the one whose mount point is the longest prefix of
    `path`."""
    for table in (f"{proc}/{pid}/mountinfo", f"{proc}/self/mountinfo"):
        best: tuple[str, str, str] | None = None
        try:
            with open(table) as f:
                # "45 27 0:40 / /mnt/x ro,relatime - fuse.slowfuse s3://bucket ro,user_id=0"
                for line in f:
                    left, _, right = line.partition(" - ")
                    fields, tail = left.split(), right.split()
                    if len(fields) < 5 or fields[2] != device or len(tail) < 2:
                        continue
                    point = _unescape(fields[4])
                    inside = path == point or path.startswith(point.rstrip("/") + "/")
                    if best is None or (inside and len(point) > len(best[0])):
                        best = (point, tail[0], _unescape(tail[1]))
        except OSError:
            continue
        if best is not None:
            return best
    return None


def connection_id(device: str) -> int:
    """The FUSE connection of a mount of `device` ("MAJ:MIN"): the kernel's dev_t, as fdinfo
    and /sys/fs/fuse/connections/ print it (MKDEV: major << 20 | minor)."""
    major, minor = (int(x) for x in device.split(":"))
    return (major << 20) | minor


def fuse_holders(proc: str = "/proc") -> dict[int, set[int | None]]:
    """pid -> the FUSE connections its /dev/fuse files serve (None: one whose fdinfo does not
    say, a kernel before 6.16), for every process holding one but iotrace."""
    out: dict[int, set[int | None]] = {}
    me = str(os.getpid())
    for pid in os.listdir(proc):
        if not pid.isdigit() or pid == me:
            continue
        try:
            fds = os.listdir(f"{proc}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            link = f"{proc}/{pid}/fd/{fd}"
            try:
                # the path in the holder's root (a container's /dev/fuse), then the device
                if not os.readlink(link).endswith("fuse") or os.stat(link).st_rdev != FUSE_RDEV:
                    continue
                with open(f"{proc}/{pid}/fdinfo/{fd}") as f:
                    conn = next((int(line.split()[1]) for line in f
                                 if line.startswith("fuse_connection:")), None)
            except (OSError, ValueError, IndexError):
                continue
            out.setdefault(int(pid), set()).add(conn)
    return out


def _cmdline(pid: int, proc: str) -> list[str]:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def find_daemon(device: str, mount_point: str, proc: str = "/proc"
                ) -> tuple[int, str] | None:
    """(pid, how it was found) of the process serving the FUSE mount of `device`; of several
    holders of its connection (a daemon that forked), the one of the lowest pid."""
    holders = fuse_holders(proc)
    conn = connection_id(device)
    exact = sorted(pid for pid, conns in holders.items() if conn in conns)
    if exact:
        return exact[0], FDINFO
    if any(c is not None for conns in holders.values() for c in conns):
        return None  # the kernel names connections, and none is this one's
    if len(holders) == 1:
        return next(iter(holders)), ONLY_HOLDER
    named = sorted(pid for pid in holders
                   if any(os.path.normpath(a) == mount_point for a in _cmdline(pid, proc)))
    return (named[0], CMDLINE) if len(named) == 1 else None


def _comm(pid: int, proc: str) -> str | None:
    try:
        with open(f"{proc}/{pid}/comm") as f:
            return f.read().rstrip("\n")
    except OSError:
        return None


def daemon_counters(pid: int, proc: str = "/proc") -> tuple[int, int, int] | None:
    """(CPU ns, bytes read from storage, bytes written to storage) of process `pid` so far,
    its threads' included; None when it is gone."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            # the fields after the command's closing parenthesis: utime, stime are 12th, 13th
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) * _TICK_NS
        io = {}
        with open(f"{proc}/{pid}/io") as f:
            for line in f:
                key, _, value = line.partition(":")
                io[key] = int(value)
        return cpu, io["read_bytes"], io["write_bytes"]
    except (OSError, ValueError, IndexError, KeyError):
        return None


def socket_inodes(pid: int, proc: str = "/proc") -> set[int]:
    """The inodes of process `pid`'s sockets."""
    inodes = set()
    try:
        fds = os.listdir(f"{proc}/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        with contextlib.suppress(OSError):
            link = os.readlink(f"{proc}/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(int(link[8:-1]))
    return inodes


class Conn(NamedTuple):
    """A TCP connection: its two ends, its smoothed RTT (us) and the bytes it received (None:
    read from /proc, which does not say)."""

    local: str
    remote: str
    rtt_us: int | None = None
    received: int | None = None


def proc_connections(pid: int, inodes: set[int], proc: str = "/proc") -> dict[int, Conn]:
    """The connections among `inodes` from /proc/PID/net/tcp{,6}, the process's namespace's
    (ends only)."""
    out: dict[int, Conn] = {}
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/{pid}/net/{name}") as f:
                # "sl local_address rem_address st ... uid timeout inode"
                for line in f.read().splitlines()[1:]:
                    fields = line.split()
                    if (len(fields) > 9 and fields[3] != _LISTEN and fields[9].isdigit()
                            and int(fields[9]) in inodes):
                        out[int(fields[9])] = Conn(_address(fields[1]), _address(fields[2]))
        except OSError:
            continue
    return out


def peers_of_conns(conns: dict[int, Conn]) -> list[str]:
    """The remote ends of `conns` but those that are their own other ends (a daemon whose
    backend, or a cache of it, is in the same process talks to itself: no peer)."""
    own = {c.local for c in conns.values()}
    return sorted({c.remote for c in conns.values() if c.remote not in own})


# sock_diag (linux/inet_diag.h): a dump of the TCP connections of iotrace's network namespace,
# each with its ends and its struct tcp_info, as `ss -ti` asks for them
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_DUMP_REQUEST = 4, 20, 0x301
_NLMSG_ERROR, _NLMSG_DONE, _INET_DIAG_INFO = 2, 3, 2
_LISTEN, _ALL_BUT_LISTEN = "0A", 0xFFFFFFFF & ~(1 << 10)  # TCP_LISTEN is 10
_MSG_LEN = 72  # struct inet_diag_msg
_RTT_AT, _BYTES_RECEIVED_AT = 68, 128  # tcp_info.tcpi_rtt (us), .tcpi_bytes_received


def tcp_connections(inodes: set[int]) -> dict[int, Conn]:
    """The TCP connections among socket `inodes` of iotrace's own network namespace, with
    their RTT and bytes received; empty when the kernel does not answer."""
    out: dict[int, Conn] = {}
    if not inodes:
        return out
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG)
    except OSError:
        return out
    with sock:
        for family in (socket.AF_INET, socket.AF_INET6):
            # inet_diag_req_v2: family, protocol, ext (1 << INET_DIAG_INFO - 1), pad, the
            # states wanted (the listening sockets have no peer: their table is not walked),
            # an empty socket id (48 bytes)
            req = struct.pack("=BBBBI48x", family, socket.IPPROTO_TCP,
                              1 << (_INET_DIAG_INFO - 1), 0, _ALL_BUT_LISTEN)
            try:
                sock.send(struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY,
                                      _NLM_F_DUMP_REQUEST, 1, 0) + req)
                _read_dump(sock, inodes, out)
            except OSError:
                continue
    return out


def _end(family: int, raw: bytes, port: int) -> str:
    """An end of a connection as /proc's are named (tracer.live.peers): `1.2.3.4:80`,
    `[::1]:80`, an IPv4-mapped IPv6 address as IPv4."""
    ip = (ipaddress.IPv4Address(raw[:4]) if family == socket.AF_INET
          else ipaddress.IPv6Address(raw))
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return f"[{ip}]:{port}" if isinstance(ip, ipaddress.IPv6Address) else f"{ip}:{port}"


def _read_dump(sock: socket.socket, inodes: set[int], out: dict[int, Conn]) -> None:
    while True:
        buf, at = sock.recv(65536), 0
        if not buf:
            return
        while at + 16 <= len(buf):
            length, kind = struct.unpack_from("=IH", buf, at)
            if kind in (_NLMSG_DONE, _NLMSG_ERROR) or length < 16:
                return
            msg = memoryview(buf)[at + 16:at + length]
            at += (length + 3) & ~3
            if len(msg) < _MSG_LEN:
                continue
            # inet_diag_msg: family, state, timer, retrans; the socket id (ports big-endian,
            # then the addresses, 16 bytes each); expires, rqueue, wqueue, uid, inode
            family = msg[0]
            sport, dport = struct.unpack_from(">HH", msg, 4)
            inode = struct.unpack_from("=I", msg, 68)[0]
            if inode not in inodes:
                continue
            local, remote = (_end(family, bytes(msg[8:24]), sport),
                             _end(family, bytes(msg[24:40]), dport))
            rtt = received = None
            pos = _MSG_LEN  # the attributes: (len, type) + payload, 4-aligned
            while pos + 4 <= len(msg):
                alen, atype = struct.unpack_from("=HH", msg, pos)
                if alen < 4:
                    break
                if atype == _INET_DIAG_INFO and alen - 4 >= _BYTES_RECEIVED_AT + 8:
                    rtt = struct.unpack_from("=I", msg, pos + 4 + _RTT_AT)[0]
                    received = struct.unpack_from("=Q", msg, pos + 4 + _BYTES_RECEIVED_AT)[0]
                pos += (alen + 3) & ~3
            out[inode] = Conn(local, remote, rtt, received)


def _same_netns(pid: int, proc: str) -> bool:
    try:
        return os.readlink(f"{proc}/{pid}/ns/net") == os.readlink(f"{proc}/self/ns/net")
    except OSError:
        return False


@dataclass
class Mount:
    device: str
    mount_point: str
    fs_type: str
    source: str
    daemon: int | None
    comm: str | None
    found_by: str | None
    last: tuple[int, int, int] | None = None  # the daemon's counters at the last sample
    received: dict[int, int] | None = None  # its connections' bytes received, by socket inode


class FuseMounts:
    """The FUSE mounts the traced processes read through, learnt from the `files` rows of each
    interval, and a `fuse` row per mount per interval from the first read on: the daemon's
    activity since the interval before (null in the first)."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.mounts: dict[str, Mount] = {}  # by device
        self.tried: set[str] = set()  # devices looked up (a mount not found is not again)
        self.other: set[str] = set()  # devices of files on other file systems

    def learn(self, files: list[FileRow]) -> None:
        """Finds the mount and its daemon for each FUSE device first read in `files`."""
        for row in files:
            dev = row.get("device")
            if not dev or dev in self.tried or dev in self.other:
                continue
            if not is_fuse(row.get("fs_type") or ""):
                self.other.add(dev)
                continue
            if len(self.tried) >= MAX_MOUNTS:
                continue
            self.tried.add(dev)
            number = _dev_number(dev)
            where = mount_of(number, row["path"], row["pid"], self.proc) if number else None
            if number is None or where is None:
                continue
            found = find_daemon(number, where[0], self.proc)
            pid, how = found if found else (None, None)
            m = Mount(dev, *where, pid, _comm(pid, self.proc) if pid else None, how)
            self.mounts[dev] = m

    def _network(self, m: Mount) -> tuple[list[str], int | None, float | None]:
        """The daemon's TCP peers now, the bytes its connections received since the last call
        (None: not known; a connection opened since counts whole), their mean smoothed RTT in
        us (None: none, or the daemon is in another network namespace, whose connections
        iotrace's sock_diag does not see: its peers then come from /proc)."""
        assert m.daemon is not None
        inodes = socket_inodes(m.daemon, self.proc)
        seen = _same_netns(m.daemon, self.proc)
        conns = (tcp_connections(inodes) if seen
                 else proc_connections(m.daemon, inodes, self.proc) if inodes else {})
        received = {i: c.received for i, c in conns.items() if c.received is not None}
        rx = (sum(max(0, b - m.received.get(i, 0)) for i, b in received.items())
              if m.received is not None and seen else None)
        m.received = received if seen else None
        rtts = [c.rtt_us for c in conns.values() if c.rtt_us is not None]
        return (peers_of_conns(conns)[:MAX_PEERS], rx,
                sum(rtts) / len(rtts) if rtts else None)

    def rows(self, ts_ns: int, files: list[FileRow]) -> list[FuseRow]:
        """The interval's rows, given its `files` rows: one per mount known (the mounts they
        are the first reads of, learnt now, included)."""
        known = set(self.mounts)
        self.learn(files)
        return self.sample(ts_ns, new=set(self.mounts) - known)

    def sample(self, ts_ns: int, new: frozenset[str] | set[str] = frozenset()) -> list[FuseRow]:
        """One row per mount known: the daemon's activity since the last sample (null for the
        mounts `new`, just learnt, and once it is gone), its TCP peers now."""
        rows: list[FuseRow] = []
        for dev, m in self.mounts.items():
            now = daemon_counters(m.daemon, self.proc) if m.daemon else None
            delta = ([b - a for a, b in zip(m.last, now, strict=True)]
                     if now and m.last and dev not in new else [None] * 3)
            m.last = now
            peers, rx, rtt = self._network(m) if now else ([], None, None)
            if dev in new:
                rx = None
            rows.append({
                "ts": ts_ns, "device": m.device, "mount_point": m.mount_point,
                "fs_type": m.fs_type, "source": m.source, "daemon_pid": m.daemon,
                "daemon_comm": m.comm, "found_by": m.found_by, "cpu_ns": delta[0],
                "disk_read_bytes": delta[1], "disk_write_bytes": delta[2],
                "net_rx_bytes": rx, "rtt_us": rtt, "peers": ", ".join(peers) or None})
        return rows
