"""Drives the live view with synthetic snapshots (tests/ui_snapshots.py), no kernel needed.

    python tests/workloads/live_view_demo.py [--seconds 10] [--interval 0.3]

Feeds one snapshot every --interval seconds to a LiveView for --seconds (or until q), then
closes it and prints one line to normal scrollback, as the session prints its summary:
"live view closed after N intervals (quit|time)". tests/test_ui.py runs it in tmux.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: ui_snapshots
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tracer

from ui_snapshots import findings, loop_rows, snapshot

from tracer.core.interval import Interval
from tracer.ui.live import LiveView


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=0.3)
    args = ap.parse_args()
    n = 0
    deadline = time.monotonic() + args.seconds
    with LiveView(targets="python train.py (demo)", interval_s=args.interval) as view:
        while time.monotonic() < deadline and not view.quit_requested:
            view.write(Interval(snapshot(n), loop_rows(n), findings(), events_lost=0))
            n += 1
            wake = time.monotonic() + args.interval
            while time.monotonic() < wake and not view.quit_requested:
                time.sleep(0.02)  # the session polls quit_requested between ring-buffer polls
        reason = "quit" if view.quit_requested else "time"
    print(f"live view closed after {n} intervals ({reason})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
