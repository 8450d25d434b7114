"""Naming a socket's peer from /proc/net/tcp{,6} text: pure parsing, on lines as Linux prints them."""
# ruff: noqa: E501  (the lines are as long as the kernel prints them)

from __future__ import annotations

from tracer.live.peers import parse_tcp

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1683 1 0 100 0 0 10 0
   1: 0100007F:A2B4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 20 4 30 10 -1
   2: 0100007F:A2B6 0100007F:1F90 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:D431 0000000000000000FFFF0000640A0A0A:01BB 01 00000000:00000000 00:00000000 00000000     0        0 77 1 0 20 4 30 10 -1
   1: 00000000000000000000000001000000:D432 B80D0120000000000000000001000000:0050 01 00000000:00000000 00:00000000 00000000     0        0 78 1 0 20 4 30 10 -1
"""


def test_connections_by_inode_listeners_and_time_wait_left_out():
    assert parse_tcp(TCP) == {4242: "127.0.0.1:8080"}


def test_ipv6_and_ipv4_mapped_peers():
    assert parse_tcp(TCP6) == {77: "10.10.10.100:443", 78: "[2001:db8::1]:80"}


def test_one_read_of_the_connections_per_network_namespace():
    """A real connection of this process is named; the connections read for it serve the next
    process of the same network namespace (the shared `tables`), which reads nothing again."""
    import os
    import socket

    from tracer.live.peers import peers_of

    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        tables: dict[str, dict[int, str]] = {}
        port = server.getsockname()[1]
        assert peers_of(os.getpid(), tables=tables) >= {f"127.0.0.1:{port}"}
        assert list(tables) == [os.readlink(f"/proc/{os.getpid()}/ns/net")]
        tables[next(iter(tables))] = {}  # what a second read would find again is not read
        assert peers_of(os.getpid(), tables=tables) == set()
        assert client.fileno() >= 0
