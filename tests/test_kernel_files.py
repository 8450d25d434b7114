"""Files for real: full paths (opened before attach, deleted, on a tmpfs mount, too long for the
kernel walk), exact per-file counts, page-cache misses of an mmap, fsync, writeback, slow events."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from conftest import EXACT, IOTRACE, ROOT, needs_root, run_iotrace, unseen, warm

pytestmark = [needs_root, pytest.mark.kernel]

PAGE = 4096
WORK = ROOT / "tests/workloads/files_work.py"


def make_file(path, mib: float) -> None:
    with open(path, "wb") as f:
        f.write(os.urandom(int(mib * (1 << 20))))
        f.flush()
        os.fsync(f.fileno())


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "iotrace-test", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def disk_of(path) -> str:
    """The whole disk under `path`'s file system, as the block layer names it."""
    st = os.stat(path)
    sys_dev = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if os.path.exists(os.path.join(sys_dev, "partition")):
        sys_dev = os.path.dirname(sys_dev)
    return os.path.basename(sys_dev)


def per_file(files: pd.DataFrame, pid: int, path, op: str) -> pd.Series:
    sel = files[(files.pid == pid) & (files.path == str(path)) & (files.op == op)]
    return sel[["ops", "bytes", "pages_missed", "pages_dirtied", "latency_sum_ns"]].sum()


def test_files_paths_and_exact_counts(tmp_path, tmpfs):
    data = tmp_path / "data"
    data.mkdir()
    long_dir = data / ("d" * 100)  # longer than a kernel name slot: /proc/PID/fd fallback
    long_dir.mkdir()
    spec = {"before": data / "before.bin", "after": long_dir / "after.bin",
            "mmap": data / "mapped.bin", "write": data / "written.bin",
            "deleted": data / "gone.bin", "tmpfs": tmpfs / "t.bin", "write_mib": 64,
            "before_reads": 37, "after_reads": 23, "deleted_reads": 11, "tmpfs_reads": 5}
    for key in ("before", "after", "deleted", "tmpfs"):
        make_file(spec[key], 1)
        warm(spec[key])
    make_file(spec["mmap"], 8)
    ready_r, ready_w = os.pipe()
    spec["ready_fd"] = ready_w
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({k: str(v) if not isinstance(v, int) else v
                                     for k, v in spec.items()}))
    work = subprocess.Popen([sys.executable, str(WORK), str(spec_path)], pass_fds=(ready_w,))
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"r"
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "--pid", str(work.pid), "-o", str(out), *EXACT],
                              cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert tracer.stderr.readline().startswith("Tracing")
    work.send_signal(signal.SIGUSR1)
    assert work.wait(timeout=60) == 0
    stdout, stderr = tracer.communicate(timeout=60)
    assert tracer.returncode == 0, stderr
    files = pd.read_parquet(out / "files")
    pid = work.pid

    # Exact per-file reads, with full absolute paths, whenever the file was opened.
    for key, path in (("before", spec["before"]), ("after", spec["after"]),
                      ("tmpfs", spec["tmpfs"])):
        n = spec[f"{key}_reads"]
        got = per_file(files, pid, path, "read")
        assert (got.ops, got.bytes) == (n, n * PAGE), key
    gone = per_file(files, pid, f"{spec['deleted']} (deleted)", "read")
    assert (gone.ops, gone.bytes) == (spec["deleted_reads"], spec["deleted_reads"] * PAGE)

    busy = files[files.ops > 0]  # the slowest op of each row's interval, at most their sum
    assert (busy.latency_max_ns > 0).all() and (busy.latency_max_ns <= busy.latency_sum_ns).all()
    rows = files[files.pid == pid].drop_duplicates("path").set_index("path")
    assert rows.loc[str(spec["before"]), "path_source"] == "kernel"
    # A 100-byte component is cut by the kernel (64-byte slots): /proc/PID/fd if still open,
    # else a lookup of the cut name as a prefix, checked by inode.
    assert rows.loc[str(spec["after"]), "path_source"] in ("proc_fd", "lookup")
    assert rows.loc[str(spec["tmpfs"]), "fs_type"] == "tmpfs"
    assert rows.loc[str(spec["before"]), "fs_type"] == "ext4"
    assert rows.loc[str(spec["before"]), "inode"] == os.stat(spec["before"]).st_ino

    # mmap of a cold file, touched page by page: every page of it is a miss of this process
    # (readahead brings several per fault, but each page enters the cache exactly once).
    mapped = per_file(files, pid, spec["mmap"], "read")
    assert mapped.pages_missed == 8 * (1 << 20) // PAGE
    assert mapped.ops == 0  # never read(): the misses are the only trace of it

    # Buffered write then fsync: all of it reaches the disk charged to the writer.
    written = per_file(files, pid, spec["write"], "write")
    assert (written.ops, written.bytes) == (64, 64 << 20)
    assert written.pages_dirtied == (64 << 20) // PAGE
    fsync = per_file(files, pid, spec["write"], "fsync")
    assert fsync.ops == 1 and fsync.latency_sum_ns > 0
    lat = pd.read_parquet(out / "latency")
    blk = lat[(lat.pid == pid) & (lat.layer == "block") & (lat.op == "write")]
    assert blk["bytes"].sum() >= 64 << 20
    assert set(blk.attribution.dropna().unique()) <= {"direct", "writeback"}
    pc = lat[(lat.pid == pid) & (lat.layer == "pagecache")]
    assert set(pc.op) == {"read"} and (pc.bucket_lo_ns == 0).all()
    assert pc["count"].sum() == files[files.pid == pid].pages_missed.sum()
    assert (pc["bytes"] == pc["count"] * PAGE).all()
    # The summary names the top files.
    assert "Top files" in stdout and str(spec["write"]) in stdout


