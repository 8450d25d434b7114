"""A save is a span: the training loop's time from opening a file for writing to closing it
(the `threads` row's `write_open_path`/`write_open_ns`) is `checkpoint` time once that file turns
out to be a checkpoint (checkpoint_file_bytes written to it, split.py's rule), whatever the loop
did meanwhile: pickling, copying tensors off the device, writing, fsyncing.

A save's file is known as a checkpoint only once enough is written to it, and torch.save pickles
first and writes at the end. Saves go to one place: a span of a file in a folder where the loop
already wrote a checkpoint is a save from its start, charged as it passes (a small file written
there, a save's metadata or marker such as torch.distributed.checkpoint's .metadata, is part of
the save). Before the first checkpoint of a folder is known, a span's time is kept aside
(pending) and, once its file turns out to be a checkpoint, moved to `checkpoint` from the loop's
`compute`, `device_copy`, `gpu_wait` and `other` time of that interval and the next ones
(owed): the run's totals are then right, while the split of those intervals lags that first
save by up to its length. A span whose file never becomes a checkpoint, in a folder without
one (a log, a small file), changes nothing.
Files are judged one by one: a save that writes several large files (torch.distributed.checkpoint's
.distcp per rank, safetensors shards) is a save by each of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracer.core.diagnosis.thresholds import Thresholds
from tracer.core.model import ThreadRow

# Intervals a pending span's time waits, once closed, for its file's last writes: a write that
# returned after the reading's files were taken is counted at the next one.
PENDING_QUIET = 1


@dataclass
class SaveState:
    """Per main pid: a span not yet known as a save (path, ns, intervals since it closed), and
    the time of saves counted as other states before their file was known, still to move."""

    pending: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    owed: dict[int, int] = field(default_factory=dict)
    folders: set[tuple[int, str]] = field(default_factory=set)  # (main, a checkpoint's folder)


def is_checkpoint(written_total: dict[tuple[int, str], int], t: Thresholds, pid: int,
                  path: str | None) -> bool:
    return path is not None and written_total.get((pid, path), 0) >= t.checkpoint_file_bytes


def span_checkpoint_ns(saves: SaveState, written_total: dict[tuple[int, str], int],
                       t: Thresholds, pid: int, th: ThreadRow) -> int:
    """Loop `pid`'s time in a save in this interval (`th`: its row), to charge as checkpoint;
    a span not yet known as a save is kept pending, one that turned out to be is owed."""
    path, ns = th.get("write_open_path"), th.get("write_open_ns") or 0
    pend = saves.pending.pop(pid, None)
    if pend is not None and is_checkpoint(written_total, t, pid, pend[0]):
        saves.owed[pid] = saves.owed.get(pid, 0) + pend[1]
        saves.folders.add((pid, _folder(pend[0])))
        pend = None
    if not ns or path is None:
        if pend is not None and pend[2] < PENDING_QUIET:
            saves.pending[pid] = (pend[0], pend[1], pend[2] + 1)
        return 0
    if is_checkpoint(written_total, t, pid, path):
        saves.folders.add((pid, _folder(path)))
        return ns
    if (pid, _folder(path)) in saves.folders:
        return ns
    carried = pend[1] if pend is not None and pend[0] == path else 0
    saves.pending[pid] = (path, carried + ns, 0)
    return 0


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def settle_owed(saves: SaveState, pid: int, ns: dict[str, int],
                parts: tuple[int, int, int]) -> tuple[int, tuple[int, int, int]]:
    """Moves what is owed of loop `pid`'s saves to `checkpoint` from this interval's `compute`,
    `device_copy`, `gpu_wait`, then `other` (`parts`: what `other` was, taken from
    timers/others, then own, then runnable first); returns the time moved and the new parts."""
    owed = saves.owed.pop(pid, 0)
    if not owed:
        return 0, parts
    # the loop's host time, then its device copies and GPU waits (a save copies tensors off
    # the device), then `other`
    moved = 0
    for state in ("compute", "device_copy", "gpu_wait"):
        cut = min(owed - moved, ns[state])
        ns[state] -= cut
        moved += cut
    from_other = min(owed - moved, ns["other"])
    ns["other"] -= from_other
    moved += from_other
    ns["checkpoint"] += moved
    if owed > moved:
        saves.owed[pid] = owed - moved
    left = list(parts)
    take = from_other
    for i in (2, 1, 0):
        cut = min(take, left[i])
        left[i] -= cut
        take -= cut
    return moved, (left[0], left[1], left[2])


def forget(saves: SaveState, pid: int) -> None:
    """The loop is gone."""
    saves.pending.pop(pid, None)
    saves.owed.pop(pid, None)
