"""The live view's panes, the interval line and the CSV sink, on synthetic snapshots
(tests/ui_snapshots.py, whose numbers are worked out by hand in the comments here); one test
drives the real live view in tmux."""

from __future__ import annotations

import dataclasses
import io
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from rich.console import Console
from ui_snapshots import MIB, SEC, findings, loop_rows, snapshot

from tracer.core.interval import Interval
from tracer.core.model import Snapshot
from tracer.core.selfcost import SelfCost, TracerCpu
from tracer.sinks.csv import CsvSink
from tracer.ui import stats
from tracer.ui.fmt import dstat_bytes, short_ns
from tracer.ui.line import LinePrinter, header_line, interval_line
from tracer.ui.live import LiveView
from tracer.ui.view import (
    DevicePane,
    FilesPane,
    FindingPane,
    Header,
    HistogramPane,
    ProcessPane,
    Screen,
    SystemPane,
    ViewState,
    loop_bar,
)

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "tests/workloads/live_view_demo.py"


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Wall-clock columns print local time: pin it to UTC (T0 is 22:13:20 UTC)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def text(renderable, width: int = 100) -> list[str]:
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


@pytest.fixture
def state() -> ViewState:
    """Two intervals (the first without an interval length, as a run's first snapshot)."""
    s = ViewState(targets="python train.py", interval_s=1.0)
    s.update(snapshot(0, interval_ns=0), loop_rows(0), findings(), events_lost=0)
    s.update(snapshot(1), loop_rows(1), findings(), events_lost=3)
    return s


def rows_of(lines: list[str]) -> list[str]:
    """The first word of each process row (its pid) in the process pane's lines."""
    return [ln.split()[0] for ln in lines if ln[:4].isdigit()]


# -- panes ------------------------------------------------------------------------------------------
def test_header(state):
    assert text(Header(state)) == [
        "iotrace  python train.py   elapsed 0:00:02   interval 1 s   events lost 3",
        "1 main, 2 dataloader_worker, 1 child  sort: read  layer: syscall  q quit, s sort, "
        "l layer, r role",
    ]


def test_header_says_the_tracers_own_cpu(state):
    """With the snapshot's own-cost reading: the tracer's CPU over the last interval, and
    map-full drops only when there are some."""
    last = state.snapshots[-1]
    tracer = TracerCpu(1.0, 0.5, 2.0, 25.0, 3.14, 1 << 27)
    state.snapshots[-1] = dataclasses.replace(last, cost=SelfCost((), 3, {"hists": 0}, tracer))
    assert text(Header(state))[0].endswith("events lost 3   own CPU 3.1 %")
    state.snapshots[-1] = dataclasses.replace(last, cost=SelfCost((), 3, {"hists": 7}, tracer))
    assert text(Header(state), width=140)[0].endswith("own CPU 3.1 %   map-full drops 7")


def test_finding_pane_shows_the_leading_finding_and_its_advice(state):
    lines = text(FindingPane(state))
    assert lines[0].startswith("╭─ finding, severity 45 (also: device_saturated) ─")
    assert lines[1] == ("│ dataloader_io_bound (pid 1000): The training loop waited for batches "
                        "55 % of 1 s; the DataLoader │")
    assert lines[4] == ("│ advice: The workers wait on storage: put the dataset on local SSD or "
                        "tmpfs (or in the page       │")
    assert text(FindingPane(ViewState()))[1].startswith(
        "│ no finding yet: the diagnosis needs a few intervals")


