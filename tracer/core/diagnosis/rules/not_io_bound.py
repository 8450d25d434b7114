"""not_io_bound: no finding blames I/O (none of IO_KINDS was found): the loops' split says
where their time went instead, and, for one loop seen waiting for its GPU, the line of its code
where it waits most (Python stacks). Severity 5."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import STATES, Finding
from tracer.core.diagnosis.rules.context import Context, code_line
from tracer.core.stacks import GPU_WAIT
from tracer.core.vocab import IO_KINDS, LOOP_ROLES


def judge(ctx: Context) -> list[Finding]:
    if any(f.kind in IO_KINDS for f in ctx.found):
        return []
    ns = dict.fromkeys(STATES, 0)
    for iv in ctx.ivs:
        for pid, loop in iv.loops.items():
            if not ctx.window.training(iv, pid):
                continue
            for s in STATES:
                ns[s] += loop.ns[s]
    total = sum(ns.values())
    pid = ctx.mains[0] if len(ctx.mains) == 1 else None
    if not total:
        return [Finding("not_io_bound", 5, pid, words.not_io_bound(None),
                        {"loop_shares_pct": None})]
    shares = {s: round(100 * ns[s] / total, 1) for s in STATES}
    code = None
    if pid is not None and ns["gpu_wait"] > 0:
        code = code_line(ctx.ivs, pid, (GPU_WAIT,), LOOP_ROLES, main_thread=True)
    return [Finding("not_io_bound", 5, pid,
                    words.not_io_bound(shares) + words.at_code("It waits for the GPU", code),
                    {"loop_shares_pct": shares, "code": code.evidence() if code else None})]