def test_pipes_and_sockets_never_in_files(iowork, tmp_path):
    data = tmp_path / "data.bin"
    make_file(data, 64)
    warm(data)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "--", str(iowork), str(data), "--cached", "10",
                    "--write-pipe", "4", "--socket", "3")
    assert r.returncode == 0, r.stderr
    files = pd.read_parquet(out / "files")
    # Only regular files: the data file read 10 times (plus the binary's own page-ins).
    assert set(files[files.ops > 0].path) == {str(data)}
    assert set(files.path) <= {str(data), str(iowork)}
    assert files[files.op == "read"]["ops"].sum() == 10
    lat = pd.read_parquet(out / "latency")
    sys_rows = lat[lat.layer == "syscall"]
    assert sys_rows[sys_rows.target == "pipe"]["count"].sum() == 8
    assert sys_rows[sys_rows.target == "unix_socket"]["count"].sum() == 6  # a socketpair


@pytest.mark.parametrize("sizes", ["", "file_slots=2,file_log=0", "file_slots=2,file_log=2"])
def test_file_counters_drained_every_interval_count_exactly(tmp_path, sizes):
    """Per-file counters leave the kernel every interval (one buffer of them while the programs
    add to the other, slots.bpf.h), from their slot or, with the one slot per buffer taken by
    another file, from the hash map: bursts of reads in several intervals, with idle ones
    between, add up exactly."""
    data = tmp_path / "data.bin"
    make_file(data, 1)
    warm(data)
    interval_s, bursts, reads = 0.2, 3, 7
    work = (f"import os, time\nfd = os.open({str(data)!r}, os.O_RDONLY)\n"
            f"for b in range({bursts}):\n"
            f"    for i in range({reads}): os.pread(fd, {PAGE}, i * {PAGE})\n"
            f"    time.sleep({3 * interval_s})\n")
    out = tmp_path / "trace"
    r = run_iotrace("-i", str(interval_s), "-o", str(out), "--", sys.executable, "-c", work,
                    env={**os.environ, "IOTRACE_MAP_SIZES": sizes})
    assert r.returncode == 0, r.stderr
    files = pd.read_parquet(out / "files")
    rows = files[(files.path == str(data)) & (files.op == "read")]
    assert rows.ts.nunique() >= bursts  # each burst counted in the interval it came in
    assert (rows.ops.sum(), rows.bytes.sum()) == (bursts * reads, bursts * reads * PAGE)
    assert set(rows.file_count) == {1}


def test_slow_events_one_per_operation(iowork, tmp_path):
    """With a threshold of 1 ns every file operation is an event: exactly as many as counted."""
    data = tmp_path / "data.bin"
    make_file(data, 64)
    subprocess.run([str(iowork), str(data), "--direct", "40", "--cached", "25"], check=True)
    warm(data)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), *EXACT, "--slow-ms", "0.000001", "--", str(iowork), str(data),
                    "--direct", "40", "--cached", "25")
    assert r.returncode == 0, r.stderr
    ev = pd.read_parquet(out / "events")
    mine = ev[ev.path == str(data)]
    sys_ev = mine[mine.layer == "syscall"]
    assert len(sys_ev) == 65 and set(sys_ev.op) == {"read"}
    assert (sys_ev["bytes"] == PAGE).all() and (sys_ev.latency_ns > 0).all()
    assert sorted(sys_ev.offset)[:2] == [0, PAGE]  # cached preads start at the file's start
    blk = mine[mine.layer == "block"]
    assert len(blk) + unseen(out)[0] == 40 and set(blk.device) == {disk_of(data)}
    assert json.loads((out / "meta.json").read_text())["events_lost"] == 0


