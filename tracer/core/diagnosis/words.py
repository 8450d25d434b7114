"""What the findings say: each kind's advice, and its sentence built from the numbers its rule
found (rules/ compute, this module words). The summary's rendering of findings and of the
context lines is `tracer.render.findings`."""

from __future__ import annotations

from tracer.core.cgroup import short_name
from tracer.core.histogram import format_bytes, format_ns
from tracer.core.stacks import CodeLine

# What the summary says instead of findings (Thresholds.judge_min_ns)
NOTHING_JUDGED = ("nothing traced long enough to judge: less than 1 s of a training loop "
                  "after its start-up")

ADVICE = {
    "sync_loading": "Load batches in parallel: DataLoader(num_workers=4 or more, pin_memory=True, "
                    "prefetch_factor=2-4, persistent_workers=True); keep the training loop free "
                    "of file reads.",
    "dataloader_io_bound": "The workers wait on storage: put the dataset on local SSD or tmpfs "
                           "(or in the page cache), use fewer, larger files (shards), raise "
                           "num_workers and prefetch_factor to keep more reads in flight.",
    "host_bound": "The GPU waits for the host: launch fewer, larger kernels (CUDA graphs, "
                  "torch.compile with mode=\"reduce-overhead\"), use larger batches so each "
                  "launch does more work, and sync with the host less often (no .item(), "
                  ".cpu() or print of a GPU tensor every step).",
    "dataloader_cpu_bound": "The workers are busy decoding/augmenting: raise num_workers up to "
                            "the free cores, move augmentation to the GPU, or pre-process the "
                            "dataset once; storage is not the problem.",
    "checkpoint_stall": "Checkpoint off the critical path: save asynchronously (a background "
                        "thread/process, torch.distributed.checkpoint async_save), save less "
                        "often or only what changed (e.g. LoRA weights), use safetensors, write "
                        "to local SSD and copy out later.",
    "dataloader_network_bound": "The workers wait on the network: raise num_workers or the "
                                "requests in flight per worker (threads, async I/O), fetch "
                                "larger objects (shards of many samples), cache the data set on "
                                "local disk, prefetch ahead of the loop (prefetch_factor).",
    "sync_writes": "The loop waits on its own small writes: buffer log lines and fsync far less "
                   "often (or not at all), write logs to local disk or tmpfs, or log from a "
                   "background thread.",
    "straggler_rank": "One rank holds every collective back: fix what slows it (its own finding "
                      "says what: its data, its storage, its CPU), give it the same data "
                      "placement and share of the node as the others, or balance the shards; "
                      "the waiting ranks are not the problem.",
    "not_io_bound": "I/O is not what limits this job: look at compute (the PyTorch profiler) "
                    "rather than storage.",
    "cold_cache": "The first pass read from disk and later passes from the page cache: judge "
                  "throughput in the steady state, and warm or cache the dataset (more RAM, "
                  "local SSD, tmpfs) if the first epoch matters.",
    "small_files": "Many small files: pack samples into shards (WebDataset/tar, Arrow, "
                   "TFRecord-like) so each read moves megabytes, and cache them on tmpfs.",
    "device_saturated": "The disk is saturated (busy near 100 %, requests queue far longer than "
                        "they take): spread the data over more/faster devices or cut the read "
                        "volume (smaller or compressed samples, caching).",
    "dataset_exceeds_cache": "The data set does not fit in the page cache the job may use, so "
                             "every pass reads it from disk again: give the job more memory "
                             "(a higher memory cgroup limit or a larger node), make the data "
                             "set smaller (compressed or lower-resolution samples), cache it on "
                             "a local NVMe disk, or read it as sequential shards once per epoch "
                             "(WebDataset/tar, Arrow) so that storage streams at full speed.",
    "cpu_contended": "Other processes take the CPUs the job needs: give the job CPUs of its own "
    "(a cpuset: taskset -c, the cgroup's cpuset.cpus, Kubernetes' static CPU manager with "
    "integer CPU requests), cap the others (their cgroup's cpu.max) or lower their priority "
    "(nice/renice), or run fewer DataLoader workers so the job's threads fit the CPUs left to it.",
    "memory_pressure": "The job reclaims memory before it can go on: raise its memory limit (the "
    "cgroup's memory.limit_in_bytes or memory.max, the pod's memory limit), or need less of it: "
    "fewer DataLoader workers or a smaller prefetch_factor (each worker holds its batches and "
    "its own copy of what it touches), pin_memory=False, smaller samples in flight, and less "
    "page cache filled by the job itself (writes to local disk, files read once: "
    "posix_fadvise DONTNEED, O_DIRECT).",
    "device_contended": "Other processes take most of the disk the job reads from: move the "
                        "data set to a disk of its own (or local SSD, tmpfs), give the job its "
                        "own I/O limit or a higher weight than the neighbours (blkio/io.max, "
                        "io.weight), or schedule the noisy jobs elsewhere.",
    "slow_filesystem": "The dataset sits on a slow file system (overlay/network/FUSE): copy it "
                       "to a local disk or tmpfs, or use a bind mount instead of a volume.",
}


