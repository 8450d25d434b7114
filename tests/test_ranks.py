"""The pure pieces of distributed jobs: a rank's numbers from its environment, the roles of
torchrun's agent and its ranks, each process's loop, and a GPU's idle spans given to the rank
that uses it (the path NVML's process list takes; no GPU here, so the samples are made up)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tracer.core.roles import cuda_device, is_agent_cmdline, rank_env, role_of
from tracer.core.vocab import AGENT, CHILD, DATALOADER_WORKER, MAIN, RANK
from tracer.gpu.idle import IdleSpan, attribute, gpu_of, gpu_owners
from tracer.live.clock import Clock
from tracer.live.processes import Process, ProcessTable, environ
from tracer.report import clock_line

S = 1_000_000_000


def test_rank_env_from_proc_environ():
    env = b"PATH=/usr/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0MASTER_PORT=29500\0"
    assert rank_env(env) == (3, 1, 8)
    assert rank_env(b"RANK=0\0WORLD_SIZE=2\0") == (0, None, 2)  # LOCAL_RANK is optional
    assert rank_env(b"RANK=0\0") is None  # no WORLD_SIZE: not a distributed job's rank
    assert rank_env(b"RANK=x\0WORLD_SIZE=2\0") is None
    assert rank_env(b"MY_RANK=1\0WORLD_SIZE_X=2\0") is None  # whole names only
    assert rank_env(b"") is None


def test_roles():
    assert role_of(True, "pt_elastic") == AGENT  # named so by torchrun
    assert role_of(True, "python", agent=True) == AGENT  # before it renames itself
    assert role_of(False, "python", rank=True) == RANK
    assert role_of(True, "python", rank=True) == RANK  # --pid of one rank
    assert role_of(False, "pt_data_worker", rank=True) == DATALOADER_WORKER
    assert role_of(True, "python") == MAIN and role_of(False, "python") == CHILD
    assert is_agent_cmdline(["/venv/bin/torchrun", "--nproc_per_node=2", "train.py"])
    assert is_agent_cmdline(["python", "-m", "torch.distributed.run", "train.py"])
    assert not is_agent_cmdline(["python", "train.py", "--note", "torchrun"])


def job() -> ProcessTable:
    """torchrun (100) with ranks 0 (101) and 1 (102), two workers each, and a child of rank 1
    that inherited its environment (a saver, 130)."""
    t = ProcessTable(Clock())
    t.add(Process(100, 1, "pt_elastic", True, "torchrun train.py", 0))
    for rank, pid in ((0, 101), (1, 102)):
        t.add(Process(pid, 100, "python", False, "python train.py", 0,
                      rank_env=(rank, rank, 2), is_rank=True))
        for i in range(2):
            w = 110 + 10 * rank + i
            t.add(Process(w, pid, "pt_data_worker", False, "python train.py", 0,
                          rank_env=(rank, rank, 2)))
    t.add(Process(130, 102, "python", False, "python train.py", 0, rank_env=(1, 1, 2)))
    return t


def test_each_process_belongs_to_its_rank():
    t = job()
    assert {pid: p.role for pid, p in t.by_pid.items()} == {
        100: AGENT, 101: RANK, 102: RANK, 110: DATALOADER_WORKER, 111: DATALOADER_WORKER,
        120: DATALOADER_WORKER, 121: DATALOADER_WORKER, 130: CHILD}
    assert t.owners() == {100: 100, 101: 101, 102: 102, 110: 101, 111: 101, 120: 102,
                          121: 102, 130: 102}
    row = t.by_pid[120].row()
    assert (row["rank"], row["local_rank"], row["world_size"]) == (1, 1, 2)
    assert t.by_pid[100].row()["rank"] is None


def test_a_gpus_idle_spans_go_to_the_rank_using_it():
    """NVML lists a GPU's processes (here rank 0 on GPU 0 through one of its workers, rank 1
    on GPU 1): each GPU's idle span is explained by its own rank's loop."""
    owners = job().owners()
    gpus = gpu_owners({0: [999, 110], 1: [102]}, owners)  # 999: not traced
    assert gpus == {0: 101, 1: 102}
    loop = [{"ts": 2 * S, "pid": 101, "interval_ns": 2 * S, "collective_wait_ns": 2 * S},
            {"ts": 2 * S, "pid": 102, "interval_ns": 2 * S, "data_wait_io_ns": 2 * S}]
    spans = [IdleSpan(0, S // 2, S + S // 2, 5), IdleSpan(1, S // 2, S + S // 2, 5)]
    rows = {r["gpu"]: r for r in attribute(spans, loop, gpus)}
    assert (rows[0]["pid"], rows[0]["cause"], rows[0]["coverage"]) == (101, "collective_wait", 1.0)
    assert (rows[1]["pid"], rows[1]["cause"], rows[1]["coverage"]) == (102, "data_wait_io", 1.0)


def test_the_gpu_a_process_environment_gives_it():
    assert cuda_device(b"CUDA_VISIBLE_DEVICES=3,2\0LOCAL_RANK=1\0") == "2"
    assert cuda_device(b"LOCAL_RANK=1\0") == "1"  # no variable: CUDA's own numbering
    assert cuda_device(b"CUDA_VISIBLE_DEVICES=5\0LOCAL_RANK=1\0") == "5"  # its launcher's one
    assert cuda_device(b"CUDA_VISIBLE_DEVICES=GPU-8f7e, GPU-11aa\0LOCAL_RANK=1\0") == "GPU-11aa"
    assert cuda_device(b"CUDA_VISIBLE_DEVICES=0,1\0") is None  # no rank: any of them
    assert cuda_device(b"CUDA_VISIBLE_DEVICES=0,1\0LOCAL_RANK=2\0") is None  # not visible
    # CUDA reads the list up to -1: two GPUs visible here, one there
    assert cuda_device(b"CUDA_VISIBLE_DEVICES=0,1,-1,2\0LOCAL_RANK=2\0") is None
    assert cuda_device(b"CUDA_VISIBLE_DEVICES=4,-1,2\0LOCAL_RANK=1\0") == "4"
    assert cuda_device(b"CUDA_VISIBLE_DEVICES=\0LOCAL_RANK=0\0") is None  # no GPU at all
    assert cuda_device(b"") is None
    assert cuda_device(b"MY_CUDA_VISIBLE_DEVICES=4\0") is None  # whole names only


def test_a_rank_gpu_read_from_its_environment_in_proc():
    """A real process's /proc/PID/environ, as the table reads it at attach (and after an exec)."""
    child_env = {**os.environ, "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2",
                 "CUDA_VISIBLE_DEVICES": "6,7"}
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, env=child_env)
    try:
        # until it has exec'd: before, its environ is still this process's
        until = time.monotonic() + 10
        while b"RANK=1" not in environ(child.pid) and time.monotonic() < until:
            time.sleep(0.01)
        proc = ProcessTable(Clock()).add_existing(child.pid, is_target=True)
        assert (proc.rank_env, proc.cuda_device, proc.role) == ((1, 1, 2), "7", RANK)
        assert proc.row()["cuda_device"] == "7"
    finally:
        child.communicate(b"")


