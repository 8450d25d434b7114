"""A loop that drives the stand-in CUDA driver (tests/workloads/fake_libcuda.c) from Python as
a training loop drives its GPU, for the stacks test (which reads the lines below from this file):

- `gpu_wait`: each step waits 50 ms in cuStreamSynchronize (a GPU-bound loop's `.item()`);
- `host`: each step works in Python for tens of ms, then synchronises for 1 ms (a loop that
  keeps its GPU waiting on the host).

    python cuda_loop.py LIBCUDA gpu_wait|host SECONDS

It prints `looping` once its first step is done.
"""

import ctypes
import sys
import time


def host_work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def main() -> None:
    cuda = ctypes.CDLL(sys.argv[1])
    mode, seconds = sys.argv[2], float(sys.argv[3])
    cuda.fakeCudaSetWait(ctypes.c_long(50_000_000 if mode == "gpu_wait" else 1_000_000), 0)
    end, first = time.monotonic() + seconds, True
    while time.monotonic() < end:
        if mode == "host":
            host_work(400_000)
        cuda.cuStreamSynchronize(None)
        if first:
            print("looping", flush=True)
            first = False


if __name__ == "__main__":
    main()