def test_slow_events_named_by_their_folder(tmp_path):
    """The files of a folder already known send no record of their own: a slow read of one,
    and the disk read under it, are named from the folder's listing, though the file was
    closed long before user space decodes the event (a DataLoader worker's sample, read
    once, not in the page cache)."""
    folder = tmp_path / "class0"
    folder.mkdir()
    names = [folder / f"img_{i:03d}.jpg" for i in range(40)]
    for p in names:
        p.write_bytes(os.urandom(PAGE))
    for p in names:  # on the disk, and out of the page cache: each read is a block request
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    work = ("import os, sys\n"
            "for p in sys.argv[1:]:\n"
            "    fd = os.open(p, os.O_RDONLY); os.read(fd, 4096); os.close(fd)\n")
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), *EXACT, "--slow-ms", "0.000001", "--", sys.executable, "-c",
                    work, *map(str, names))
    assert r.returncode == 0, r.stderr
    ev = pd.read_parquet(out / "events")
    ours = ev[(ev.op == "read") & (ev.path.str.startswith(str(folder))
                                   | ev.path.str.startswith("(inode"))]
    reads = ours[(ours.layer == "syscall") & (ours["bytes"] == PAGE)]
    assert sorted(reads.path) == sorted(map(str, names))
    disk = ours[ours.layer == "block"]
    assert len(disk) + unseen(out)[0] >= len(names) and set(disk.path) <= set(map(str, names))


def test_writeback_by_flusher_is_charged_to_the_dirtier(tmp_path):
    """Pages dirtied by the traced process and written by someone else (here: `sync` run by the
    test, untraced) are charged to the dirtier with attribution `writeback`."""
    target = tmp_path / "dirty.bin"
    ready_r, ready_w = os.pipe()
    code = ("import os,sys,time; fd=os.open(sys.argv[1], os.O_WRONLY|os.O_CREAT, 0o644); "
            "[os.write(fd, os.urandom(1<<20)) for _ in range(16)]; os.write(int(sys.argv[2]), b'r');"
            " time.sleep(3)")
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "-o", str(out), *EXACT, "--", sys.executable, "-c", code,
                               str(target), str(ready_w)], cwd=ROOT, pass_fds=(ready_w,),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(ready_w)
    assert tracer.stderr.readline().startswith("Tracing")
    assert os.read(ready_r, 1) == b"r"
    subprocess.run(["sync", str(target)], check=True)  # untraced: the writer is charged anyway
    time.sleep(0.2)
    _, stderr = tracer.communicate(timeout=60)
    assert tracer.returncode == 0, stderr
    lat = pd.read_parquet(out / "latency")
    procs = pd.read_parquet(out / "processes")
    writer = int(procs[procs.role == "main"].pid.iloc[0])
    wb = lat[(lat.pid == writer) & (lat.layer == "block") & (lat.attribution == "writeback")]
    assert wb["bytes"].sum() >= 16 << 20