def test_process_pane(state):
    # worker 1001, last interval: 101 MiB of file reads; 101 + 2 file syscalls (its socket
    # write is no file I/O); window (2 intervals) of file syscalls: 201 in slot 20 (1-2 ms),
    # 4 in slot 22 (4-8 ms): p50 rank 103 = 1 MiB ns + 1 MiB ns * 102.5/201 = 1.58 ms, p99 rank
    # 203 -> 4 Mi ns * (1 + 1.5/4) = 5.77 ms; block slot 19 x 200: p50 rank 100 = 512 Ki ns *
    # (1 + 99.5/200) = 785 us; D state 600 ms of 1 s.
    # main: 5 reads + 10 writes + 1 fsync; loop 45/10/0/0/40/5 % -> 9 I, 2 C, 8 =, 1 . of 20.
    lines = text(ProcessPane(state))
    assert lines[:9] == [
        "processes (latency: last 2 intervals)",
        "                              READ▼  WRITE  OPS  SYSCALL  SYSCALL   BLOCK   BLOCK     IO",
        " PID  ROLE    COMM             MB/s   MB/s   /s      p50      p99     p50     p99  wait%",
        "─" * 88,
        "1001  worker  pt_data_worker  101.0    0.0  103   1.58ms   5.77ms   785us  1.04ms     60",
        "1002  worker  pt_data_worker   50.0    0.0   50   1.57ms   2.08ms   392us   520us     30",
        "1000  main    python            0.0   10.0   16   41.8us   29.4ms  3.09ms  4.14ms      0",
        "1003  child   sh                0.0    0.0    3   1.45us   1.96us       -       -      0",
        "loop    1000 IIIIIIIIICC========.  data wait I/O 45%, data wait CPU 10%, compute 40%, "
        "other 5%",
    ]
    assert " ".join(lines[9:11]).split() == [  # the legend, wrapped at 100 columns
                                "I", "data", "wait", "I/O,", "C", "data", "wait", "CPU,", "N",
                                "data", "wait", "network,", "L", "sync", "loading,", "W", "sync",
                                "writes,", "K", "checkpoint,", "R", "collective", "wait,", "G", "GPU",
                                "wait,", "D", "device", "copy,", "=",
                                "compute,", ".", "other"]


def test_sort_cycles_read_write_latency(state):
    assert rows_of(text(ProcessPane(state))) == ["1001", "1002", "1000", "1003"]
    assert state.cycle_sort() == "write"
    lines = text(ProcessPane(state))
    assert "WRITE▼" in lines[1] and "READ▼" not in lines[1]
    assert "sort: write" in text(Header(state))[1]
    assert rows_of(lines) == ["1000", "1001", "1002", "1003"]  # ties (0 MB/s) by pid
    assert state.cycle_sort() == "latency"
    lines = text(ProcessPane(state))
    assert "p99▼" in lines[2]
    assert rows_of(lines) == ["1000", "1001", "1002", "1003"]  # 29.4 ms, 5.77, 2.08, 1.96 us
    assert state.cycle_sort() == "read"


def test_process_pane_names_a_rank():
    """A rank's loop row says its rank (the `loop` rows carry it), where a main's says loop."""
    s = ViewState(targets="torchrun train.py", interval_s=1.0)
    for i in (0, 1):
        s.update(snapshot(i, interval_ns=0 if i == 0 else SEC),
                 [{**r, "rank": 3} for r in loop_rows(i)], findings(), events_lost=0)
    [line] = [ln for ln in text(ProcessPane(s)) if ln.startswith(("loop", "rank"))]
    assert line.startswith("rank 3     1000 IIII")


def test_histogram_pane_layers_and_roles(state):
    # syscall, all roles, 2 intervals: child 2x3 in slot 10, main 2x5 in 12 and 2x10 in 15,
    # workers 201+100 in 20 and 4 in 22, the fsyncs 2 in 24.
    lines = text(HistogramPane(state))
    assert lines[0].startswith("╭─ file syscalls, role all, last 2 intervals ─")
    assert lines[1:6] == [
        "│ 343 ops (read 321, write 20, fsync 2)                  │",
        "│ p50 1.52 ms, p99 6.82 ms                               │",
        "│          latency :    count  distribution              │",
        "│ 1.02us -> 2.05us :        6 |                        | │",
        "│ 2.05us -> 4.10us :        0 |                        | │",
    ]
    assert "│ 1.05ms -> 2.10ms :      301 |************************| │" in lines
    assert lines[-2] == "│ 16.8ms -> 33.6ms :        2 |                        | │"
    assert state.cycle_layer() == "block"
    assert text(HistogramPane(state)) == [
        "╭─ block service (issue->complete), role all, last 2 intervals ─╮",
        "│ 320 ops (read 300, write 20)                                  │",
        "│ p50 680 us, p99 3.83 ms                                       │",
        "│          latency :    count  distribution                     │",
        "│   262us -> 524us :      100 |************            |        │",
        "│  524us -> 1.05ms :      200 |************************|        │",
        "│ 1.05ms -> 2.10ms :        0 |                        |        │",
        "│ 2.10ms -> 4.19ms :       20 |**                      |        │",
        "╰───────────────────────────────────────────────────────────────╯",
    ]
    assert "layer: block" in text(Header(state))[1]
    assert state.cycle_layer() == "block_queue"
    state.cycle_role()
    assert state.cycle_role() == "rank"
    assert state.cycle_role() == "dataloader_worker"
    lines = text(HistogramPane(state))
    assert lines[0].startswith("╭─ block queue (insert->issue), role dataloader_worker, last 2 "
                               "intervals ─")
    assert lines[1].startswith("│ 200 ops (read 200) ")
    assert lines[4].startswith("│ 1.02us -> 2.05us :      200 |************************|")
    state.cycle_role()
    assert state.cycle_role() is None
    assert state.cycle_layer() == "syscall"


