"""The live loop: a rich `Live` on the alternate screen, redrawn once per interval, and keys.

Use (the session owns it; it never reads the kernel itself):

    with LiveView(targets="PID 42", interval_s=1.0) as view:
        while tracing:
            ...                                    # one interval -> an Interval
            view.write(interval)                   # tracer.core.interval.Interval
            if view.quit_requested: break
    print(summary)                                 # after close: normal scrollback

Keys (read in a small daemon thread from stdin in cbreak mode, so the tracer never waits on
them; Ctrl-C still sends SIGINT): q quit (sets `quit_requested`), s cycle the process order
(read, write, latency), l cycle the histogram's layer (syscall, block, block_queue), r cycle the
histogram's role (all, main, dataloader_worker, child). A key redraws at once.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import threading
import tty
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.live import Live

from tracer.ui.view import Screen, ViewState

if TYPE_CHECKING:
    from tracer.core.interval import Interval

KEYS = {"q": "quit", "s": "cycle sort (read, write, latency)",
        "l": "cycle histogram layer (syscall, block, block_queue)",
        "r": "cycle histogram role (all, main, dataloader_worker, child)"}
KEY_POLL_S = 0.1  # how long the key thread waits on stdin before it checks for close


class LiveView:
    """The full-screen view of a run. Create it when stdout is a terminal (and not --no-tui);
    `write` once per interval; poll `quit_requested`; `close` (or leave the `with`) before
    printing the final summary. Closing twice is harmless."""

    def __init__(self, targets: str = "", interval_s: float = 1.0, *,
                 state: ViewState | None = None, console: Console | None = None,
                 keys: TextIO | None = None, on_quit: Callable[[], None] | None = None) -> None:
        self.state = state or ViewState(targets=targets, interval_s=interval_s)
        self.console = console or Console()
        self._keys = sys.stdin if keys is None else keys
        self._on_quit = on_quit
        self._live = Live(Screen(self.state), console=self.console, auto_refresh=False,
                          screen=True, transient=False, redirect_stdout=False,
                          redirect_stderr=False)
        self._lock = threading.RLock()  # the state and the screen: updates vs keys
        self._quit = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved_tty: list | None = None
        self._fd: int | None = None
        self.started = self.closed = False
        self.terminal_lost = False  # a redraw failed: nothing is drawn any more

    @property
    def quit_requested(self) -> bool:
        """True once the user pressed q."""
        return self._quit.is_set()

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> LiveView:
        if self.started:
            return self
        self.started = True
        self._live.start(refresh=True)
        try:
            fd = self._keys.fileno()
        except (AttributeError, OSError, ValueError):
            fd = None
        if fd is not None and os.isatty(fd):
            self._fd = fd
            self._saved_tty = termios.tcgetattr(fd)
            tty.setcbreak(fd)  # no echo, no line buffering; ISIG stays on (Ctrl-C works)
            self._thread = threading.Thread(target=self._read_keys, name="iotrace-keys",
                                            daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stops the key thread, restores the terminal and leaves the alternate screen."""
        if self.closed:
            return
        self.closed = True
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * KEY_POLL_S + 1)
        if self._saved_tty is not None and self._fd is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved_tty)
        if self.started:
            with self._lock, contextlib.suppress(OSError):
                self._live.stop()  # a terminal that hung up takes no more escape codes

    def __enter__(self) -> LiveView:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- per interval ----------------------------------------------------------------------------
    def write(self, interval: Interval) -> None:
        """One interval: its snapshot, its `loop` rows, the current findings (most severe
        first) and the events lost so far; redraws the screen."""
        with self._lock:
            self.state.update(interval.snapshot, interval.loop, interval.findings,
                              interval.events_lost)
            self._redraw()

    def press(self, key: str) -> None:
        """Acts on one key as if typed (the key thread calls it; tests may too)."""
        with self._lock:
            if key == "q":
                self._quit.set()
                if self._on_quit is not None:
                    self._on_quit()
                return
            if key == "s":
                self.state.cycle_sort()
            elif key == "l":
                self.state.cycle_layer()
            elif key == "r":
                self.state.cycle_role()
            else:
                return
            self._redraw()

    def _redraw(self) -> None:
        if self.started and not self.closed and not self.terminal_lost:
            try:
                self._live.refresh()
            except OSError:
                # The terminal hung up (EIO) or went away: the trace goes on without a screen.
                self.terminal_lost = True

    def _read_keys(self) -> None:
        assert self._fd is not None
        while not self._closing.is_set():
            try:
                ready, _, _ = select.select([self._fd], [], [], KEY_POLL_S)
                if not ready:
                    continue
                data = os.read(self._fd, 64)
            except (OSError, ValueError):
                return  # stdin closed under us: no more keys
            if not data:
                return
            for ch in data.decode(errors="ignore").lower():
                self.press(ch)
