"""Python stacks read from outside a traced process (the `stacks` table): the reader's output
turned into rows, and the frame a finding names, the user's own code.

The reader is py-spy (`py-spy dump --pid P --json --nonblocking`, run by `tracer.live.stacks`);
this module only parses what it printed and picks frames: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple

# `stacks.reason`: what a sample was taken for
SLOW_READ = "slow_read"  # a thread's read was slow (a slow event)
SLOW_WRITE = "slow_write"  # ... a write or an fsync
SAVE = "save"  # the training loop had a file open for writing (a save in progress)
DATA_WAIT = "data_wait"  # the loop waited for batches in the last interval
SYNC_LOADING = "sync_loading"  # the loop read its data itself in the last interval
GPU_WAIT = "gpu_wait"  # the loop waited for its GPU in the last interval (a CUDA sync)
HOST = "host"  # a loop that calls CUDA worked on the host most of the last interval
BACKGROUND = "background"  # the loop's main thread, at a low rate
REASONS = (SLOW_READ, SLOW_WRITE, SAVE, DATA_WAIT, SYNC_LOADING, GPU_WAIT, HOST, BACKGROUND)

MAX_FRAMES = 64  # frames kept per sample, the innermost first

# Paths of code that is not the user's: the interpreter's library, installed packages, frozen
# and generated modules.
_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str


@dataclass(frozen=True)
class CodeLine:
    """The line of the user's code a finding names: its file, line, function and, when the
    file could be read, the line's text."""

    file: str
    line: int
    function: str
    text: str | None = None

    def where(self) -> str:
        """`train.py:87 in train`, the file by its name only."""
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} in {self.function}"

    def evidence(self) -> dict:
        return {"file": self.file, "line": self.line, "function": self.function,
                "text": self.text}


def is_library(path: str) -> bool:
    """Whether `path` is code the user did not write: installed packages, the standard library
    (a `lib/pythonX.Y/` folder), frozen or generated modules (`<...>`)."""
    if not path or path.startswith("<"):
        return True
    if any(part in path for part in _LIBRARY_PARTS):
        return True
    _, sep, tail = path.partition("/lib/python3")
    # lib/python3.11/x.py: the standard library (a project folder named so would be odd)
    return bool(sep) and "/" in tail and tail.split("/", 1)[0].lstrip(".").isdigit()


def _forked_here(f: Frame) -> bool:
    """A multiprocessing child's first frame of its own (`BaseProcess._bootstrap`): the frames
    under it are its parent's at the fork, not what the child runs."""
    return f.function.endswith("_bootstrap") and f.file.endswith("multiprocessing/process.py")


def user_frame(frames: list[Frame]) -> int | None:
    """The index of the innermost frame of the user's code (frames innermost first), or None;
    in a multiprocessing child (a DataLoader worker), among its own frames only."""
    for i, f in enumerate(frames):
        if _forked_here(f):
            return None
        if not is_library(f.file):
            return i
    return None


class Thread(NamedTuple):
    """One Python thread of a dump: its OS thread id, its name, its frames innermost first (at
    most MAX_FRAMES), and whether it ran at that moment (py-spy's `active`: not asleep in a
    wait)."""

    os_tid: int
    name: str
    frames: list[Frame]
    active: bool = True


def parse_dump(text: str) -> list[Thread]:
    """py-spy's `dump --json` output, its threads. Raises ValueError on output that is not
    that."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("not a list of threads")
    out = []
    for th in data:
        frames = [Frame(str(f.get("filename") or ""), int(f.get("line") or 0),
                        str(f.get("name") or "?"))
                  for f in th.get("frames") or ()][:MAX_FRAMES]
        out.append(Thread(int(th.get("os_thread_id") or 0), str(th.get("thread_name") or ""),
                          frames, bool(th.get("active", True))))
    return out


def thread_of(threads: list[Thread], pid: int, tid: int, ns_tid: int | None = None
              ) -> Thread | None:
    """Thread `tid` of process `pid` among a dump's threads: by its OS thread id, which py-spy
    gives as the process's own PID namespace numbers it (`ns_tid`: a container's), or, for the
    main thread when no id matches, the thread Python calls MainThread."""
    for th in threads:
        if th.os_tid in (tid, ns_tid):
            return th
    if tid == pid:
        for th in threads:
            if th.name == "MainThread":
                return th
    return None


def frame_rows(ts: int, taken: int, pid: int, tid: int, role: str | None, reason: str,
               frames: list[Frame], text: str | None) -> list[dict]:
    """A sample's rows of `stacks`: one per frame, depth 0 the innermost; `user` marks the
    frame a finding names (`user_frame`), which alone carries the line's `text`."""
    mine = user_frame(frames)
    return [{"ts": ts, "taken": taken, "pid": pid, "tid": tid, "role": role, "reason": reason,
             "depth": i, "file": f.file, "line": f.line, "function": f.function,
             "user": i == mine, "text": text if i == mine else None}
            for i, f in enumerate(frames)]
