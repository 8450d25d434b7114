"""``with tracer.trace(pid=...) as t:``: trace a block of code, or another process, from Python.

    >>> import tracer
    >>> with tracer.trace(output="run1") as t:      # this process and what it forks
    ...     train_one_epoch()
    >>> t.trace.percentiles(by="role")
    >>> t.trace.findings

The tracer does not run inside the traced process (it would trace its own Parquet writes and
stall the job's threads with its own work): `trace` starts ``iotrace --pid PID -o OUTPUT`` as a
separate process (``python -m tracer.cli``), waits until it prints that it is tracing (so every
operation of the block is counted), and on leaving the block stops it as Ctrl-C would (SIGINT),
waits for it to write the last snapshot and the findings, and loads the trace: ``t.trace``.

Tracing needs root (or CAP_BPF and CAP_PERFMON); without it, `trace` raises PermissionError
before starting anything. Notebooks in containers often run as root; elsewhere run the notebook
under sudo, or trace from a shell: ``sudo iotrace --pid $(pgrep -f my_notebook_kernel)``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from tracer.api import Trace, TraceError, load
from tracer.core.vocab import READY_PREFIX


class TracingError(RuntimeError):
    """iotrace could not start, or failed while tracing; the message is iotrace's own."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Tracing:
    """The handle `trace` yields: the running tracer, then (after the block) the trace.

    ``pid``: the traced process. ``output``: the trace directory. ``trace``: the loaded `Trace`,
    set when the block ends (None before). ``summary_text``: everything iotrace printed on stdout
    (a line per interval when stdout is not a terminal, then the end-of-run summary that
    ``t.trace.summary()`` also gives). ``stderr``: what it printed on stderr. ``returncode``:
    iotrace's exit status.
    """

    def __init__(self, pid: int, output: Path, process: subprocess.Popen[str]) -> None:
        self.pid = pid
        self.output = output
        self.process = process
        self.trace: Trace | None = None
        self.summary_text = ""
        self.returncode: int | None = None
        self._stderr: list[str] = []
        self._stdout: list[str] = []
        self._ready = threading.Event()
        self._readers = [
            threading.Thread(target=self._drain, args=(process.stderr, self._stderr, True),
                             name="iotrace-stderr", daemon=True),
            threading.Thread(target=self._drain, args=(process.stdout, self._stdout, False),
                             name="iotrace-stdout", daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _drain(self, stream: IO[str], lines: list[str], watch: bool) -> None:
        """Keeps reading iotrace's output (a full pipe would stall it)."""
        for line in stream:
            lines.append(line)
            if watch and line.startswith(READY_PREFIX):
                self._ready.set()
        stream.close()
        if watch:
            self._ready.set()  # iotrace ended: wake the waiter

    @property
    def stderr(self) -> str:
        """What iotrace printed on stderr so far."""
        return "".join(self._stderr)

    def _error_text(self) -> str:
        lines = [line.strip() for line in self._stderr if line.strip()]
        errors = [line for line in lines if line.startswith("iotrace:")]
        return (errors or lines or ["iotrace printed nothing"])[-1]

    def _wait_ready(self, timeout: float) -> None:
        """Returns once iotrace has said it is tracing; raises if it ended or timed out first."""
        in_time = self._ready.wait(timeout)
        if any(line.startswith(READY_PREFIX) for line in self._stderr):
            return
        if not in_time:
            self._kill()
            raise TracingError(f"iotrace did not start tracing within {timeout:g} s "
                               f"(stderr: {self._error_text()})")
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            code = self.process.returncode
        self._join()
        self.returncode = code
        message = self._error_text()
        if code == 3 and "CAP_BPF" in message:
            raise PermissionError(message)
        raise TracingError(message, code)

    def stop(self, timeout: float = 60.0) -> Trace:
        """Stops the tracer (SIGINT, like Ctrl-C), waits for it, loads and returns the trace."""
        if self.returncode is None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)
            try:
                self.returncode = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
                self.returncode = self.process.returncode
                raise TracingError(f"iotrace did not stop within {timeout:g} s of SIGINT; "
                                   f"it was killed (stderr: {self._error_text()})") from None
            self._join()
            self.summary_text = "".join(self._stdout)
        if self.returncode != 0:
            raise TracingError(f"iotrace exited with status {self.returncode}: "
                               f"{self._error_text()}", self.returncode)
        if self.trace is None:
            self.trace = load(self.output)
        return self.trace

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        self._join()

    def _join(self) -> None:
        for reader in self._readers:
            reader.join(5.0)

    def __repr__(self) -> str:
        state = "running" if self.returncode is None else f"exited {self.returncode}"
        return f"<Tracing pid={self.pid} output={str(self.output)!r} {state}>"


def _site_dirs() -> set[str]:
    import site

    dirs = set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
    dirs.add(site.getusersitepackages())
    return {str(Path(d).resolve()) for d in dirs}


def _privilege_problem() -> str | None:
    from tracer.kernel.host import privilege_problem

    return privilege_problem()


@contextlib.contextmanager
def trace(
    pid: int | None = None,
    output: str | os.PathLike[str] | None = None,
    *,
    interval: float = 1.0,
    slow_ms: float = 10.0,
    extra_args: Sequence[str] = (),
    start_timeout: float = 60.0,
    stop_timeout: float = 60.0,
) -> Iterator[Tracing]:
    """Trace process `pid` and its descendants while the ``with`` block runs.

    `pid` defaults to this process (the block's own I/O, and that of any DataLoader workers it
    starts); give another PID to watch a job running elsewhere. `output` is the trace directory
    (new or empty; default ``./iotrace-YYYYmmdd-HHMMSS`` as for the command). `interval` and
    `slow_ms` are iotrace's ``-i`` and ``--slow-ms``; `extra_args` are passed on as they are.

    Yields a `Tracing` handle; when the block ends, ``handle.trace`` is the loaded `Trace`.
    Raises PermissionError (before starting anything) when this process may not trace,
    ProcessLookupError when `pid` does not exist, and `TracingError` (iotrace's own one-line
    message) when iotrace fails to start or to finish. If the block raises, the tracer is still
    stopped, the trace loaded when possible, and the block's exception propagates.
    """
    problem = _privilege_problem()
    if problem:
        raise PermissionError(f"tracing needs root: {problem}")
    target = os.getpid() if pid is None else int(pid)
    if target <= 0 or not os.path.exists(f"/proc/{target}"):
        raise ProcessLookupError(f"no process with PID {target}: check it is running")
    out = Path(output) if output is not None else Path(time.strftime("iotrace-%Y%m%d-%H%M%S"))
    out = out.absolute()
    argv = [sys.executable, "-m", "tracer.cli", "--pid", str(target), "-o", str(out),
            "-i", repr(float(interval)), "--slow-ms", repr(float(slow_ms)), *extra_args]
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parent.parent)
    if package_root not in _site_dirs():  # a source checkout: let the child import it too
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
        start_new_session=True,  # a Ctrl-C in the terminal reaches the block, not the tracer
    )
    handle = Tracing(target, out, process)
    try:
        handle._wait_ready(start_timeout)
    except BaseException:
        if process.poll() is None:
            handle._kill()
        raise
    try:
        yield handle
    except BaseException:
        with contextlib.suppress(TracingError, TraceError, OSError):
            handle.stop(stop_timeout)
        raise
    handle.stop(stop_timeout)
