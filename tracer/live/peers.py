"""The TCP peers a process talks to: its socket fds (/proc/PID/fd) matched to the connections of
its network namespace (/proc/PID/net/tcp, tcp6), as `ss -tp` does. Read in user space once per
interval: the kernel side counts the socket reads, this only names the other end."""

from __future__ import annotations

import ipaddress
import os
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tracer.core import abi
from tracer.core.diagnosis.thresholds import MAX_PEERS
from tracer.core.vocab import DATALOADER_WORKER, LOOP_ROLES

if TYPE_CHECKING:
    from tracer.live.processes import Process

_LISTEN = "0A"


def _address(hex_addr: str) -> str:
    """`0100007F:1F90` -> `127.0.0.1:8080`; IPv6 in brackets. The kernel prints the address as
    32-bit words in host order (little-endian here), the port as a big-endian number."""
    addr, port = hex_addr.split(":")
    raw = b"".join(struct.pack("<I", int(addr[i:i + 8], 16)) for i in range(0, len(addr), 8))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    text = f"[{ip}]" if isinstance(ip, ipaddress.IPv6Address) else str(ip)
    return f"{text}:{int(port, 16)}"


def parse_tcp(text: str) -> dict[int, str]:
    """Socket inode -> its remote `address:port`, for the connections of /proc/net/tcp{,6}
    (listening sockets have no peer and are left out)."""
    out = {}
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10 or f[3] == _LISTEN or f[9] == "0":
            continue
        out[int(f[9])] = _address(f[2])
    return out


def peers_of(pid: int, proc_root: str = "/proc",
             tables: dict[str, dict[int, str]] | None = None) -> set[str]:
    """The remote ends of `pid`'s TCP sockets now; empty when it is gone or unreadable.
    `tables`: the connections read already in this round, by network namespace, which this
    call adds to. Reading /proc/PID/net/tcp walks every bucket of the host's connection
    tables: a DataLoader job's main and workers share one namespace,
    so one read serves them all."""
    inodes = set()
    try:
        fds = os.listdir(f"{proc_root}/{pid}/fd")
    except OSError:
        return set()
    for fd in fds:
        try:
            link = os.readlink(f"{proc_root}/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    if not inodes:
        return set()
    try:
        netns = os.readlink(f"{proc_root}/{pid}/ns/net")
    except OSError:
        netns = None
    conns = tables.get(netns) if tables is not None and netns is not None else None
    if conns is None:
        conns = {}
        for name in ("tcp", "tcp6"):
            try:
                with open(f"{proc_root}/{pid}/net/{name}") as f:
                    conns.update(parse_tcp(f.read()))
            except OSError:
                continue
        if tables is not None and netns is not None:
            tables[netns] = conns
    return {conns[i] for i in inodes if i in conns}


def sample_peers(alive: Iterable[Process], hists: dict[bytes, bytes]) -> None:
    """The TCP peers of the mains and their workers, for the network data wait's evidence:
    kept on each process (its rows: the step's input names them for its loop, as a replay
    of its `processes` rows does). Only for the processes whose syscalls used a network socket
    (`hists`, the reading's): reading a namespace's connections walks every bucket of the
    host's tables (about 10 ms a reading on a 24 GiB host), and a DataLoader's workers
    hold AF_UNIX sockets only."""
    tables: dict[str, dict[int, str]] = {}  # each network namespace's, read once
    networked = set()
    for raw in hists:
        tgid, target = abi.hist_key_target(raw)
        if target == abi.TARGET_SOCKET:
            networked.add(tgid)
    for proc in alive:
        if proc.role not in (*LOOP_ROLES, DATALOADER_WORKER) or len(proc.peers) >= MAX_PEERS:
            continue
        if proc.pid not in networked:
            continue
        new = sorted(peers_of(proc.pid, tables=tables) - set(proc.peers))[
            :MAX_PEERS - len(proc.peers)]
        proc.peers += tuple(new)