def test_a_gpu_nvml_names_no_traced_process_on_goes_to_the_rank_given_it():
    """In a container NVML may list no PIDs iotrace knows: each GPU then goes to the rank whose
    environment gives it (CUDA_VISIBLE_DEVICES=1,0: rank 0 on GPU 1, rank 1 on GPU 0)."""
    owners = job().owners()
    devices = [(0, "GPU-0a0a-1111"), (1, "GPU-1b1b-2222")]
    named = {101: "1", 102: "0"}
    assert gpu_owners({0: [], 1: [999]}, owners, named, devices) == {0: 102, 1: 101}
    # what NVML says comes first: rank 0 through its worker on GPU 0; rank 1 is then not put
    # on GPU 0 by its environment, and rank 0 gets no second GPU from its own
    assert gpu_owners({0: [110], 1: []}, owners, named, devices) == {0: 101}
    assert gpu_owners({}, owners, {101: "GPU-1b1b", 102: "GPU-0a"}, devices) == {1: 101, 0: 102}
    assert gpu_owners({}, owners, {101: "2", 102: "MIG-0a0a"}, devices) == {}  # no such GPU
    assert gpu_of("GPU-", devices) is None  # a prefix of both: CUDA refuses it too


def test_the_clock_line_of_traces_joined_from_several_hosts():
    def meta(synchronised, max_error_ms):
        return {"clocks": {"utc_sync": {"synchronised": synchronised,
                                        "max_error_ns": max_error_ms * 1_000_000,
                                        "estimated_error_ns": 1_000_000}}}
    synced = [("a", "d0", meta(True, 3)), ("b", "d1", meta(True, 5)), ("c", "d2", meta(True, 2))]
    assert clock_line(synced) == ("  Clocks: synchronised on every host, each within 5 ms of "
                                  "UTC (the kernels' bound), so within 8 ms of each other.")
    line = clock_line([*synced[:2], ("c", "d2", meta(False, 16_000)), ("d", "d3", {})])
    assert line.startswith("  Clocks: the kernel of c (d2), d (d3) did not say its clock was "
                           "synchronised"), line  # a trace from before utc_sync: not known
