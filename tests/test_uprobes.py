"""Finding the CUDA driver library in a process's maps, and decoding its per-thread counters
(tracer/kernel/uprobes.py, tracer/core/abi.py): no privileges, no kernel."""

import pytest

from tracer.core import abi
from tracer.kernel.uprobes import LIBRARY_NAME, Mapping, library_mappings

MAPS = """\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234 /usr/bin/python3.11
7f0000000000-7f0000100000 r--p 00000000 00:00 0
7f1000000000-7f1000200000 r--p 00000000 08:02 42 /usr/lib/x86_64-linux-gnu/libcuda.so.580.82.07
7f1000200000-7f1000900000 r-xp 00200000 08:02 42 /usr/lib/x86_64-linux-gnu/libcuda.so.580.82.07
7f2000000000-7f2000001000 r-xp 00000000 00:2f 7 /opt/fake/libcuda.so.1 (deleted)
7f3000000000-7f3000001000 r-xp 00000000 08:02 43 /usr/lib/libcudart.so.12
7f4000000000-7f4000001000 r-xp 00000000 08:02 44 /usr/lib/libcuda.so
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
"""


def test_library_mappings_one_per_file():
    assert library_mappings(MAPS) == [
        Mapping(8 << 20 | 2, 42, "/usr/lib/x86_64-linux-gnu/libcuda.so.580.82.07",
                "7f1000000000-7f1000200000"),
        Mapping(0x2f, 7, "/opt/fake/libcuda.so.1", "7f2000000000-7f2000001000"),
        Mapping(8 << 20 | 2, 44, "/usr/lib/libcuda.so", "7f4000000000-7f4000001000"),
    ]


def test_library_name():
    assert LIBRARY_NAME.search("libcuda.so.1") and LIBRARY_NAME.search("libcuda.so.580.82.07")
    assert not LIBRARY_NAME.search("libcudart.so.12") and not LIBRARY_NAME.search("libcuda.so.1.bak")


def test_decode_cuda_thread_adds_the_call_in_flight():
    n = len(abi.CUDA_CALLS)
    calls, ns, nbytes = list(range(n)), [1000 * i for i in range(n)], [10 * i for i in range(n)]
    dtoh = abi.CUDA_CALL["dtoh"]
    raw = abi.CUDA_THREAD.pack(7, dtoh, 5_000, 4096, 0, *calls, *ns, *nbytes)
    t = abi.decode_cuda_thread(9, raw, now_ns=8_000)
    assert (t.pid, t.tid, t.in_flight, t.in_flight_since_ns) == (7, 9, "dtoh", 5_000)
    assert t.calls["dtoh"] == dtoh and t.bytes["dtoh"] == 10 * dtoh  # the return adds those
    assert t.ns["dtoh"] == 1000 * dtoh + 3_000 and t.ns["htod"] == 1000 * abi.CUDA_CALL["htod"]
    idle = abi.decode_cuda_thread(9, abi.CUDA_THREAD.pack(7, dtoh, 0, 0, 0, *calls, *ns, *nbytes), 8_000)
    assert idle.in_flight is None and idle.ns["dtoh"] == 1000 * dtoh


CODE_SIZES = """
import mmap, os, sys
sys.path.insert(0, sys.argv[1])
from tracer.kernel.uprobes import _code_size
before = _code_size(os.getpid())
m = mmap.mmap(-1, 64 << 20)
m.write(b"x" * (64 << 20))  # memory allocated and used: no new code
allocated = _code_size(os.getpid())
import _decimal  # a C extension: its library's code mapped, as a dlopen of the driver maps it
print(before, allocated, _code_size(os.getpid()), getattr(_decimal, "__file__", ""))
"""


def test_a_process_is_read_again_when_it_maps_new_code_not_new_memory():
    """The scan reads a process's maps again only when its code size has changed: memory it
    allocates leaves it as it is, a library it loads changes it."""
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", CODE_SIZES, str(Path(__file__).parent.parent)],
                         capture_output=True, text=True, check=True).stdout.split()
    before, allocated, loaded = map(int, out[:3])
    if len(out) < 4:
        pytest.skip("_decimal is built into this Python: no library to load")
    assert before > 0 and allocated == before and loaded > before