def at_code(what: str, code: CodeLine | None) -> str:
    """The sentence a finding appends to name the user's line (Python stacks), or nothing:
    ` The DataLoader workers read at train.py:105 in FileDataset.__getitem__ (`buf = f.read()`).`"""
    if code is None:
        return ""
    text = f" (`{code.text}`)" if code.text else ""
    return f" {what} at {code.where()}{text}."


def _where(top: tuple[str, str] | None) -> str:
    return f" on {top[0]} ({top[1]})" if top else ""


def fuse_via(fuse: dict | None) -> str:
    """Where data read through a FUSE mount came from (`tracer.core.diagnosis.fuse.served_by`):
    the mount, the process serving it and what that process did while the job read."""
    if fuse is None:
        return ""
    text = (f": the data comes through FUSE mount {fuse['mount_point']} ({fuse['fs_type']}, source "
            f"{fuse['source']})")
    if fuse["daemon_pid"] is None:
        return text + ", whose serving process was not found"
    text += f" served by pid {fuse['daemon_pid']} ({fuse['daemon_comm']})"
    if fuse["daemon_cpu_pct"] is None:
        return text
    did = [f"used {fuse['daemon_cpu_pct']:.0f} % of a CPU"]
    if fuse["daemon_peers"]:
        more = " ..." if len(fuse["daemon_peers"]) > 3 else ""
        rtt = (f", round trip {format_ns(int(fuse['daemon_rtt_us'] * 1000))}"
               if fuse["daemon_rtt_us"] is not None else "")
        got = (f" ({format_bytes(fuse['daemon_net_rx_bytes_s'])}/s received{rtt})"
               if fuse["daemon_net_rx_bytes_s"] is not None else "")
        did.append(f"fetched from {', '.join(fuse['daemon_peers'][:3])}{more}{got}")
    did.append(f"read {format_bytes(fuse['daemon_disk_read_bytes_s'])}/s from storage")
    return f"{text}, which {', '.join(did[:-1])} and {did[-1]} meanwhile"


def sync_loading(pct: float, total_ns: int, workers: bool, p99_ns: int,
                 top: tuple[str, str] | None, fuse: dict | None = None) -> str:
    return (f"The training loop read files itself {pct:.0f} % of {format_ns(total_ns)} "
            f"({'with' if workers else 'without'} DataLoader workers); p99 read latency "
            f"{format_ns(p99_ns)}{_where(top)}{fuse_via(fuse)}.")


def dataloader_io_bound(wait_pct: float, total_ns: int, blocked_pct: float, p99_ns: int,
                        top: tuple[str, str] | None, fuse: dict | None = None) -> str:
    return (f"The training loop waited for batches {wait_pct:.0f} % of {format_ns(total_ns)}; "
            f"the DataLoader workers were blocked on I/O {blocked_pct:.0f} % of their busy "
            f"time; p99 read latency {format_ns(p99_ns)}{_where(top)}{fuse_via(fuse)}.")


def dataloader_cpu_bound(wait_pct: float, total_ns: int, oncpu_pct: float) -> str:
    return (f"The training loop waited for batches {wait_pct:.0f} % of {format_ns(total_ns)} "
            f"while the DataLoader workers were on CPU {oncpu_pct:.0f} % of their busy time "
            "(decoding/augmenting), not on I/O.")


