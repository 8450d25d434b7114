"""The summary's findings block and the context lines beside it: long start-ups, background
saves that cost the loop little, what the loop's `other` time was."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracer.core.diagnosis.words import NOTHING_JUDGED
from tracer.core.histogram import format_bytes, format_ns

if TYPE_CHECKING:
    from tracer.core.diagnosis import Diagnosis, Finding, StartUp

OTHER_WORDS = ("runnable, waiting for a CPU", "asleep, woken by its own threads",
               "asleep, woken by timers or other processes")


def render_findings(findings: list[Finding]) -> list[str]:
    """The findings block of the summary, most severe first."""
    if not findings:
        return ["", f"Findings: none, {NOTHING_JUDGED}."]
    lines = ["", "Findings (most severe first):"]
    for f in findings:
        lines.append(f"  [{f.severity:>3}] {f.kind}: {f.summary}")
        lines.append(f"        advice: {f.advice}")
    return lines


def context_lines(diagnosis: Diagnosis) -> list[str]:
    """The summary's lines before the verdicts: long start-ups, background saves that cost
    the loop little, and what its `other` time was."""
    return startup_lines(diagnosis) + background_lines(diagnosis) + other_lines(diagnosis)


def startup_line(s: StartUp) -> str:
    what = [f"read {s.files} files ({s.library_files} libraries, "
            f"{s.site_packages} under site-packages), {format_bytes(s.bytes)}, "
            f"{format_bytes(s.missed)} of it from disk"] if s.files else []
    what.append(f"the loop was on CPU {format_ns(s.oncpu_ns)}, blocked on I/O (D) "
                f"{format_ns(s.iowait_ns)}, asleep {format_ns(s.sleep_ns)}")
    return (f"Start-up of pid {s.pid} took {s.seconds:.1f} s (until {s.until}; "
            f"not judged by the findings): " + "; ".join(what) + ".")


def startup_lines(diagnosis: Diagnosis) -> list[str]:
    """The summary's lines on start-ups long enough to matter."""
    long = diagnosis.long_startups()
    return ["", *(startup_line(s) for s in long)] if long else []


def background_lines(diagnosis: Diagnosis) -> list[str]:
    """The summary's line on background saves that cost the loop little (below
    `checkpoint_stall`), per main process."""
    out = [f"Checkpoint written in the background by pid {b.pid}'s "
           f"{'child process' if b.child else 'threads'}: {format_bytes(b.bytes)} while the "
           f"saver was blocked {format_ns(b.blocked_ns)}; the loop waited "
           f"{100 * b.waited_ns / b.loop_ns:.0f} % of its time."
           for b in diagnosis.background_saves()]
    return ["", *out] if out else []


def other_lines(diagnosis: Diagnosis) -> list[str]:
    """What the loop's `other` time was, per main process, when it is 10 % or more."""
    out = []
    for o in diagnosis.other_time():
        said = ", ".join(f"{w} {100 * n / o.other_ns:.0f} %"
                         for w, n in zip(OTHER_WORDS, o.parts, strict=True) if n)
        out.append(f"The loop of pid {o.pid} spent {100 * o.other_ns / o.loop_ns:.0f} % of its "
                   f"time in `other`: {said or 'nothing more is known'}.")
    return ["", *out] if out else []
