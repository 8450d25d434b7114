"""What does a run's end add to the tracer's memory? The tracer's RSS at each stage of its end.

    sudo .venv/bin/python scripts/bench_end.py -o DIR [iotrace options] -- COMMAND...

Runs `iotrace` (this checkout's) on COMMAND, as `python -m tracer.cli` would, and prints to
stderr the tracer's resident memory (VmRSS, of it anonymous, and the peak so far, VmHWM) and
whether pandas is loaded, before and after each step of `Session.finish`: the final interval,
the sinks closed, the first screen read back from the trace. The run's last peak is the last
line's VmHWM. E.g. the GPU node's file rate of issue 39:

    sudo .venv/bin/python scripts/bench_end.py -o /tmp/t --no-tui -- .venv/bin/python -m \\
        tracer.workloads.imagefolder --data /var/tmp/iotrace-scale/200000x1000 \\
        --num-workers 8 --epochs 30 --files-per-s 30000 --shuffle

Nothing is asserted: figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracer.live import session  # noqa: E402  (this checkout's, put on the path above)


def memory(stage: str) -> None:
    mib = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "VmHWM"):
                mib[key] = int(value.split()[0]) / 1024
    print(f"[end] {stage:32s} RSS {mib['VmRSS']:6.1f} anon {mib['RssAnon']:6.1f} "
          f"peak {mib['VmHWM']:6.1f} MiB, pandas {'loaded' if 'pandas' in sys.modules else 'not loaded'}",
          file=sys.stderr, flush=True)


def timed(owner: object, name: str, stage: str) -> None:
    """Wraps `owner.name` to print the memory around it (tick: only the final one)."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        shown = name != "tick" or kwargs.get("final", False)
        if shown:
            memory(f"before {stage}")
        result = inner(*args, **kwargs)
        if shown:
            memory(f"after {stage}")
        return result

    setattr(owner, name, wrapper)


def main() -> None:
    timed(session.Session, "finish", "finish")
    timed(session.Session, "tick", "the final interval")
    timed(session.Session, "_close_sinks", "closing the sinks")
    timed(session, "_summary_parts", "the first screen read back")
    sys.argv = ["tracer.cli", *sys.argv[1:]]
    runpy.run_module("tracer.cli", run_name="__main__")


if __name__ == "__main__":
    main()
