"""The loop's CUDA states on hand-made intervals: the time in driver calls (the `threads` row's
CUDA columns) split into gpu_wait and device_copy, the rest of on-CPU time `compute`; a save's
span keeps its copies; host_bound where the loop works on the host and the GPU idles, and not
where it waits for data or for its GPU; not_io_bound says how long it waited for the GPU."""

from __future__ import annotations

from diagnosis_rows import MAIN, MS, S, add_interval, kinds, run, thread
from test_rules import CPU_BOUND, judge

from tracer.core.diagnosis import Diagnosis, Finding
from tracer.core.diagnosis.rules import host_bound, not_io_bound
from tracer.core.stacks import GPU_WAIT, HOST, Frame, frame_rows
from tracer.gpu.idle import confirm_host_bound


def cuda(row: dict, wait=0, copy=0, syncs=0, copies=0, launches=None) -> dict:
    """`row` with CUDA columns: its time in synchronisations and copies, in ms."""
    return {**row, "gpu_wait_ns": wait * MS, "device_copy_ns": copy * MS, "cuda_syncs": syncs,
            "cuda_copies": copies, "cuda_launches": launches}


def loop(oncpu, sleep=0, **kw) -> dict:
    return cuda(thread(MAIN, MAIN, "main", oncpu=oncpu * MS, sleep=sleep * MS,
                       by_other=sleep * MS), **kw)


def split_of(*threads) -> dict[str, int]:
    d = run([(list(threads), [])])
    (iv,) = d.intervals
    return iv.loops[MAIN].ns


def test_waits_and_copies_asleep_or_spinning():
    # asleep 600 ms in syncs, 200 ms in copies; 200 ms of Python on CPU
    ns = split_of(loop(200, 800, wait=600, copy=200, syncs=10, copies=2))
    assert (ns["gpu_wait"], ns["device_copy"], ns["compute"], ns["other"]) == (
        600 * MS, 200 * MS, 200 * MS, 0)
    # a spinning wait is on CPU: taken from it, the rest is the host's
    ns = split_of(loop(1000, wait=700, syncs=5))
    assert (ns["gpu_wait"], ns["compute"], ns["other"]) == (700 * MS, 300 * MS, 0)


def test_without_libcuda_compute_is_as_before():
    plain = thread(MAIN, MAIN, "main", oncpu=900 * MS, sleep=100 * MS, by_other=100 * MS)
    ns = split_of(plain)
    assert (ns["gpu_wait"], ns["device_copy"], ns["compute"], ns["other"]) == (
        0, 0, 900 * MS, 100 * MS)


def test_a_saves_copies_are_checkpoint_time():
    # the loop in a save's span 500 ms (a checkpoint file), 300 ms of it copying off the GPU
    row = {**loop(400, 600, wait=100, copy=300, syncs=2, copies=30),
           "write_open_path": "/ckpt/a.pt", "write_open_ns": 500 * MS}
    d = run([([row], [{"pid": MAIN, "role": "main", "op": "write", "ops": 10,
                       "bytes": 64 << 20, "latency_sum_ns": 50 * MS, "latency_max_ns": 10 * MS,
                       "pages_missed": 0, "path": "/ckpt/a.pt", "fs_type": "ext4"}])])
    ns = next(iter(d.intervals)).loops[MAIN].ns
    assert ns["checkpoint"] == 500 * MS
    # the span's 500 ms holds the 300 ms of copies and 100 ms of waits: none of them is left
    assert (ns["device_copy"], ns["gpu_wait"]) == (0, 0)


def _host_bound_window(n=5, launches=None):
    return run([([loop(900, 100, wait=50, syncs=100, copies=1, launches=launches)], [])] * n)


def test_host_bound_present():
    (f,) = judge(host_bound, _host_bound_window())
    assert f.kind == "host_bound" and f.severity == 90
    assert f.evidence["host_pct"] == 90.0 and f.evidence["launches_per_s"] is None
    assert f.evidence["syncs_per_s"] == 100.0
    assert "worked on the host 90 %" in f.summary and "kernels a second" not in f.summary
    (f,) = judge(host_bound, _host_bound_window(launches=20_000))
    assert f.evidence["launches_per_s"] == 20_000.0
    assert "launching 20,000 kernels a second" in f.summary
    assert "CUDA graphs" in f.advice and ".item()" in f.advice


def test_host_bound_absent():
    # waiting for its GPU: GPU-bound
    gpu_bound = run([([loop(300, 700, wait=650, syncs=20)], [])] * 5)
    assert judge(host_bound, gpu_bound) == []
    # waiting for data (workers busy on CPU): dataloader_cpu_bound, not host_bound
    starved = run([([cuda(CPU_BOUND[0][0], syncs=10), *CPU_BOUND[0][1:]], CPU_BOUND[1])] * 5)
    assert judge(host_bound, starved) == []
    assert "dataloader_cpu_bound" in kinds(starved.findings())
    # a loop on CPU without libcuda (no CUDA columns): nothing says it drives a GPU
    cpu_only = run([([thread(MAIN, MAIN, "main", oncpu=950 * MS, sleep=50 * MS)], [])] * 5)
    assert judge(host_bound, cpu_only) == []


def test_host_bound_names_the_host_line():
    """The loop's samples taken while it worked on the host name the line (else none)."""
    d = Diagnosis()
    work = [Frame("/app/train.py", 88, "train"), Frame("/app/train.py", 120, "main")]
    waits = [Frame("/app/train.py", 91, "train"), Frame("/app/train.py", 120, "main")]
    for i in range(1, 6):
        rows = frame_rows(i * S, i * S, MAIN, MAIN, "main", HOST, work, "out = model(x)")
        if i == 1:  # one sample at a sync: fewer than the host's, and not taken for it
            rows += frame_rows(i * S, i * S, MAIN, MAIN, "main", GPU_WAIT, waits, "loss.item()")
        add_interval(d, i * S, S, [loop(900, 100, wait=50, syncs=100, copies=1)], [],
                     stacks=rows)
    (f,) = judge(host_bound, d)
    assert f.evidence["code"] == {"file": "/app/train.py", "line": 88, "function": "train",
                                  "text": "out = model(x)"}
    assert f.summary.endswith(" The loop works on the host at train.py:88 in train "
                              "(`out = model(x)`).")
    (f,) = judge(host_bound, _host_bound_window())
    assert f.evidence["code"] is None and " at train.py" not in f.summary


def _gpu(idle_pct: float, pid=MAIN) -> dict:
    return {"gpus": [{"gpu": 0, "pid": pid, "idle_pct": idle_pct}]}


def test_host_bound_needs_the_gpu_idle():
    def found() -> list[Finding]:
        return [Finding("host_bound", 90, MAIN, "", {}), Finding("not_io_bound", 5, MAIN, "", {})]

    for ev, kept in ((_gpu(63.0), True), (_gpu(5.0), False), (None, False)):
        f = found()
        confirm_host_bound(f, ev)
        assert kinds(f) == (["host_bound", "not_io_bound"] if kept else ["not_io_bound"])


def test_not_io_bound_says_the_gpu_wait():
    (f,) = judge(not_io_bound, run([([loop(300, 700, wait=650, syncs=20)], [])] * 5))
    assert f.summary.startswith("I/O is not what holds the job back: the training loop waited "
                                "for its GPU 65 % of the time, copied between host and device "
                                "0 %, worked on the host 30 %")
    # without GPU waits, the sentence of before
    (f,) = judge(not_io_bound, run([([loop(950, 50)], [])] * 5))
    assert "the training loop computed 95 % of the time" in f.summary
