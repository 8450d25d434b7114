"""The workload `iotrace demo` traces: real disk I/O of known shape, in a few seconds.

Writes a 32 MiB file and fsyncs it, drops it from the page cache, then reads it back three
ways: O_DIRECT 4 KiB random reads (block I/O of the process itself), a cold buffered
sequential read (readahead), and the same read again warm (page-cache hits, no block I/O). A
forked child does O_DIRECT reads too, and the two talk over a pipe (never counted as file I/O).
"""

from __future__ import annotations

import mmap
import os
import random
import sys
import tempfile

FILE_MIB = 32
DIRECT_READS = 400
CHILD_DIRECT_READS = 200
PAGE = 4096


def _direct_reads(path: str, n: int, seed: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, PAGE)  # page aligned, as O_DIRECT needs
    rng = random.Random(seed)
    pages = FILE_MIB * (1 << 20) // PAGE
    try:
        for _ in range(n):
            os.preadv(fd, [buf], rng.randrange(pages) * PAGE)
    finally:
        os.close(fd)


def main(directory: str | None = None) -> None:
    directory = directory or os.getcwd()
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".iotrace-demo-", delete=True) as f:
        chunk = os.urandom(1 << 20)
        for _ in range(FILE_MIB):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        _direct_reads(f.name, DIRECT_READS, seed=1)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _direct_reads(f.name, CHILD_DIRECT_READS, seed=2)
            os.write(w, b"done")
            os._exit(0)
        os.close(w)
        os.read(r, 4)
        os.close(r)
        os.waitpid(pid, 0)
        for _ in range(2):  # cold (readahead from disk), then warm (page cache)
            with open(f.name, "rb", buffering=0) as g:
                while g.read(1 << 20):
                    pass


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