def test_files_pane(state):
    # shard-000 over 2 intervals: 102+103 reads, 201 MiB, 2 x 12800 pages missed = 100 MiB:
    # hit 1 - 100/201 = 50 %; model.pt: writes and fsyncs, 2 x (30 + 20) ms.
    lines = text(FilesPane(state))
    assert lines[1:] == [
        "  TIME     MAX  READS  READ  WRITES  WRITTEN  HIT%  FS       ROLE    PATH",
        "─" * 94,
        " 300ms  4.00ms    205  201M       0        0    50  ext4     worker  /data/train/shard-000.tar",
        " 160ms  3.00ms    100  100M       0        0   100  ext4     worker  /data/train/shard-001.tar",
        " 100ms  20.0ms      0     0      20      20M     -  ext4     main    /ckpt/model.pt",
        "6.00us  1.50us      6  600B       0        0   100  overlay  child   /etc/hosts",
    ]
    narrow = text(FilesPane(state), width=90)  # the path gives way, cut on the left
    assert narrow[3].endswith("  ext4     worker  …/train/shard-000.tar")
    assert max(len(ln) for ln in narrow) == 90


def test_device_pane(state):
    assert text(DevicePane(state)) == [
        "devices (iostat -x)",
        "Device      r/s    w/s      rkB/s     wkB/s  r_await  w_await  aqu-sz  %util",
        "─" * 76,
        "nvme0n1  150.00  10.00  153600.00  10240.00     0.61     2.50    0.12  93.50",
        "sda        0.00   2.00       0.00      8.00     0.00     0.50    0.00   0.10",
    ]


def test_device_pane_says_who_else_read_each_disk(state):
    """With `device_users` rows: the share of each disk's read bytes by untraced processes and
    the one that read most; a disk no one read has "-"."""
    def user(device, who, comm, nbytes, op="read"):
        return {"ts": 0, "device": device, "op": op, "who": who, "cgroup": None,
                "container_id": None, "pod_uid": None, "comm": comm, "requests": 1,
                "bytes": nbytes, "service_ns": 1000}

    users = [user("nvme0n1", "traced", None, 60 * MIB), user("nvme0n1", "other", "dd", 30 * MIB),
             user("nvme0n1", "kernel_thread", "2 x rsync", 6 * MIB),
             user("nvme0n1", "rest", None, 4 * MIB),
             user("nvme0n1", "other", "backup", 50 * MIB, op="write"),
             user("sda", "traced", None, 0, op="write")]
    snap = dataclasses.replace(snapshot(2), device_users=users)  # 40 of 100 MiB read by others
    state.update(snap, loop_rows(2), findings(), events_lost=3)
    assert text(DevicePane(state)) == [
        "devices (iostat -x)",
        "Device      r/s    w/s      rkB/s     wkB/s  r_await  w_await  aqu-sz  %util  others' reads",
        "─" * 91,
        "nvme0n1  150.00  10.00  153600.00  10240.00     0.61     2.50    0.12  93.50  40 % dd",
        "sda        0.00   2.00       0.00      8.00     0.00     0.50    0.00   0.10  -",
    ]