def host_bound(host_pct: float, gpu_wait_pct: float, total_ns: int, launches: float | None,
               syncs: float) -> str:
    """`launches`: kernel launches per second; None: not counted."""
    rate = f", launching {launches:,.0f} kernels a second" if launches is not None else ""
    return (f"The training loop worked on the host {host_pct:.0f} % of {format_ns(total_ns)} "
            f"(Python, kernel launches, CPU ops){rate} and waited for its GPU "
            f"{gpu_wait_pct:.0f} % ({syncs:,.0f} synchronisations a second): the GPU waits for "
            "the host, not for data, a save or itself.")


def dataloader_network_bound(pct: float, total_ns: int, workers_pct: float | None,
                             rate: float, peers: list[str], p50_ns: int, p99_ns: int) -> str:
    """`workers_pct`: the workers' share of their busy time in socket reads; None: the loop
    read the sockets itself."""
    who = (f"the DataLoader workers spent {workers_pct:.0f} % of their busy time in socket "
           "reads" if workers_pct is not None
           else "the loop read the sockets itself (no DataLoader workers)")
    where = f" from {', '.join(peers[:3])}" + (" ..." if len(peers) > 3 else "") if peers else ""
    return (f"The training loop waited for data from the network {pct:.0f} % of "
            f"{format_ns(total_ns)}: {who}; {format_bytes(rate)}/s received{where}, socket "
            f"reads p50 {format_ns(p50_ns)}, p99 {format_ns(p99_ns)}.")


def sync_writes(pct: float, total_ns: int, top: str | None, writes_s: float, fsyncs_s: float,
                fsync_mean_ns: int) -> str:
    what = (f" mostly to {top} ({writes_s:.1f} writes/s, {fsyncs_s:.1f} fsyncs/s, "
            f"{format_ns(fsync_mean_ns)} per fsync)") if top else ""
    return (f"The training loop spent {pct:.0f} % of {format_ns(total_ns)} writing and "
            f"fsyncing files that are not checkpoints{what}.")


def checkpoint_stall(pct: float, total_ns: int, nbytes: int, rate: float,
                     first: str | None) -> str:
    return (f"The training loop spent {pct:.0f} % of {format_ns(total_ns)} writing "
            f"checkpoints: {format_bytes(nbytes)} at {format_bytes(rate)}/s"
            + (f" to {first}" if first else "") + ".")


def checkpoint_saves(pct: float, total_ns: int, span_ns: int, write_ns: int, nbytes: int,
                     rate: float, first: str | None) -> str:
    return (f"The training loop spent {pct:.0f} % of {format_ns(total_ns)} saving checkpoints: "
            f"{format_ns(span_ns)} from opening each checkpoint file for writing to closing it, "
            f"of which {format_ns(write_ns)} writing and fsyncing {format_bytes(nbytes)}"
            + (f" at {format_bytes(rate)}/s" if write_ns else "")
            + (f" to {first}" if first else "")
            + "; the rest is the save's own work (pickling, copying tensors off the device).")


def checkpoint_background(child: bool, pct: float, total_ns: int, waited_ns: int,
                          blocked_ns: int, nbytes: int, own_ns: int, timers_ns: int) -> str:
    saver = "a child process" if child else "another thread"
    if own_ns >= timers_ns:
        how = ("its sleeps were ended by its own threads: it waited on the saver (a join, "
               "a lock, the GIL handed back)")
    elif child:
        how = ("its sleeps were ended by other processes: it waited for the saver (waitpid, "
               "a pipe or a queue it holds up)")
    else:
        how = ("its sleeps were ended by timers: timed waits, such as for the GIL held by "
               "the saver while it writes")
    return (f"A checkpoint saved in the background ({saver}) still held the training loop "
            f"{pct:.0f} % of {format_ns(total_ns)}: the loop slept {format_ns(waited_ns)} "
            f"while the saver was blocked writing ({format_ns(blocked_ns)}, "
            f"{format_bytes(nbytes)}); {how}.")


def cold_cache(cold: int, early_pct: float, late: int, late_pct: float) -> str:
    return (f"The first {cold} interval(s) reading the data set read {early_pct:.0f} % of its "
            f"bytes from disk, the last {late} only {late_pct:.0f} %: the first pass was cold; "
            "judge the steady state.")


