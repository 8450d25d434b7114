"""Data read through FUSE on hand-made windows: the I/O-bound findings name the mount, the
process serving it and its activity from the `fuse` rows; that process's disk reads are the
job's (no `device_contended` for them); FUSE subtypes are slow file systems; and the parsing
of mountinfo and of connection numbers that tracer.live.fuse finds them with."""

from __future__ import annotations

from diagnosis_rows import MAIN, MS, OWNER, WORKER, S, disk_use, file_row, thread
from test_rules import io_finding, judge, waiting_loop, workers

from tracer.core.diagnosis import Diagnosis, IntervalInput
from tracer.core.diagnosis.fuse import is_fuse
from tracer.core.diagnosis.rules import (
    dataloader_io_bound,
    device_contended,
    slow_filesystem,
    sync_loading,
)
from tracer.live.fuse import connection_id, mount_of

MNT = "/mnt/s3"


def fuse_row(cpu_ms=None, rx=None, rtt=None, peers="52.216.8.1:443", pid=4242, comm="s3fs",
             disk=0):
    return {"device": "0:52", "mount_point": MNT, "fs_type": "fuse.s3fs",
            "source": "s3fs", "daemon_pid": pid, "daemon_comm": comm,
            "found_by": "fdinfo" if pid else None,
            "cpu_ns": None if cpu_ms is None else cpu_ms * MS,
            "disk_read_bytes": None if cpu_ms is None else disk,
            "disk_write_bytes": None if cpu_ms is None else 0, "net_rx_bytes": rx,
            "rtt_us": rtt, "peers": peers}


def diagnosis(n=5, fuse=(), path=f"{MNT}/train/a.bin", fs="fuse.s3fs", loading=False,
              device_users=()) -> Diagnosis:
    """A job whose workers (or, `loading`, its loop) wait on reads of `path`; the `fuse` rows
    of interval i are fuse[i], if any."""
    d = Diagnosis()
    for i in range(n):
        if loading:
            threads = [thread(MAIN, MAIN, "main", oncpu=300 * MS, iowait=600 * MS,
                              sleep=100 * MS)]
            files = [file_row(MAIN, "main", "read", 8 << 20, 800 * MS, path, fs=fs)]
        else:
            threads = [waiting_loop(), workers(100, 900)]
            files = [file_row(WORKER, "dataloader_worker", "read", 4 << 20, 900 * MS, path,
                              fs=fs)]
        d.add(IntervalInput(ts_ns=(i + 1) * S, interval_ns=S, threads=threads, files=files,
                            owners=OWNER, device_users=list(device_users),
                            fuse=list(fuse[i]) if i < len(fuse) else []))
    return d


# the mount learnt in the first interval (no activity yet), then 4 of 4 MiB/s fetched
ROWS = [[fuse_row()]] + [[fuse_row(cpu_ms=250, rx=4 << 20, rtt=1500.0)]] * 4


def test_dataloader_io_bound_names_the_fuse_mount_its_daemon_and_what_it_did():
    (f,) = judge(dataloader_io_bound, diagnosis(fuse=ROWS))
    assert f.evidence["fuse"] == {
        "mount_point": MNT, "fs_type": "fuse.s3fs", "source": "s3fs", "daemon_pid": 4242,
        "daemon_comm": "s3fs", "found_by": "fdinfo", "seconds": 4.0, "daemon_cpu_pct": 25.0,
        "daemon_disk_read_bytes_s": 0, "daemon_disk_write_bytes_s": 0,
        "daemon_net_rx_bytes_s": 4 << 20, "daemon_rtt_us": 1500.0,
        "daemon_peers": ["52.216.8.1:443"]}
    assert f.summary.endswith(
        f"on {MNT}/train (fuse.s3fs): the data comes through FUSE mount {MNT} (fuse.s3fs, source "
        "s3fs) served by pid 4242 (s3fs), which used 25 % of a CPU, fetched from "
        "52.216.8.1:443 (4.0 MiB/s received, round trip 1.5 ms) and read 0 B/s from storage "
        "meanwhile."), f.summary


def test_sync_loading_names_it_too():
    (f,) = judge(sync_loading, diagnosis(fuse=ROWS, loading=True))
    assert f.evidence["fuse"]["daemon_pid"] == 4242
    assert "served by pid 4242 (s3fs)" in f.summary