def test_system_pane_scrolls_like_dstat(state):
    assert text(SystemPane(state))[1:5] == [
        "│ --time-- ---cpu-usage--- --memory--- ---net---- ---disk---    │",
        "│   time   |usr sys idl wai| used  cach| recv  send| read  writ │",
        "│ 22:13:21| 35   8  35  22| 6.5G  1.2G| 1.5k     0| 150M   10M  │",
        "│ 22:13:22| 35   8  35  22| 6.5G  1.2G| 1.5k     0| 150M   10M  │",
    ]


def test_window_keeps_the_last_intervals():
    s = ViewState(window=3)
    for i in range(5):
        s.update(snapshot(i))
    assert [snap.ts_ns for snap in s.snapshots] == [snapshot(i).ts_ns for i in (2, 3, 4)]
    assert text(ProcessPane(s))[0] == "processes (latency: last 3 intervals)"
    assert s.elapsed_s == 5.0


def test_screen_layout_by_width(state):
    wide = text(Screen(state), width=140)
    beside = next(ln for ln in wide if "file syscalls" in ln)
    assert "system (dstat)" in beside  # histogram and system side by side
    assert any("nvme0n1  150.00" in ln and ln.startswith("│ ") for ln in wide)  # devices too
    narrow = text(Screen(state), width=100)
    assert not any("file syscalls" in ln and "system (dstat)" in ln for ln in narrow)
    for title in ("finding, severity 45", "processes (latency", "system (dstat)",
                  "devices (iostat -x)", "top files by time"):
        assert any(title in ln for ln in narrow), title
        assert any(title in ln for ln in wide), title


def test_empty_state_renders():
    lines = text(Screen(ViewState(targets="PID 7")), width=100)
    assert lines[0].startswith("iotrace  PID 7   elapsed 0:00:00")
    assert "processes: no traced process did anything yet" in lines
    assert "devices: no disk statistics" in lines


def test_loop_bar_largest_remainder():
    shares = {"data_wait_io": 33.4, "data_wait_cpu": 33.3, "data_wait_network": 0.0,
              "sync_loading": 0.0, "sync_writes": 0.0, "checkpoint": 0.0, "compute": 33.3,
              "other": 0.0}
    assert loop_bar(shares, width=10, color=False).plain == "IIIICCC==="
    assert loop_bar(shares, width=10, color=True).plain == "█" * 10


def test_formats():
    assert [short_ns(v) for v in (None, 850, 999.6, 12_345, 99_960, 4.56e6, 1.2e9)] == [
        "-", "850ns", "1.00us", "12.3us", "100us", "4.56ms", "1.20s"]
    assert [dstat_bytes(v) for v in (0, 512, 1536, 12_000, 3.5e9)] == [
        "0", "512B", "1.5k", "12k", "3.3G"]
    assert stats.slot_of(0) == 0 and stats.slot_of(1024) == 10


# -- the interval line ------------------------------------------------------------------------------
def test_interval_line():
    # file reads of interval 1: child 3 (slot 10), main 5 (slot 12), workers 151 (slot 20) and
    # 2 (slot 22): 161/s, p99 rank ceil(159.39) = 160, the 1st of 2 in slot 22 -> 4 Mi ns *
    # (1 + 0.5/2) = 5.24 ms.
    assert header_line().splitlines() == [
        "--time-- ---cpu %--- -disk MB/s- --file reads-- --------------------------loop %------------"
        "------------- ---finding---",
        "    time|usr sys wai| read  writ|  ops/s    p99|dwio dwcpu dwnet load  wrt ckpt coll  gpu dcpy "
        "comp other|kind",
    ]
    assert interval_line(snapshot(1), loop_rows(1), findings()) == (
        "22:13:22| 35   8  22|  150  10.0|    161 5.24ms|  45    10     0    0    0    0    0    0    0"
        "   40     5|dataloader_io_bound")
    bare = Snapshot(snapshot(1).ts_ns, 2 * SEC)
    assert interval_line(bare) == (
        "22:13:22|  -   -   -|    -     -|      0      -|   -     -     -    -    -    -    -    -    -    -"
        "     -|-")


