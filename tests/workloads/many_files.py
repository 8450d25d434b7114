"""A workload for a tracer that falls behind: opens and reads every file of a directory once,
in name order, after SIGUSR1 (once "r" is on the ready fd); writes "d" when done and exits on
a second SIGUSR1. Run as `python many_files.py DIR READY_FD`."""

import os
import signal
import sys


def main() -> None:
    folder, ready = sys.argv[1], int(sys.argv[2])
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    names = sorted(os.listdir(folder))
    os.write(ready, b"r")
    signal.sigwait({signal.SIGUSR1})
    for name in names:
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        os.read(fd, 4096)
        os.close(fd)
    os.write(ready, b"d")
    signal.sigwait({signal.SIGUSR1})


if __name__ == "__main__":
    main()