def test_paths_as_seen_inside_a_chroot(iowork, tmp_path):
    """The dentry walk stops at the process's root: a chrooted (or containerised) job sees
    /data.bin, and so does the trace."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "iowork").write_bytes(iowork.read_bytes())
    (root / "iowork").chmod(0o755)
    make_file(root / "data.bin", 64)
    warm(root / "data.bin")
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "--", "chroot", str(root), "/iowork", "/data.bin",
                    "--cached", "7")
    assert r.returncode == 0, r.stderr
    files = pd.read_parquet(out / "files")
    reads = files[(files.op == "read") & (files.path == "/data.bin")]
    assert reads["ops"].sum() == 7 and set(reads.path_source) == {"kernel"}


def test_files_seen_only_through_page_faults_get_their_path(iowork, tmp_path):
    """An executable paged in from disk is never read(): its path comes from the inode's
    dentry, joined to the mount point of its file system."""
    binary = tmp_path / "cold-iowork"
    binary.write_bytes(iowork.read_bytes())
    binary.chmod(0o755)
    fd = os.open(binary, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    data = tmp_path / "data.bin"
    make_file(data, 64)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "--", str(binary), str(data), "--cached", "1")
    assert r.returncode == 0, r.stderr
    files = pd.read_parquet(out / "files")
    mine = files[files.path == str(binary)]
    assert mine.pages_missed.sum() > 0 and set(mine.path_source) == {"inode"}
    assert mine.ops.sum() == 0


def test_redact_paths_everywhere(iowork, tmp_path):
    """--redact-paths: no path component survives in the trace or the summary; the trace
    directory is private (0700)."""
    data = tmp_path / "secret-dataset.bin"
    make_file(data, 64)
    warm(data)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "--redact-paths", "--", str(iowork), str(data),
                    "--cached", "5")
    assert r.returncode == 0, r.stderr
    assert oct(out.stat().st_mode & 0o777) == "0o700"
    files = pd.read_parquet(out / "files")
    reads = files[files.op == "read"]
    assert reads["ops"].sum() == 5
    for path in files.path:
        assert all(len(c) == 10 and int(c, 16) >= 0 for c in path.strip("/").split("/")), path
    secret = "secret-dataset"
    procs = pd.read_parquet(out / "processes")
    assert not procs.cmdline.str.contains(secret).any()
    assert secret not in r.stdout + r.stderr
    assert secret not in (out / "meta.json").read_text()


def test_report_recomputes_gpu_idle_offline(tmp_path):
    """A real trace of a CPU job plus an NVML stream recorded elsewhere (constructed here):
    `iotrace report` finds the idle span, gives its cause from the loop's state, writes
    DIR/gpu_idle, and puts the GPU sentence into the findings and the spans into --json."""
    from tracer.sinks.parquet import write_segment
    from tracer.tracedir.schema import table_from_rows

    out = tmp_path / "trace"
    busy = "import time\nt = time.time()\nwhile time.time() - t < 4: sum(range(10000))\n"
    r = run_iotrace("-o", str(out), "-i", "0.5", "--", sys.executable, "-c", busy)
    assert r.returncode == 0, r.stderr
    loop = pd.read_parquet(out / "loop")
    t0 = int(loop.ts.min().value) - int(loop.interval_ns.iloc[0])
    t1 = int(loop.ts.max().value)
    period = 100_000_000  # a sample every 100 ms: busy, then idle for 1 s in the middle
    ts = range(t0 + period, t1, period)
    mid = (t0 + t1) // 2
    rows = [{"ts": t, "gpu": 0, "uuid": "GPU-x", "name": "H200", "sample_period_ns": period,
             "util_pct": 0.0 if mid - 500_000_000 < t <= mid + 500_000_000 else 97.0}
            for t in ts]
    write_segment(out / "gpu", table_from_rows("gpu", rows))
    js = run_iotrace("report", str(out), "--json")
    assert js.returncode == 0, js.stderr
    spans = json.loads(js.stdout)["gpu_idle"]
    assert len(spans) == 1 and spans[0]["gpu"] == 0
    assert abs(spans[0]["duration_ns"] - 1_000_000_000) <= 2 * period
    assert spans[0]["cause"] == "compute"  # the loop was busy on the CPU meanwhile
    assert len(pd.read_parquet(out / "gpu_idle")) == 1
    assert spans[0]["pid"] == int(loop.pid.iloc[0]) and type(spans[0]["start"]) is int
    text = run_iotrace("report", str(out)).stdout
    assert "GPU 0 idle" in text
    # the first screen: idle time by cause, of the time the samples cover
    head = text.splitlines()[:30]
    idle_s = spans[0]["duration_ns"] / 1e9
    sampled_s = len(rows) * period / 1e9
    assert (f"  GPU 0: idle {idle_s:.1f} s of {sampled_s:.1f} s sampled "
            f"({100 * idle_s / sampled_s:.0f} %): compute {idle_s:.1f} s") in head, head


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_live_view_of_a_real_trace_in_tmux(tmp_path):
    """iotrace itself on a terminal (tmux): the live view shows its panes and a finding while
    the job runs, `q` stops it, and the summary lands in the normal scrollback."""
    sock = f"iotrace-{os.getpid()}"
    out = tmp_path / "trace"
    job = ("import time\nfor i in range(40):\n    open('/etc/services', 'rb').read()\n"
           "    time.sleep(0.2)\n")
    (tmp_path / "job.py").write_text(job)
    # (pytest exports COLUMNS/LINES, which rich would take over the terminal's real size)
    cmd = (f"cd {ROOT} && env -u COLUMNS -u LINES {' '.join(IOTRACE)} -o {out} -i 0.5 -- "
           f"{sys.executable} "
           f"{tmp_path / 'job.py'}; sleep 30")

    def tmux(*args):
        return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True,
                              check=True, timeout=10).stdout

    tmux("-f", "/dev/null", "new-session", "-d", "-s", "live", "-x", "150", "-y", "50", cmd)
    tmux("set-option", "-t", "live", "window-size", "manual")  # detached: keep 150x50
    tmux("resize-window", "-t", "live", "-x", "150", "-y", "50")
    try:
        # The job's file can rank below the interpreter's own start-up reads in the first
        # interval (cold, on a fresh clone): wait for an interval that has both.
        screen, deadline = "", time.monotonic() + 20
        while time.monotonic() < deadline and not (
                "devices (iostat -x)" in screen and "/etc/services" in screen):
            time.sleep(0.3)
            screen = tmux("capture-pane", "-p", "-t", "live")
        assert "devices (iostat -x)" in screen, screen
        for pane in ("finding", "READ", "system (dstat)", "top files", "/etc/services"):
            assert pane in screen, (pane, screen)
        tmux("send-keys", "-t", "live", "q")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "Trace written to" not in screen:
            time.sleep(0.3)
            screen = tmux("capture-pane", "-p", "-t", "live", "-S", "-")
        assert "Trace written to" in screen and "Findings" in screen, screen
        assert (out / "meta.json").exists()
        assert json.loads((out / "meta.json").read_text())["stop_reason"] == "q"
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, check=False)


@pytest.mark.parametrize("hooks", ["raw", "classic"])
def test_every_traced_syscall_is_counted_by_its_number(tmp_path, tracefs, hooks):
    """The raw sys_enter/sys_exit programs know syscalls by number (bpf/syscalls.bpf.h): each
    of the vectored and positional variants, and fsync/fdatasync/openat, counted exactly on
    its file, with its bytes. The same on the classic tracepoints, one of each per syscall."""
    data = tmp_path / "v.bin"
    data.write_bytes(os.urandom(64 * PAGE))
    warm(data)
    code = ("import os,sys\n"
            "fd = os.open(sys.argv[1], os.O_RDWR); b = bytearray(4096); p = bytes(4096)\n"
            "for i in range(3): os.readv(fd, [b])\n"              # readv
            "for i in range(5): os.preadv(fd, [b], 0)\n"          # preadv
            "for i in range(7): os.preadv(fd, [b], 0, os.RWF_HIPRI)\n"  # preadv2
            "for i in range(2): os.writev(fd, [p])\n"             # writev
            "for i in range(4): os.pwritev(fd, [p], 8192)\n"      # pwritev
            "for i in range(6): os.pwritev(fd, [p], 8192, os.RWF_DSYNC)\n"  # pwritev2
            "for i in range(3): os.fsync(fd)\n"
            "for i in range(2): os.fdatasync(fd)\n"
            "for i in range(4): os.close(os.open(sys.argv[1], os.O_RDONLY))\n")
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "--", sys.executable, "-c", code, str(data),
                    env={**os.environ, "IOTRACE_FORCE": f"{hooks}_syscalls"})
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "meta.json").read_text())["syscall_hooks"] == hooks
    files = pd.read_parquet(out / "files")
    pid = pd.read_parquet(out / "processes").query("role == 'main'").pid.iloc[0]
    got = {op: per_file(files, pid, data, op) for op in ("read", "write", "fsync", "open")}
    assert (got["read"].ops, got["read"].bytes) == (3 + 5 + 7, (3 + 5 + 7) * PAGE)
    assert (got["write"].ops, got["write"].bytes) == (2 + 4 + 6, (2 + 4 + 6) * PAGE)
    assert got["fsync"].ops == 3 + 2
    assert got["open"].ops == 1 + 4  # the first open, then four more


# Writes A, deletes it, creates files until one gets A's inode number (ext4 hands a freed
# number out again at once), writes that one, B; says what it did in a JSON file. Another
# process on the file system may take the number first: then A is written again, under a new
# name (each round's A is a checkpoint of its own).
REUSE_WORK = """
import json, os, sys
d, a_mib, b_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
chunk = os.urandom(1 << 20)  # once: the loop's time goes to the writes
def write(path, mib):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(mib):  # a checkpoint that syncs as it goes
        os.write(fd, chunk)
        os.fsync(fd)
    os.close(fd)