def test_line_printer_repeats_the_header():
    out = io.StringIO()
    printer = LinePrinter(out, header_every=2)
    for i in range(3):
        printer.write(Interval(snapshot(i), loop_rows(i)))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 + 2 + 2 + 1
    assert lines[0].startswith("--time--") and lines[4].startswith("--time--")
    assert lines[2].startswith("22:13:21|") and lines[6].startswith("22:13:23|")


# -- CSV ----------------------------------------------------------------------------------------------
def test_csv_sink(tmp_path):
    path = tmp_path / "x.csv"
    sink = CsvSink(path)
    sink.write(Interval(snapshot(0, interval_ns=0), loop_rows(0)))  # the first: interval_s stands in
    sink.write(Interval(snapshot(1, interval_ns=2 * SEC), []))
    sink.close()
    sink.close()  # twice is fine
    with pytest.raises(ValueError):
        sink.write(Interval(snapshot(2)))
    header, first, second = path.read_text().splitlines()
    dev = ["r_s", "w_s", "rkb_s", "wkb_s", "r_await_ms", "w_await_ms", "aqu_sz", "util_pct"]
    role = ["procs", "read_bytes_s", "write_bytes_s", "ops_s", "read_p99_ns", "iowait_pct"]
    assert header.split(",") == [
        "time", "interval_s", "cpu_usr_pct", "cpu_sys_pct", "cpu_idl_pct", "cpu_wai_pct",
        "mem_used_bytes", "mem_cache_bytes", "net_recv_bytes_s", "net_send_bytes_s",
        "dsk_read_bytes_s", "dsk_writ_bytes_s",
        *(f"nvme0n1_{c}" for c in dev), *(f"sda_{c}" for c in dev),
        *(f"{r}_{c}" for r in ("main", "rank", "agent", "dataloader_worker", "child")
          for c in role),
        "loop_data_wait_io_pct", "loop_data_wait_cpu_pct", "loop_data_wait_network_pct",
        "loop_sync_loading_pct", "loop_sync_writes_pct", "loop_checkpoint_pct",
        "loop_collective_wait_pct", "loop_gpu_wait_pct", "loop_device_copy_pct",
            "loop_compute_pct", "loop_other_pct"]
    system = ("35.200,8.400,34.800,21.600,6979321856.000,1342177280.000,1500.000,0.000,"
              "157286400.000,10493952.000,")
    devices = ("150.000,10.000,153600.000,10240.000,0.610,2.500,0.120,93.500,"
               "0.000,2.000,0.000,8.000,0.000,0.500,0.000,0.100,")
    # interval 0, 1 s: main 20480 B read, 10 MiB written, 16 ops, p99 of 5 reads in slot 12
    # (rank 5: 4096 + 4096 * 4.5/5 = 7782 ns); workers 150 MiB, 152 ops, p99 rank 151 of
    # 100+50 in slot 20 and 2 in slot 22 -> 4 Mi ns * (1 + 0.5/2) = 5242880 ns, D state 60 and
    # 30 % -> mean 45; child 300 B, 3 ops, slot 10 p99 rank 3 = 1024 + 1024 * 2.5/3 = 1877 ns.
    assert first == ("2023-11-14T22:13:21.000Z,1.000," + system + devices
                     + "1,20480.000,10485760.000,16.000,7782,0.000,"
                     + "0,0.000,0.000,0.000,,," * 2  # no ranks, no agent
                     + "2,157286400.000,0.000,152.000,5242880,45.000,"
                     + "1,300.000,0.000,3.000,1877,0.000,"
                     + "45.000,10.000,0.000,0.000,0.000,0.000,0.000,0.000,0.000,40.000,5.000")
    # interval 1 lasted 2 s: rates halve, D state shares halve, no loop rows.
    assert second == ("2023-11-14T22:13:22.000Z,2.000," + system + devices
                      + "1,10240.000,5242880.000,8.000,7782,0.000,"
                      + "0,0.000,0.000,0.000,,," * 2
                      + "2,79167488.000,0.000,76.500,5242880,22.500,"
                      + "1,150.000,0.000,1.500,1877,0.000,"
                      + ",,,,,,,,,,")


