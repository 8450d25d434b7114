"""dataloader_network_bound: the loop waits for data that its DataLoader workers (or, without
workers, the loop itself) read from sockets.

Thresholds: loop_share (of the loop's training time in `data_wait_network`)."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding, severity
from tracer.core.diagnosis.rules.context import Context, code_line, data_wait_pct, worker_times
from tracer.core.histogram import percentile_ns
from tracer.core.stacks import DATA_WAIT, SLOW_READ
from tracer.core.units import MAX_SLOTS
from tracer.core.vocab import DATALOADER_WORKER, MAIN, RANK


def judge(ctx: Context) -> list[Finding]:
    loop, pid, ivs = ctx.loop, ctx.pid, ctx.ivs
    if loop.total <= 0 or loop.share["data_wait_network"] < ctx.thresholds.loop_share:
        return []
    role = DATALOADER_WORKER if pid in ctx.window.state.workers_seen else (
        RANK if any((pid, RANK) in iv.net_counts for iv in ivs) else MAIN)
    counts = [0] * MAX_SLOTS
    nbytes = 0
    for iv in ivs:
        for i, c in enumerate(iv.net_counts.get((pid, role), ())):
            counts[i] += c
        nbytes += iv.net_bytes.get((pid, role), 0)
    secs = sum(iv.interval_ns for iv in ivs if pid in iv.loops) / 1e9
    p50, p99 = percentile_ns(counts, 50), percentile_ns(counts, 99)
    wnet = sum(iv.worker_net_ns.get(pid, 0) for iv in ivs)
    wbusy = wnet + sum(worker_times(ivs, pid))
    rate = nbytes / secs if secs else 0
    net_pct = 100 * wnet / wbusy if wbusy else 0.0
    peers = ctx.window.peers.get(pid, [])
    # the line that reads the sockets (Python stacks): the workers', else the loop's own
    code = code_line(ivs, pid, (SLOW_READ, DATA_WAIT), (role,), main_thread=True)
    return [Finding(
        "dataloader_network_bound", severity(loop.share["data_wait_network"]), pid,
        words.dataloader_network_bound(
            loop.pct["data_wait_network"], loop.total,
            net_pct if role == DATALOADER_WORKER else None, rate, peers, p50, p99)
        + words.at_code("The DataLoader workers read" if role == DATALOADER_WORKER
                        else "The loop reads", code),
        {"loop_shares_pct": loop.pct, "seconds": round(loop.total / 1e9, 1),
         "data_wait_pct": round(data_wait_pct(loop), 1),
         "workers_socket_pct": round(net_pct, 1) if wbusy else None,
         "socket_reads": sum(counts), "bytes_received": nbytes,
         "receive_bytes_per_s": round(rate), "socket_read_p50_ns": p50,
         "socket_read_p99_ns": p99, "peers": peers, "code": code.evidence() if code else None})]