rounds, n = [], 24
for r in range(10):
    a = os.path.join(d, f"ckpt-{8 + r:07d}.pt")
    rounds.append(a)
    write(a, a_mib)
    ino = os.stat(a).st_ino
    os.unlink(a)
    for _ in range(64):
        b = os.path.join(d, f"ckpt-{n:07d}.pt")
        n += 1
        os.close(os.open(b, os.O_WRONLY | os.O_CREAT, 0o644))
        if os.stat(b).st_ino == ino:
            break
        os.unlink(b)
    else:
        continue
    break
else:
    sys.exit("no inode number was reused")
write(b, b_mib)
with open(sys.argv[4], "w") as f:
    json.dump({"a": a, "b": b, "ino": ino, "rounds": rounds}, f)
"""


def test_reused_inode_number_gets_its_own_path(tmp_path):
    """A checkpoint written, deleted, and another one created under the freed inode number:
    every row and event of the new file carries its own path, not the old one's, with exact
    counts for both, and the checkpoint finding names both files (ext4 gives the new inode
    another i_generation, which is part of a file's identity)."""
    d = tmp_path / "ckpts"
    d.mkdir()
    a_mib, b_mib = 8, 12  # both checkpoint-sized (diagnose: checkpoint_file_bytes)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), *EXACT, "--slow-ms", "0.000001", "--", sys.executable,
                    "-S", "-c", REUSE_WORK, str(d), str(a_mib), str(b_mib), str(tmp_path / "did.json"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "did.json").exists(), r.stdout + r.stderr
    did = json.loads((tmp_path / "did.json").read_text())
    assert did["ino"] == os.stat(did["b"]).st_ino
    assert json.loads((out / "meta.json").read_text())["events_lost"] == 0
    files = pd.read_parquet(out / "files")
    procs = pd.read_parquet(out / "processes")
    pid = int(procs[procs.role == "main"].pid.iloc[0])
    mine = files[(files.pid == pid) & (files.inode == did["ino"])]
    for path, mib in ((did["a"], a_mib), (did["b"], b_mib)):
        w = per_file(files, pid, path, "write")
        assert (w.ops, w.bytes) == (mib, mib << 20), path
        assert w.pages_dirtied == (mib << 20) // PAGE, path
        assert per_file(files, pid, path, "fsync").ops == mib, path
        assert per_file(files, pid, path, "open").ops == 1 + (path == did["b"]), path
    # Written only as A and B (a probe for B that had this number first is a third file, opened)
    assert set(mine[mine.op != "open"].path) == {did["a"], did["b"]}

    # Slow events (every op, at 1 ns): the syscalls of each file name that file.
    ev = pd.read_parquet(out / "events")
    sys_ev = ev[(ev.pid == pid) & (ev.layer == "syscall")]
    for path, mib in ((did["a"], a_mib), (did["b"], b_mib)):
        got = sys_ev[sys_ev.path == path]
        assert sorted(got.op) == ["fsync"] * mib + ["write"] * mib, path
        assert got[got.op == "write"]["bytes"].sum() == mib << 20, path
    # Block requests of A's fsync end before B exists: none of B's is named A, or the reverse.
    blk = ev[(ev.layer == "block") & ev.path.isin([did["a"], did["b"]])]
    b_start = sys_ev[sys_ev.path == did["b"]].ts.min()
    assert (blk[blk.path == did["a"]].ts < b_start).all()
    assert len(blk[blk.path == did["b"]]) > 0

    # The diagnosis keys checkpoints by path: two checkpoints, each under its own name, and so
    # the finding when the writes are a large enough share of the loop's time to make one.
    from tracer.core.diagnosis import Diagnosis, IntervalInput

    diag = Diagnosis()
    for ts, rows in files.groupby("ts"):
        diag.add(IntervalInput(ts_ns=int(ts.value), interval_ns=0,
                               files=rows.to_dict("records"), owners={pid: pid}))
    assert diag.written_total[(pid, did["a"])] == a_mib << 20
    assert diag.written_total[(pid, did["b"])] == b_mib << 20
    ckpt = pd.read_parquet(out / "findings").query("kind == 'checkpoint_stall'")
    if len(ckpt):
        assert json.loads(ckpt.evidence.iloc[0])["files"] == sorted([*did["rounds"], did["b"]])