def test_csv_sink_keeps_the_first_devices(tmp_path):
    path = tmp_path / "x.csv"
    first = snapshot(0)
    later = Snapshot(snapshot(1).ts_ns, SEC, devices=[{**first.devices[1], "device": "sdb"}])
    with CsvSink(path) as sink:
        sink.write(Interval(first))
        sink.write(Interval(later))
    header, _, row = path.read_text().splitlines()
    assert "sdb" not in header
    cells = dict(zip(header.split(","), row.split(","), strict=True))
    assert cells["nvme0n1_r_s"] == "" and cells["cpu_usr_pct"] == ""
    assert cells["main_procs"] == "0" and cells["main_read_p99_ns"] == ""


# -- the live view ---------------------------------------------------------------------------------
def test_live_view_without_a_terminal():
    """No tty on stdin: no key thread; keys can still be pressed; close is idempotent."""
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    quits = []
    view = LiveView("PID 1", 1.0, console=console, keys=io.StringIO(),
                    on_quit=lambda: quits.append(1))
    with view:
        view.write(Interval(snapshot(0), loop_rows(0), findings(), events_lost=0))
        view.press("s")
        view.press("l")
        view.press("x")  # ignored
        assert (view.state.sort, view.state.layer) == ("write", "block")
        assert not view.quit_requested
        view.press("q")
        assert view.quit_requested and quits == [1]
    view.close()
    assert "dataloader_io_bound" in console.file.getvalue()


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True,
                          check=True, timeout=10).stdout


def _wait_screen(sock: str, pred, timeout: float = 8.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux(sock, "capture-pane", "-p", "-t", "demo")
        if pred(screen):
            return screen
        time.sleep(0.1)
    raise AssertionError(f"screen never matched; last capture:\n{screen}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_live_view_in_tmux():
    sock = f"iotrace-test-{uuid.uuid4().hex[:8]}"  # a private tmux server, killed below
    cmd = (f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} {shlex.quote(str(DEMO))}"
           " --seconds 20 --interval 0.3; echo DEMO-EXIT=$?; sleep 30")
    env = {**os.environ, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "xterm-256color"}
    subprocess.run(["tmux", "-L", sock, "-f", "/dev/null", "new-session", "-d", "-s", "demo",
                    "-x", "140", "-y", "45", cmd], check=True, env=env, timeout=10)
    socket_path = _tmux(sock, "display-message", "-p", "#{socket_path}").strip()
    try:
        screen = _wait_screen(sock, lambda s: "top files by time" in s)
        for pane in ("iotrace  python train.py (demo)", "processes (latency",
                     "file syscalls, role all", "system (dstat)", "devices (iostat -x)",
                     "top files by time", "finding, severity 45"):
            assert pane in screen, pane
        assert "dataloader_io_bound (pid 1000): The training loop waited for batches" in screen
        assert "advice: The workers wait on storage" in screen
        assert "sort: read" in screen and "READ▼" in screen
        _tmux(sock, "send-keys", "-t", "demo", "s")
        screen = _wait_screen(sock, lambda s: "sort: write" in s)
        assert "WRITE▼" in screen and "READ▼" not in screen
        _tmux(sock, "send-keys", "-t", "demo", "l")
        _wait_screen(sock, lambda s: "block service (issue->complete)" in s)
        _tmux(sock, "send-keys", "-t", "demo", "q")
        screen = _wait_screen(sock, lambda s: "DEMO-EXIT=" in s)
        assert "DEMO-EXIT=0" in screen
        assert "(quit)" in screen  # q ended it before its 20 s
        assert "processes (latency" not in screen  # the alternate screen is gone
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=10)
        if socket_path:
            Path(socket_path).unlink(missing_ok=True)


def test_gpu_pane_only_when_sampling(state):
    from dataclasses import replace

    from tracer.ui.view import GpuPane

    assert text(GpuPane(state)) == []  # no NVML rows: no pane
    rows = [{"ts": 0, "gpu": 0, "name": "H200", "util_pct": u, "mem_util_pct": 20.0}
            for u in (90.0, 0.0, 0.0, 70.0)]
    s = ViewState(targets="x", interval_s=1.0)
    s.update(replace(snapshot(1), gpu=rows), loop_rows(1), findings())
    lines = text(GpuPane(s))
    assert lines[0].strip() == "gpu (NVML)"
    assert lines[-1].split() == ["0", "H200", "40", "20", "50", "4"]
