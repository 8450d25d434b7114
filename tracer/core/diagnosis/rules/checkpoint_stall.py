"""checkpoint_stall: the training loop writes checkpoints itself, or waits for a background
saver (another thread, a child process) blocked writing one.

Thresholds: checkpoint_share (of the loop's training time in `checkpoint`); a file is a
checkpoint from checkpoint_file_bytes written (the split, split.py). The background form when
the loop's waits for a saver are at least half its checkpoint time; the saves form when the loop
saved itself in spans (open for writing to close, saves.py): it says what the saves' time was."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.evidence import Background
from tracer.core.diagnosis.finding import Finding, severity
from tracer.core.diagnosis.rules.context import Context, code_line
from tracer.core.stacks import SAVE, SLOW_WRITE, CodeLine
from tracer.core.vocab import LOOP_ROLES


def judge(ctx: Context) -> list[Finding]:
    loop, t = ctx.loop, ctx.thresholds
    if loop.total <= 0 or loop.share["checkpoint"] < t.checkpoint_share:
        return []
    return [_with_code(f, ctx) for f in _judge(ctx)]


def _with_code(f: Finding, ctx: Context) -> Finding:
    """The finding with the line of the user's code that saves (Python stacks): the loop's own
    while it had a checkpoint open for writing, else any of its processes' slow writes."""
    code: CodeLine | None = code_line(ctx.ivs, ctx.pid, (SAVE,), LOOP_ROLES, main_thread=True)
    if code is None:
        code = code_line(ctx.ivs, ctx.pid, (SLOW_WRITE,))
    if code is not None:
        f.summary += words.at_code("The save runs", code)
    f.evidence["code"] = code.evidence() if code else None
    return f


def _judge(ctx: Context) -> list[Finding]:
    loop, pid, t = ctx.loop, ctx.pid, ctx.thresholds
    bg = [iv.background[pid] for iv in ctx.ivs if pid in iv.background]
    if 2 * sum(b.waited_ns for b in bg) >= loop.ns["checkpoint"]:
        return [_background(ctx, bg)]
    nbytes = sum(iv.written.get(pid, 0) for iv in ctx.ivs)
    ckpt_ns = loop.ns["checkpoint"]
    rate = nbytes / (ckpt_ns / 1e9) if ckpt_ns else 0
    ckpts = sorted({path for (p, path), n in ctx.window.state.written_total.items()
                    if p == pid and n >= t.checkpoint_file_bytes})
    span_ns = sum(iv.saves[pid][0] for iv in ctx.ivs if pid in iv.saves)
    if span_ns:
        return [_spans(ctx, span_ns, nbytes, ckpts)]
    return [Finding(
        "checkpoint_stall", severity(loop.share["checkpoint"]), pid,
        words.checkpoint_stall(loop.pct["checkpoint"], loop.total, nbytes, rate,
                               ckpts[0] if ckpts else None),
        {"loop_shares_pct": loop.pct, "seconds": round(loop.total / 1e9, 1),
         "bytes_written": nbytes, "write_bytes_per_s": round(rate), "files": ckpts[:5]})]


def _background(ctx: Context, bg: list[Background]) -> Finding:
    loop = ctx.loop
    waited = sum(b.waited_ns for b in bg)
    blocked = sum(b.blocked_ns for b in bg)
    nbytes = sum(b.bytes for b in bg)
    own = sum(b.woken_own_ns for b in bg)
    timers = sum(b.woken_other_ns for b in bg)
    child = any(b.child for b in bg)
    return Finding(
        "checkpoint_stall", severity(loop.share["checkpoint"]), ctx.pid,
        words.checkpoint_background(child, loop.pct["checkpoint"], loop.total, waited, blocked,
                                    nbytes, own, timers),
        {"loop_shares_pct": loop.pct, "seconds": round(loop.total / 1e9, 1), "background": True,
         "saver": "process" if child else "thread",
         "loop_waited_ns": waited, "saver_blocked_ns": blocked, "bytes_written": nbytes,
         "loop_woken_by_own_ns": own, "loop_woken_by_timers_ns": timers})


def _spans(ctx: Context, span_ns: int, nbytes: int, ckpts: list[str]) -> Finding:
    """The loop saved in spans (saves.py): what its saves' time was, writing and the rest."""
    loop, pid = ctx.loop, ctx.pid
    write_ns = sum(iv.saves[pid][1] for iv in ctx.ivs if pid in iv.saves)
    rate = nbytes / (write_ns / 1e9) if write_ns else 0
    return Finding(
        "checkpoint_stall", severity(loop.share["checkpoint"]), pid,
        words.checkpoint_saves(loop.pct["checkpoint"], loop.total, span_ns, write_ns, nbytes,
                               rate, ckpts[0] if ckpts else None),
        {"loop_shares_pct": loop.pct, "seconds": round(loop.total / 1e9, 1),
         "bytes_written": nbytes, "write_bytes_per_s": round(rate), "files": ckpts[:5],
         "save_ns": span_ns, "write_ns": write_ns})
