"""iotrace: why is my GPU idle? eBPF I/O tracing for PyTorch training jobs.

`tracer.load(DIR)` opens a trace directory written by `iotrace -o DIR`; ``with tracer.trace(pid=...)
as t:`` traces a block of code (or another process) and leaves the trace in ``t.trace``. The reader
(and with it pandas and pyarrow) is imported on first use, so that importing `tracer` stays cheap;
nothing here imports torch or pynvml.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracer.core.version import __version__

__all__ = ["Trace", "TraceError", "Tracing", "TracingError", "__version__", "load", "trace"]

if TYPE_CHECKING:
    from tracer.api import Trace, TraceError, load
    from tracer.attach import Tracing, TracingError, trace

_LAZY = {"load": "tracer.api", "Trace": "tracer.api", "TraceError": "tracer.api",
         "trace": "tracer.attach", "Tracing": "tracer.attach", "TracingError": "tracer.attach"}


def __getattr__(name: str) -> object:
    """Import the reader (`tracer.api`) or `trace` (`tracer.attach`) on first access."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
