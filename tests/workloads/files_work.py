"""A workload for the files tests: known reads of known files, an mmap of a cold file, a
buffered write with fsync, a deleted file, a file on a tmpfs. Run as
`python files_work.py SPEC.json`; it waits for SIGUSR1 (after writing "r" to the ready fd)
so that a file opened before attach can be checked.

SPEC: {"ready_fd": int, "before": path, "before_reads": n, "after": path, "after_reads": n,
       "mmap": path, "write": path, "write_mib": n, "deleted": path, "deleted_reads": n,
       "tmpfs": path, "tmpfs_reads": n}
Every read is a 4096-byte pread at a distinct offset.
"""

import json
import mmap
import os
import signal
import sys

PAGE = 4096


def preads(fd: int, n: int) -> None:
    for i in range(n):
        assert len(os.pread(fd, PAGE, i * PAGE)) == PAGE


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    before = os.open(spec["before"], os.O_RDONLY)  # opened before iotrace attaches
    deleted = os.open(spec["deleted"], os.O_RDONLY)
    os.unlink(spec["deleted"])
    os.write(spec["ready_fd"], b"r")
    os.close(spec["ready_fd"])
    signal.sigwait({signal.SIGUSR1})

    preads(before, spec["before_reads"])
    preads(deleted, spec["deleted_reads"])
    for key in ("after", "tmpfs"):
        fd = os.open(spec[key], os.O_RDONLY)
        preads(fd, spec[f"{key}_reads"])
        os.close(fd)

    fd = os.open(spec["mmap"], os.O_RDONLY)
    size = os.fstat(fd).st_size
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # cold: every page must come from disk
    with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
        total = 0
        for off in range(0, size, PAGE):
            total += m[off]  # one touch per page
    os.close(fd)

    chunk = os.urandom(1 << 20)
    fd = os.open(spec["write"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(spec["write_mib"]):
        os.write(fd, chunk)
    os.fsync(fd)
    os.close(fd)


if __name__ == "__main__":
    main()
