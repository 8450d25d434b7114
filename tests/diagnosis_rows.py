"""Hand-made interval rows (the same dicts the trace stores) for the diagnosis's tests, and the
one way those tests feed them in (an `IntervalInput` per interval)."""

from __future__ import annotations

from tracer.core.diagnosis import Diagnosis, IntervalInput

MS = 1_000_000
S = 1_000_000_000
MAIN, WORKER = 100, 200
OWNER = {MAIN: MAIN, WORKER: MAIN, WORKER + 1: MAIN}


def thread(pid, tid, role, oncpu=0, runnable=0, sleep=0, iowait=0, by_worker=0, by_pin=0,
           by_other=0):
    return {"pid": pid, "tid": tid, "role": role, "oncpu_ns": oncpu, "runnable_ns": runnable,
            "sleep_ns": sleep, "iowait_ns": iowait, "woken_by_worker_ns": by_worker,
            "woken_by_pin_ns": by_pin, "woken_by_own_ns": 0, "woken_by_other_ns": by_other}


def file_row(pid, role, op, nbytes, latency, path="/data/train/a.bin", missed=0, fs="ext4"):
    return {"pid": pid, "role": role, "op": op, "ops": 1, "bytes": nbytes,
            "latency_sum_ns": latency, "latency_max_ns": latency, "pages_missed": missed,
            "path": path, "fs_type": fs}


def socket_reads(pid, role, count, lo_ns, nbytes):
    """Syscall-layer socket reads of one log2 slot, [lo_ns, 2 lo_ns)."""
    return {"pid": pid, "role": role, "layer": "syscall", "op": "read", "target": "socket",
            "bucket_lo_ns": lo_ns, "bucket_hi_ns": 2 * lo_ns, "count": count, "bytes": nbytes}


def disk_use(who, nbytes, requests, comm=None, cgroup="/jobs", device="vda"):
    return {"device": device, "op": "read", "who": who, "cgroup": cgroup, "container_id": None,
            "pod_uid": None, "comm": comm, "requests": requests, "bytes": nbytes,
            "service_ns": requests * MS}


def cpu_wait(pid, who, taker, wait_ns, comm=None, cgroup="/"):
    """A `cpu_waits` row: `pid`'s threads waited `wait_ns` while `taker` had the CPU."""
    return {"pid": pid, "who": who, "taker_pid": taker, "comm": comm, "cgroup": cgroup,
            "container_id": None, "pod_uid": None, "waits": 10, "wait_ns": wait_ns}


def add_interval(d: Diagnosis, ts_ns, interval_ns, threads, files, latency=(), devices=(),
                 owner=None, memory=(), device_users=(), ranks=None, peers=None,
                 cpu_waits=(), stacks=()) -> list:
    """One interval's rows into `d`; its `loop` rows."""
    return d.add(IntervalInput(
        ts_ns=ts_ns, interval_ns=interval_ns, threads=list(threads), files=list(files),
        latency=list(latency), devices=list(devices), memory=list(memory),
        device_users=list(device_users), owners=OWNER if owner is None else owner,
        ranks=ranks or {}, peers=peers or {}, cpu_waits=list(cpu_waits), stacks=list(stacks)))


def run(intervals, **kw) -> Diagnosis:
    """A diagnosis fed (threads, files) per 1 s interval."""
    d = Diagnosis(**kw)
    for i, (threads, files) in enumerate(intervals, start=1):
        add_interval(d, i * S, S, threads, files)
    return d


def kinds(findings) -> list[str]:
    return [f.kind for f in findings]