def test_a_daemon_not_found_or_without_sockets():
    (f,) = judge(dataloader_io_bound, diagnosis(fuse=[[fuse_row(pid=None, comm=None)]] * 5))
    assert f.evidence["fuse"]["daemon_pid"] is None
    assert f.summary.endswith("source s3fs), whose serving process was not found."), f.summary
    quiet = [[fuse_row(cpu_ms=10, peers=None)]] * 5
    (f,) = judge(dataloader_io_bound, diagnosis(fuse=quiet))
    assert f.summary.endswith("which used 1 % of a CPU and read 0 B/s from storage "
                              "meanwhile."), f.summary


def test_no_fuse_evidence_off_the_mount():
    for d in (diagnosis(fuse=ROWS, path="/data/train/a.bin", fs="ext4"),  # data elsewhere
              diagnosis()):  # on FUSE, but its mount unknown
        (f,) = judge(dataloader_io_bound, d)
        assert f.evidence["fuse"] is None and "FUSE" not in f.summary


def test_the_daemons_disk_reads_are_the_jobs():
    """Its reads of a cache or backing disk are made for the job: not another process's."""
    users = [disk_use("traced", 1 << 20, 1), disk_use("other", 12 << 20, 12, "s3fs")]
    (f,) = judge(device_contended, diagnosis(device_users=users), [io_finding()])
    assert "s3fs in /jobs" in f.summary
    rows = [[fuse_row(cpu_ms=250, disk=12 << 20)]] * 5
    assert judge(device_contended, diagnosis(fuse=rows, device_users=users),
                 [io_finding()]) == []


def test_fuse_subtypes_are_slow_file_systems():
    (f,) = judge(slow_filesystem, diagnosis(), [io_finding()])
    assert f.evidence["read_bytes_by_fs"] == {"fuse.s3fs": 20 << 20}
    assert is_fuse("fuse") and is_fuse("fuseblk") and is_fuse("fuse.gcsfuse")
    assert not is_fuse("fusectl") and not is_fuse("ext4")


def test_mountinfo_and_connection_numbers(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "mountinfo").write_text(
        "36 25 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
        "45 36 0:52 / /mnt/s3 rw,nosuid - fuse.s3fs s3fs rw,user_id=0,group_id=0\n"
        "46 36 0:52 /train /data\\040set rw,nosuid - fuse.s3fs s3fs rw,user_id=0\n")
    assert mount_of("0:52", "/mnt/s3/train/a.bin", 7, str(tmp_path)) == (
        "/mnt/s3", "fuse.s3fs", "s3fs")
    # a bind mount of it, with a space in its path: the mount the file is under
    assert mount_of("0:52", "/data set/a.bin", 7, str(tmp_path)) == (
        "/data set", "fuse.s3fs", "s3fs")
    assert mount_of("0:53", "/mnt/x/a.bin", 7, str(tmp_path)) is None
    # the kernel's dev_t, as fdinfo's fuse_connection and /sys/fs/fuse/connections/ say it
    assert connection_id("0:52") == 52 and connection_id("8:17") == (8 << 20) | 17


def test_connections_from_sock_diag_as_proc_names_them():
    """A TCP connection of this process (over IPv4 and IPv6 loopback): sock_diag gives the
    same ends as /proc/PID/net/tcp, with the bytes received and an RTT; a process's
    connections to itself are no peers."""
    import os
    import socket
    import time

    from tracer.live.fuse import (
        peers_of_conns,
        proc_connections,
        socket_inodes,
        tcp_connections,
    )

    socks = []
    try:
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            srv = socket.create_server((host, 0), family=family)
            client = socket.create_connection(srv.getsockname()[:2])
            server, _ = srv.accept()
            socks += [srv, client, server]
            client.sendall(b"x" * 100_000)
            got = 0
            while got < 100_000:
                got += len(server.recv(1 << 20))
        time.sleep(0.05)
        inodes = socket_inodes(os.getpid())
        diag = tcp_connections(inodes)
        ends = {i: (c.local, c.remote) for i, c in diag.items()}
        assert ends == {i: (c.local, c.remote)
                        for i, c in proc_connections(os.getpid(), inodes).items()}
        assert len(ends) == 4
        mine = os.fstat(socks[2].fileno()).st_ino  # the IPv4 server end
        assert diag[mine].received == 100_000 and diag[mine].rtt_us > 0
        assert diag[mine].local == f"127.0.0.1:{socks[0].getsockname()[1]}"
        assert any(c.local.startswith("[::1]:") for c in diag.values())
        assert peers_of_conns(diag) == []
        assert peers_of_conns({mine: diag[mine]}) == [diag[mine].remote]
    finally:
        for s in socks:
            s.close()
