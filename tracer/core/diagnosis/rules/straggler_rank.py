"""straggler_rank: per distributed job, the rank the others waited for in their collectives,
and why it was slow, from its own loop's split and its own finding of that cause
(docs/diagnosis.md, "Ranks"). With one rank traced, that it waited for an untraced one.

Thresholds: straggler_share (the others' mean share of their time in collective_wait, at
least), straggler_ratio (the straggler's own share, at most this times theirs)."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import STATES, Finding, RankLoop, severity
from tracer.core.diagnosis.rules.context import Context
from tracer.core.diagnosis.thresholds import Thresholds

# The finding that says why a straggler's loop was slow, by its largest state.
CAUSE_KIND = {"data_wait_io": "dataloader_io_bound", "data_wait_cpu": "dataloader_cpu_bound",
              "data_wait_network": "dataloader_network_bound", "sync_loading": "sync_loading",
              "sync_writes": "sync_writes", "checkpoint": "checkpoint_stall"}


def judge(ctx: Context) -> list[Finding]:
    out = []
    for _job, ranks in sorted(ctx.window.rank_loops(ctx.ivs).items()):
        f = judge_ranks(ranks, ctx.found, ctx.thresholds)
        if f is not None:
            out.append(f)
    return out


def judge_ranks(ranks: dict[int, RankLoop], found: list[Finding], t: Thresholds,
                where: dict[int, str] | None = None) -> Finding | None:
    """The straggler among the ranks of one job, if any; `found`: the findings its cause is
    taken from; `where`: per rank, the host it ran on (a job traced on several nodes)."""
    ranks = {r: x for r, x in ranks.items() if sum(x.ns.values())}
    share = {r: x.ns["collective_wait"] / sum(x.ns.values()) for r, x in ranks.items()}
    if not share:
        return None
    world = max(x.world for x in ranks.values())
    slowest = min(share, key=lambda r: (share[r], r))
    others = [r for r in share if r != slowest]
    if not others:  # one rank traced: it can say it waited, not for whom
        if share[slowest] >= t.straggler_share and world > 1:
            return _untraced(slowest, ranks[slowest].pids, share, world)
        return None
    waited = sum(share[r] for r in others) / len(others)
    if waited < t.straggler_share or share[slowest] > t.straggler_ratio * waited:
        return None
    return _straggler(slowest, ranks, share, others, waited, world, found, where)


def _straggler(rank: int, ranks: dict[int, RankLoop], share: dict[int, float],
               others: list[int], waited: float, world: int, found: list[Finding],
               where: dict[int, str] | None) -> Finding:
    me = ranks[rank]
    mine, pids = me.ns, me.pids
    total = sum(mine.values())
    shares = {s: round(100 * mine[s] / total, 1) for s in STATES}
    # its cause: the largest of its own states (what it did while the others waited)
    cause = max((s for s in STATES if s not in ("collective_wait", "other")),
                key=lambda s: mine[s])
    pid = max(pids, key=lambda p: me.pid_ns.get(p, 0))
    # its own finding of that cause (of its last process, if the agent restarted it: the
    # most severe)
    own = max((f for f in found if f.pid in pids and f.kind == CAUSE_KIND.get(cause)),
              key=lambda f: f.severity, default=None)
    why = words.straggler_cause(own.summary if own else None, cause, shares[cause])
    wait_ns = sum(ranks[r].ns["collective_wait"] for r in others)
    host = where[rank] if where and rank in where else None
    return Finding(
        "straggler_rank", max(severity(waited), own.severity if own else 0), pid,
        words.straggler_rank(rank, host, 100 * waited, {r: 100 * share[r] for r in others},
                             wait_ns, 100 * share[rank], why),
        {"rank": rank, "world_size": world, "pids": sorted(pids),
         "others_collective_wait_pct": round(100 * waited, 1),
         "collective_wait_pct_by_rank": {str(r): round(100 * s, 1)
                                         for r, s in sorted(share.items())},
         "others_waited_ns": wait_ns, "cause": cause, "cause_pct": shares[cause],
         "cause_finding": own.kind if own else None,
         "cause_evidence": own.evidence if own else None, "loop_shares_pct": shares,
         "hosts": {str(r): h for r, h in sorted(where.items())} if where else None},
        rank=rank)


def _untraced(rank: int, pids: list[int], share: dict[int, float], world: int) -> Finding:
    return Finding(
        "straggler_rank", severity(share[rank]), None,
        words.untraced_straggler(rank, 100 * share[rank], world),
        {"rank": None, "world_size": world, "traced_rank": rank, "pids": sorted(pids),
         "collective_wait_pct_by_rank": {str(rank): round(100 * share[rank], 1)},
         "cause": None})
