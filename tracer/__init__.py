"""iotrace: why is my GPU idle? eBPF I/O tracing for PyTorch training jobs.

`tracer.load(DIR)` opens a trace directory written by `iotrace -o DIR`. The reader (and with it
pandas and pyarrow) is imported on first use, so that importing `tracer` stays cheap; nothing here
imports torch or pynvml.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["Trace", "TraceError", "__version__", "load"]

if TYPE_CHECKING:
    from tracer.api import Trace, TraceError, load

_LAZY = {"load", "Trace", "TraceError"}


def __getattr__(name: str) -> object:
    """Import `load`, `Trace` and `TraceError` from `tracer.api` on first access."""
    if name in _LAZY:
        from tracer import api

        return getattr(api, name)
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