def cache_room(limit: int | None, cgroup: str | None, cache: int | None,
               available: int | None) -> str:
    """The memory a data set did not fit in: the cgroup's limit, else the host's."""
    kept = f", of which it kept {format_bytes(cache)} as page cache" if cache is not None else ""
    if limit is not None:
        return f"the {format_bytes(limit)} that the job's memory cgroup {cgroup} allows{kept}"
    if available is not None:
        return (f"the memory left to the job ({format_bytes(available)} available on the "
                "host" + (f"; its cgroup kept {format_bytes(cache)} of page cache)"
                          if cache is not None else ")"))
    return "the page cache"


def dataset_exceeds_cache(top: str, first: int, room: str, pct: float, again: int) -> str:
    return (f"The data set under {top} ({format_bytes(first)} read in a first pass) does not "
            f"fit in {room}: {pct:.0f} % of the {format_bytes(again)} read again missed the "
            "page cache again.")


def small_files(files: int, median: int) -> str:
    return (f"{files} files were read, half of them for under {format_bytes(median)} each; "
            "per-file overhead dominates.")


def slow_filesystem(pct: float, file_systems: list[str]) -> str:
    return (f"{pct:.0f} % of the bytes read came from {', '.join(file_systems)}, which add "
            "latency on top of the device.")


def disk_user(comm: str, cgroup: str, container_id: str | None, pod_uid: str | None) -> str:
    return comm + (f" in {short_name(cgroup, container_id, pod_uid)}" if cgroup else "")


def device_contended(dev: str, pct: float, names: str, rates: tuple[float, float] | None,
                     others: int, job: int) -> str:
    """`rates`: the others' and the job's bytes/s; None: the bytes alone (one interval)."""
    how = (f"{format_bytes(rates[0])}/s against the job's {format_bytes(rates[1])}/s"
           if rates else f"{format_bytes(others)} against the job's {format_bytes(job)}")
    return (f"Other processes did {pct:.0f} % of {dev}'s reads (bytes) while the job waited "
            f"on it ({names}; {how}).")


def cpu_taker(comm: str, pids: list[int], cgroup: str, container_id: str | None,
              pod_uid: str | None, pct: float) -> str:
    """A group of processes of one name (and cgroup) that had the job's CPUs: `pct` of its
    wait."""
    shown = [p for p in pids if p][:4]
    who = f"{len(pids)} x {comm}" if len(pids) > 1 else comm
    ids = (f" (pid{'s' if len(shown) > 1 else ''} {', '.join(map(str, shown))}"
           f"{', ...' if len(pids) > len(shown) else ''})") if shown else ""
    where = f" in {short_name(cgroup, container_id, pod_uid)}" if cgroup not in ("", "/") else ""
    return f"{who}{ids}{where} {pct:.0f} %"


def cpu_contended(loop_pct: float | None, workers_pct: float | None, others_pct: float,
                  ns: int, names: str) -> str:
    """The loop's and the workers' time runnable without a CPU, in percent of their time (None:
    none seen); `others_pct`: the share of the job's wait behind a known task that processes
    outside it had the CPU, `ns` long; `names`: who, each with their share of that wait."""
    parts = []
    if loop_pct is not None:
        parts.append(f"the training loop {loop_pct:.0f} % of its time")
    if workers_pct is not None:
        parts.append(f"its DataLoader workers {workers_pct:.0f} % of theirs")
    return (f"The job waited for a CPU ({' and '.join(parts)}); other processes ran "
            f"{others_pct:.0f} % of the time it waited behind a task ({format_ns(ns)}): "
            f"{names}.")


