"""`iotrace demo`: real PyTorch training in four configurations, each traced by the real
tracer, with the verdict iotrace reaches for each.

The configurations (tracer.workloads.scenarios) make the seed's cases happen on any machine:
the dataset is written to local disk, made cold (posix_fadvise DONTNEED) and read through a
blkio/io.max cgroup that limits the disk's speed, so slow storage is real, not simulated.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TextIO

from tracer.errors import EXIT_OK, EXIT_USAGE, TraceFailure
from tracer.live.session import Session, TraceOptions

CONFIGS = (
    ("sync_loading", "num_workers=0: the training loop loads every batch itself"),
    ("dataloader_io_bound", "3 DataLoader workers reading cold files from a slow disk"),
    ("dataloader_cpu_bound", "2 DataLoader workers with a CPU-heavy transform on cached data"),
    ("checkpoint_stall", "torch.save of a 256 MB checkpoint + fsync every few steps"),
)
DATA_DIR = Path("/var/tmp/iotrace-demo")  # datasets, kept between runs (a few hundred MB)


def run_demo(output: Path, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        import torch  # noqa: F401  (the demo trains with it; the tracer never imports it)
    except ImportError:
        raise TraceFailure("the demo trains a PyTorch model: install torch (make run does), "
                           "e.g. pip install torch", EXIT_USAGE) from None
    from tracer.workloads.scenarios import prepare

    output.mkdir(parents=True, exist_ok=True)
    current: list[Session] = []
    interrupted = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        interrupted.append(signum)
        for s in current:
            s.request_stop(signal.Signals(signum).name)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    print(f"iotrace demo: {len(CONFIGS)} PyTorch training runs, each traced (datasets in "
          f"{DATA_DIR}, traces in {output})", file=out, flush=True)
    try:
        for i, (name, what) in enumerate(CONFIGS, start=1):
            if interrupted:
                break
            print(f"\n[{i}/{len(CONFIGS)}] {what}", file=out, flush=True)
            sc = prepare(name, DATA_DIR)
            try:
                for step in sc.setup:
                    print(f"      setup: {step}", file=out)
                sc.prepare_cache()
                trace_dir = output / name
                trace_dir.mkdir()
                opts = TraceOptions(output=trace_dir, command=sc.argv, interval_s=1.0,
                                    command_output=trace_dir / "command.log",
                                    argv=["iotrace", "demo"])
                session = Session(opts, _Quiet(), _Quiet())
                current[:] = [session]
                started = time.monotonic()
                try:
                    session.start()
                    session.loop()
                    session.finish()
                finally:
                    session.close()
                _print_verdict(session, time.monotonic() - started, trace_dir, out)
            finally:
                sc.cleanup()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    print(f"\nTraces are in {output}: `iotrace report {output}/<run>` prints the summary "
          f"(`--histograms` adds the latency histograms), `--html OUT.html` plots it, pandas "
          f"reads `{output}/<run>/latency`.", file=out)
    return EXIT_OK if not interrupted else 130


def _print_verdict(session: Session, seconds: float, trace_dir: Path, out: TextIO) -> None:
    findings = session.final_findings
    lead = findings[0] if findings else None
    print(f"      traced for {seconds:.0f} s -> {trace_dir}", file=out)
    if lead is None:
        print("      no verdict (nothing ran?)", file=out)
        return
    print(f"      verdict: {lead.kind} (severity {lead.severity})", file=out)
    print(f"      {lead.summary}", file=out)
    print(f"      advice: {lead.advice}", file=out, flush=True)


class _Quiet:
    """Swallows the per-interval lines of a demo run (the verdict is printed instead)."""

    def write(self, _text: str) -> int:
        return 0

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def default_output() -> Path:
    return Path(time.strftime("iotrace-demo-%Y%m%d-%H%M%S"))


if __name__ == "__main__":  # pragma: no cover - for a quick look without the CLI
    sys.exit(run_demo(default_output() if len(sys.argv) < 2 else Path(sys.argv[1])))
