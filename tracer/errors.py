"""Exit codes (README, "Exit codes") and the one exception that carries a user-facing failure;
and what to do with an output whose reader left."""

import contextlib
import os
from typing import TextIO

EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_HOST = 0, 1, 2, 3
# The trace directory could not be written while tracing (a full disk, a quota, an I/O error):
# neither bad input (it was writable when checked) nor the host's tracing ability. What was
# written before stays readable.
EXIT_OUTPUT = 4


class TraceFailure(Exception):
    """An expected failure: one line for the user and the exit code to leave with."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def drop_output(*streams: TextIO) -> None:
    """Whoever read these streams has gone (a closed pipe, a terminal that hung up): later
    writes, and the interpreter's flush at exit, go to /dev/null instead of failing again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in streams:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    os.close(devnull)