def memory_pressure(loop_pct: float | None, workers_pct: float | None, ns: int, reclaims: int,
                    fault_ns: int, fault_sleeps: int, mem: dict | None) -> str:
    """The loop's share of its time and the workers' of their busy time in memory reclaim and
    in page faults while memory was short (None: none of it); `ns` in reclaim over `reclaims`
    reclaims, `fault_ns` in faults over `fault_sleeps` waits (0: not counted); `mem`: the memory
    row's numbers (the largest usage seen, its limit, the limit hits, PSI) or None."""
    parts = []  # (a share that rounds to 0 % is left out of the sentence, not the evidence)
    if workers_pct is not None and workers_pct >= 0.5:
        parts.append(f"the DataLoader workers {workers_pct:.0f} % of their busy time")
    if loop_pct is not None and loop_pct >= 0.5:
        parts.append(f"the training loop {loop_pct:.0f} % of its time")
    who = " and ".join(parts) or "its other threads"
    did = ["reclaimed memory"] if ns else []
    times = [f"{format_ns(ns)} in {reclaims:,} reclaims"] if ns else []
    if fault_ns:
        did.append("waited in page faults for pages read back")
        times.append(f"{format_ns(fault_ns)} in {fault_sleeps:,} waits in page faults")
    out = (f"The job {' and '.join(did)} before it could go on ({who}; "
           f"{', '.join(times)})")
    if not mem:
        return out + "."
    if mem.get("limit_bytes"):
        out += (f": its memory cgroup {mem['cgroup']} used {format_bytes(mem['usage_bytes'])} "
                f"of its {format_bytes(mem['limit_bytes'])} limit")
        if mem.get("limit_hits"):
            out += f" and met it {mem['limit_hits']:,} times"
    elif mem.get("cgroup"):
        out += (f": its memory cgroup {mem['cgroup']} has no limit, the host ran short "
                f"({format_bytes(mem['available_bytes'])} available)")
    else:
        out += f": the host ran short ({format_bytes(mem['available_bytes'])} available)"
    if mem.get("psi_memory_some_pct") is not None:
        whose = "its cgroup's" if mem.get("psi_source") == "cgroup_v2" else "the host's"
        out += (f"; memory pressure ({whose} PSI) {mem['psi_memory_some_pct']:.0f} % of the "
                f"time")
    return out + "."


def device_saturated(dev: str, busy_pct: float, queue_ns: int, service_ns: int,
                     others_pct: float | None) -> str:
    who = f"; other processes did {others_pct:.0f} % of its reads (bytes)" if (
        others_pct is not None) else ""
    return (f"{dev} was busy {busy_pct:.0f} % of the time; reads queued {format_ns(queue_ns)} "
            f"(median) before a {format_ns(service_ns)} service time{who}.")


def straggler_cause(own_summary: str | None, cause: str, pct: float) -> str:
    """Why a straggler was slow: its own finding's sentence, else its largest state."""
    why = own_summary if own_summary else f"its loop was in {cause} {pct:.0f} % of the time."
    return why[0].lower() + why[1:] if why.startswith("The training loop") else why


def straggler_rank(rank: int, host: str | None, waited_pct: float, waits: dict[int, float],
                   wait_ns: int, own_pct: float, why: str) -> str:
    on = f" (on {host})" if host else ""
    said = ", ".join(f"rank {r} {pct:.0f} %" for r, pct in sorted(waits.items()))
    return (f"Rank {rank}{on} is the straggler: the other ranks waited for it in collectives "
            f"{waited_pct:.0f} % of the time ({said}; {format_ns(wait_ns)} in all), while it "
            f"waited {own_pct:.0f} %; rank {rank}: {why}")


def untraced_straggler(rank: int, pct: float, world: int) -> str:
    return (f"Rank {rank} waited for its peers in collectives {pct:.0f} % of the time: another "
            f"of the job's {world} ranks, not traced, is slower; trace them all (the agent's "
            "PID, or every rank's) to name it and its cause.")


def not_io_bound(shares: dict[str, float] | None) -> str:
    """`shares`: the loops' time by state, in percent; None: they hardly ran."""
    if shares is None:
        return ("No I/O finding: the traced main thread(s) hardly ran, and nothing they did "
                "waited on storage.")
    if shares.get("gpu_wait", 0) > 0:  # a loop seen waiting for its GPU (uprobes on libcuda)
        return (f"I/O is not what holds the job back: the training loop waited for its GPU "
                f"{shares['gpu_wait']:.0f} % of the time, copied between host and device "
                f"{shares.get('device_copy', 0):.0f} %, worked on the host "
                f"{shares['compute']:.0f} %, waited on its own reads "
                f"{shares['sync_loading']:.0f} % and on checkpoints {shares['checkpoint']:.0f} %.")
    return (f"I/O is not what holds the job back: the training loop computed "
            f"{shares['compute']:.0f} % of the time, waited on its own reads "
            f"{shares['sync_loading']:.0f} % and on checkpoints {shares['checkpoint']:.0f} %.")
