"""Datasets of sample files for the workloads, their page-cache state, and disk throttling.

- `make_dataset(dir, n_files, file_kib)`: `n_files` files of random bytes, fsynced; existing files
  of the right size are kept (so a dataset is made once and reused).
- `make_cold(paths)`: fsync, then posix_fadvise(DONTNEED): the next read of each file goes to disk.
  Pages that some process has mapped are not dropped.
- `warm(paths)`: read every file (page-cache hits afterwards). This machine's reclaim evicts file
  pages idle for ~6 s (a DAMON pageout scheme that skips mapped pages), so warm right before use,
  or keep the pages mapped with `hold(paths)` for as long as they must stay warm.
- `throttle(pid, path_on_device, read_bps)`: put `pid` (and the children it forks later, such as
  DataLoader workers) into a cgroup that limits its reads from the disk holding `path_on_device`:
  cgroup v1 blkio (`blkio.throttle.read_bps_device`) or, where v1 blkio is absent, cgroup v2
  `io.max`. Page-cache reads of cold files go to the disk and are throttled; O_DIRECT is not needed.
  Throttled bios wait in the cgroup before they become requests, so the disk itself is not busy:
  the reader waits (state D) while %util stays low. `unthrottle(name)` removes the cgroup.
- `loop_disk(image, mountpoint, size_mib)`: an ext4 file system in an image file, on a loop device
  with direct I/O, mounted. Throttle the reader on the disk that holds the *image*: the loop
  device's requests then wait for the throttled backing reads (the loop worker issues them on
  behalf of the reader's cgroup), so the loop device is a slow, saturated disk (%util ~100 %,
  aqu-sz > 1, await of 100+ ms) like an HDD or a network volume.
- `limit_memory(pid, limit_bytes, name)`: put `pid` (and the children it forks later) into a memory
  cgroup (v1 `memory.limit_in_bytes`, or v2 `memory.max`) whose page cache, with everything else
  it charges from then on, may not exceed `limit_bytes`: a data set larger than that is read from
  disk again on every pass. Memory charged before the move stays where it was (neither v1 by
  default nor v2 moves charges), so the interpreter's imports do not count. `unthrottle(name)`
  removes it too.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

CGROUP_PREFIX = "iotrace-"
_CHUNK = 1 << 20


def sample_name(i: int) -> str:
    return f"sample-{i:06d}.bin"


def make_dataset(directory: str | os.PathLike[str], n_files: int, file_kib: int) -> list[Path]:
    """`n_files` files of `file_kib` KiB of random bytes in `directory`, each fsynced.

    Files that already exist with the right size are kept as they are.
    """
    if n_files < 1 or file_kib < 1:
        raise ValueError(f"n_files and file_kib must be >= 1, got {n_files} and {file_kib}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    size = file_kib * 1024
    paths = []
    for i in range(n_files):
        p = d / sample_name(i)
        paths.append(p)
        with contextlib.suppress(FileNotFoundError):
            if p.stat().st_size == size:
                continue
        tmp = p.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            left = size
            while left:
                n = min(left, _CHUNK)
                os.write(fd, os.urandom(n))
                left -= n
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return paths


def make_cold(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Drop the files' pages from the page cache (fsync first: dirty pages cannot be dropped)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(paths: Iterable[str | os.PathLike[str]]) -> int:
    """Read every file once so that it is in the page cache; returns the bytes read."""
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(_CHUNK):
                total += len(chunk)
    return total


class Hold:
    """Files kept mapped (and so resident: reclaim here pages out only unmapped file pages),
    whole, or their first `nbytes`."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]], nbytes: int | None = None) -> None:
        self._maps: list[mmap.mmap] = []
        for p in paths:
            with open(p, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if nbytes is not None:
                    size = min(size, nbytes)
                if size == 0:
                    continue
                m = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
            if hasattr(m, "madvise") and hasattr(mmap, "MADV_WILLNEED"):
                m.madvise(mmap.MADV_WILLNEED)
            for off in range(0, len(m), mmap.PAGESIZE):  # fault every page in: mapped, not just cached
                m[off]
            self._maps.append(m)

    def close(self) -> None:
        for m in self._maps:
            m.close()
        self._maps = []

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hold(paths: Iterable[str | os.PathLike[str]], nbytes: int | None = None) -> Hold:
    """Warm the files (their first `nbytes`: all by default) and keep them mapped until
    `.close()`: they stay warm however long a run is."""
    return Hold(paths, nbytes)


# ---------------------------------------------------------------------------------------------
# Throttling


def disk_of(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(major, minor) of the whole disk that holds `path` (a partition's parent disk); None when the
    file system has no block device (tmpfs, overlayfs, btrfs subvolumes, nfs, fuse)."""
    dev = os.stat(path).st_dev
    sysdir = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not sysdir.exists():
        return None
    real = sysdir.resolve()
    if (real / "partition").exists():
        real = real.parent
    try:
        major, minor = (real / "dev").read_text().strip().split(":")
    except (OSError, ValueError):
        return None
    return int(major), int(minor)


def _mounts() -> list[tuple[str, str, list[str]]]:
    out = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 4:
                    out.append((parts[1], parts[2], parts[3].split(",")))
    except OSError:
        pass
    return out


def _v1_root(controller: str, probe: str) -> Path | None:
    """Mount point of the cgroup v1 hierarchy of `controller`, which has the file `probe`."""
    for mnt, fstype, opts in _mounts():
        if fstype == "cgroup" and controller in opts:
            root = Path(mnt)
            if (root / probe).exists():
                return root
    return None


def blkio_v1_root() -> Path | None:
    """Mount point of the cgroup v1 hierarchy with the blkio controller and throttling files."""
    return _v1_root("blkio", "blkio.throttle.read_bps_device")


def io_v2_root(controller: str = "io") -> Path | None:
    """Mount point of the cgroup v2 hierarchy if `controller` is available there."""
    for mnt, fstype, _ in _mounts():
        if fstype == "cgroup2":
            root = Path(mnt)
            try:
                if controller in (root / "cgroup.controllers").read_text().split():
                    return root
            except OSError:
                continue
    return None


def memory_v1_root() -> Path | None:
    """Mount point of the cgroup v1 hierarchy with the memory controller."""
    return _v1_root("memory", "memory.limit_in_bytes")


def _mb(bps: int) -> str:
    return f"{bps / 1e6:.1f} MB/s"


def throttle(
    pid: int | None,
    path_on_device: str | os.PathLike[str],
    read_bps: int | None,
    *,
    read_iops: int | None = None,
    write_bps: int | None = None,
    write_iops: int | None = None,
    name: str | None = None,
) -> str | None:
    """Limit the disk I/O of `pid` and of the children it forks from now on.

    Creates the cgroup `iotrace-<name>` (name defaults to the pid) at the root of the blkio (v1)
    hierarchy, or of the v2 hierarchy with `io.max` where v1 blkio is absent, sets the limits for
    the whole disk that holds `path_on_device`, and moves `pid` into it. A limit of None or 0 is no
    limit. `pid` None makes the cgroup only (a process then moves itself in by writing its pid to
    `cgroup.procs` of `throttle_cgroup(name)`: no I/O of its own before it is limited). Returns
    what was done, in words, or None (no exception) when it cannot be done: no blkio/io
    controller, not root, a file system without a block device.
    """
    disk = disk_of(path_on_device)
    if disk is None:
        return None
    dev = f"{disk[0]}:{disk[1]}"
    name = name or str(pid)
    moved = f"; pid {pid} moved in" if pid is not None else ""
    limits = {"rbps": read_bps, "riops": read_iops, "wbps": write_bps, "wiops": write_iops}
    limits = {k: int(v) for k, v in limits.items() if v}
    words = {
        "rbps": lambda v: f"read {_mb(v)}",
        "riops": lambda v: f"read {v} IO/s",
        "wbps": lambda v: f"write {_mb(v)}",
        "wiops": lambda v: f"write {v} IO/s",
    }
    what = ", ".join(words[k](v) for k, v in limits.items()) or "no limit"

    v1 = blkio_v1_root()
    if v1 is not None:
        cg = v1 / f"{CGROUP_PREFIX}{name}"
        files = {
            "rbps": "blkio.throttle.read_bps_device",
            "riops": "blkio.throttle.read_iops_device",
            "wbps": "blkio.throttle.write_bps_device",
            "wiops": "blkio.throttle.write_iops_device",
        }
        try:
            cg.mkdir(exist_ok=True)
            for key, fname in files.items():  # 0 clears a limit left by an earlier use of the name
                (cg / fname).write_text(f"{dev} {limits.get(key, 0)}\n")
            if pid is not None:
                (cg / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            _remove(cg)
            return None
        return f"blkio (cgroup v1) {cg}: disk {dev} {what}{moved}"

    v2 = io_v2_root()
    if v2 is not None:
        cg = v2 / f"{CGROUP_PREFIX}{name}"
        line = " ".join(f"{k}={limits.get(k, 'max')}" for k in ("rbps", "wbps", "riops", "wiops"))
        try:
            ctl = v2 / "cgroup.subtree_control"
            if "io" not in ctl.read_text().split():
                ctl.write_text("+io\n")
            cg.mkdir(exist_ok=True)
            (cg / "io.max").write_text(f"{dev} {line}\n")
            if pid is not None:
                (cg / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            _remove(cg)
            return None
        return f"io.max (cgroup v2) {cg}: disk {dev} {what}{moved}"
    return None


def limit_memory(pid: int, limit_bytes: int, name: str | None = None) -> str | None:
    """Limit the memory (page cache included) that `pid` and the children it forks from now on
    may charge, in the cgroup `iotrace-<name>` (v1 memory hierarchy, else v2 `memory.max`, the
    cgroup `throttle` uses there). Returns what was done, in words, or None when it cannot be
    done (no memory controller, not root)."""
    name = name or str(pid)
    v1 = memory_v1_root()
    if v1 is not None:
        cg = v1 / f"{CGROUP_PREFIX}{name}"
        try:
            cg.mkdir(exist_ok=True)
            (cg / "memory.limit_in_bytes").write_text(f"{limit_bytes}\n")
            (cg / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            _remove(cg)
            return None
        return f"memory (cgroup v1) {cg}: limit {limit_bytes >> 20} MiB; pid {pid} moved in"
    v2 = io_v2_root("memory")
    if v2 is not None:
        cg = v2 / f"{CGROUP_PREFIX}{name}"
        try:
            ctl = v2 / "cgroup.subtree_control"
            if "memory" not in ctl.read_text().split():
                ctl.write_text("+memory\n")
            cg.mkdir(exist_ok=True)
            (cg / "memory.max").write_text(f"{limit_bytes}\n")
            (cg / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            _remove(cg)
            return None
        return f"memory.max (cgroup v2) {cg}: limit {limit_bytes >> 20} MiB; pid {pid} moved in"
    return None


def _remove(cg: Path, timeout: float = 2.0) -> bool:
    """Move what is left in cgroup `cg` to its parent and remove it; False if it stays."""
    if not cg.exists():
        return True
    deadline = time.monotonic() + timeout
    while True:
        try:
            pids = (cg / "cgroup.procs").read_text().split()
        except OSError:
            pids = []
        for p in pids:
            with contextlib.suppress(OSError):  # it may have exited meanwhile
                (cg.parent / "cgroup.procs").write_text(f"{p}\n")
        try:
            cg.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno not in (errno.EBUSY, errno.ENOTEMPTY) or time.monotonic() > deadline:
                return False
        time.sleep(0.05)  # exiting tasks leave the cgroup a little after they are reaped


def throttle_cgroup(name: str | int) -> Path | None:
    """The directory of the cgroup `iotrace-<name>` made by `throttle`, None when there is none."""
    for root in (blkio_v1_root(), io_v2_root()):
        if root is not None and (root / f"{CGROUP_PREFIX}{name}").is_dir():
            return root / f"{CGROUP_PREFIX}{name}"
    return None


def unthrottle(name: str | int) -> bool:
    """Remove the cgroup `iotrace-<name>` made by `throttle` (processes still in it move back to
    the root); True when no such cgroup remains. Never raises for a missing cgroup or controller."""
    ok = True
    for root in (blkio_v1_root(), memory_v1_root(), io_v2_root(), io_v2_root("memory")):
        if root is not None:
            ok = _remove(root / f"{CGROUP_PREFIX}{name}") and ok
    return ok


def throttled_names() -> list[str]:
    """Names of the iotrace-* throttling cgroups that exist now (for cleanup of crashed runs)."""
    names: set[str] = set()
    for root in (blkio_v1_root(), memory_v1_root(), io_v2_root(), io_v2_root("memory")):
        if root is not None:
            names.update(p.name[len(CGROUP_PREFIX) :] for p in root.glob(f"{CGROUP_PREFIX}*") if p.is_dir())
    return sorted(names)


def total_bytes(paths: Sequence[str | os.PathLike[str]]) -> int:
    return sum(os.stat(p).st_size for p in paths)


# ---------------------------------------------------------------------------------------------
# A slow disk: a loop device over an image file whose reads are throttled


def _mounted_source(mountpoint: Path) -> str | None:
    target = str(mountpoint.resolve())
    for line in (_read_text("/proc/self/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] == target:
            return parts[0]
    return None


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _run(*argv: str) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise RuntimeError(f"{argv[0]} is not installed") from e
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {r.stderr.strip() or r.returncode}")
    return r.stdout.strip()


class LoopDisk:
    """A mounted ext4 loop device; `close()` unmounts and detaches it (the image file stays)."""

    def __init__(self, image: Path, mountpoint: Path, device: str) -> None:
        self.image = image
        self.mountpoint = mountpoint
        self.device = device  # /dev/loopN
        self.name = Path(device).name

    def close(self) -> None:
        if _mounted_source(self.mountpoint) == self.device:
            _run("umount", str(self.mountpoint))
        with contextlib.suppress(RuntimeError):
            _run("losetup", "-d", self.device)

    def __enter__(self) -> LoopDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def loop_disk(image: str | os.PathLike[str], mountpoint: str | os.PathLike[str], size_mib: int) -> LoopDisk:
    """Mount an ext4 file system kept in `image` (made with `size_mib` MiB if missing) through a loop
    device with direct I/O at `mountpoint`; reuses the mount if it is already there. Needs root,
    losetup and mkfs.ext4; raises RuntimeError saying what is missing otherwise."""
    image, mountpoint = Path(image), Path(mountpoint)
    mountpoint.mkdir(parents=True, exist_ok=True)
    src = _mounted_source(mountpoint)
    if src is not None:
        if not src.startswith("/dev/loop"):
            raise RuntimeError(f"{mountpoint} is already a mount of {src}, not of a loop device")
        return LoopDisk(image, mountpoint, src)
    if os.geteuid() != 0:
        raise RuntimeError("a loop device needs root")
    if not image.exists():
        image.parent.mkdir(parents=True, exist_ok=True)
        with open(image, "wb") as f:
            f.truncate(size_mib << 20)
        # no lazy init: ext4lazyinit would otherwise write to the device while a scenario runs
        _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image))
    device = _run("losetup", "--find", "--show", "--direct-io=on", str(image))
    try:
        _run("mount", "-t", "ext4", "-o", "noatime", device, str(mountpoint))
    except RuntimeError:
        with contextlib.suppress(RuntimeError):
            _run("losetup", "-d", device)
        raise
    return LoopDisk(image, mountpoint, device)


def disk_name(path: str | os.PathLike[str]) -> str | None:
    """Kernel name (vda, loop0, nvme0n1) of the whole disk that holds `path`, as in /proc/diskstats."""
    disk = disk_of(path)
    if disk is None:
        return None
    return Path(f"/sys/dev/block/{disk[0]}:{disk[1]}").resolve().name
