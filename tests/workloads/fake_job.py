"""A stand-in training job for --auto tests: it forks "DataLoader workers" that name themselves
pt_data_worker exactly as PyTorch's do (prctl PR_SET_NAME), and each reads a file.

    python fake_job.py FILE NWORKERS READS SECONDS
"""

import ctypes
import os
import sys
import time

PR_SET_NAME = 15


def main() -> None:
    path, nworkers, reads, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    time.sleep(0.5)  # a job starts, then builds its DataLoader
    libc = ctypes.CDLL(None, use_errno=True)
    kids = []
    for _ in range(nworkers):
        pid = os.fork()
        if pid == 0:
            libc.prctl(PR_SET_NAME, b"pt_data_worker", 0, 0, 0)
            time.sleep(1.0)  # the tracer adds the job when the worker names itself
            fd = os.open(path, os.O_RDONLY)
            for i in range(reads):
                os.pread(fd, 4096, i * 4096)
            os.close(fd)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)
    time.sleep(seconds)


if __name__ == "__main__":
    main()
