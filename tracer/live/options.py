"""What one tracing run is asked to do (`TraceOptions`), and its checks: the same for the command
line and for Python, so that `run_trace` from Python refuses what `iotrace` refuses, in the same
words and with the same exit code (EXIT_USAGE: bad input; EXIT_HOST: the host cannot trace).

Everything is checked before anything is attached: a bad option fails at once, not after the
job has started under the tracer.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tracer.core.selfcost import STATS_MODES
from tracer.errors import EXIT_HOST, EXIT_USAGE, TraceFailure

MOST_SECONDS = 1e9  # a finite number that the kernel's u64 nanoseconds and meta.json's JSON hold
SLOW_MS_MAX = 86_400_000.0  # a day: longer is no "slow operation" worth an event


def number_problem(name: str, value: float, text: str | None = None, allow_zero: bool = False,
                   most: float = MOST_SECONDS) -> str | None:
    """What is wrong with option `name`'s `value` (written `text`), or None: the one wording of
    the command line's parser and of `TraceOptions.validate`."""
    text = str(value) if text is None else text
    if value < 0 or (value == 0 and not allow_zero) or math.isnan(value):
        return f"{name} must be greater than 0, not {text}"
    if value > most:
        return f"{name} must be at most {most:g}, not {text}"
    return None


@dataclass
class TraceOptions:
    output: Path
    pids: list[int] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    duration_s: float | None = None
    interval_s: float = 1.0
    slow_ms: float = 10.0
    auto: bool = False  # trace PyTorch jobs as they appear (DataLoader workers, torchrun)
    match: str | None = None  # --auto also takes processes whose command line matches this
    # serve /metrics on (host, port); validate() parses a "[HOST:]PORT" string into one
    prometheus: tuple[str, int] | str | None = None
    otlp: str | None = None  # push /metrics' series to this OTLP/HTTP URL (validate() completes it)
    tui: bool = False  # the live terminal view (stdout is a terminal and no --no-tui)
    csv: Path | None = None  # per-interval numbers as CSV (dstat --output)
    gpu: str = "auto"  # --gpu auto|off|0,2
    command_output: Path | None = None  # the started command's stdout+stderr go there
    redact_paths: bool = False  # hash names (paths, command words, comms) in every output
    bpf_stats: str = "sampled"  # count BPF programs' runs: sampled|always|off (selfcost.STATS_MODES)
    roll_s: float = 5.0
    argv: list[str] = field(default_factory=lambda: list(sys.argv))

    @classmethod
    def checked(cls, output: str | os.PathLike[str] | None = None,
                csv: str | os.PathLike[str] | None = None, **fields) -> TraceOptions:
        """The options as the command line makes them from what a user gave: `validate`, then
        whether this host can trace (EXIT_HOST), then the trace directory `output` made (new
        or empty; None: ./iotrace-YYYYmmdd-HHMMSS) and the file `csv` created (new)."""
        from tracer.kernel.host import tracing_problem

        draft = cls(output=Path(), **fields)  # the directory is made last, once all is checked
        draft.validate()
        problem = tracing_problem()
        if problem:
            raise TraceFailure(problem, EXIT_HOST)
        made = prepare_output(None if output is None else os.fspath(output))
        return replace(draft, output=made,
                       csv=prepare_csv(os.fspath(csv)) if csv is not None else None)

    def validate(self, *, exited: bool = True) -> None:
        """Raises TraceFailure (EXIT_USAGE) for the first thing wrong, in the command line's
        order: what to trace, --match, --prometheus, --otlp, --gpu, the numbers, --bpf-stats, the
        PIDs, the command. `exited`: also refuse PIDs that have all exited (zombies), as the
        command line does before anything starts; a session leaves that to its own check once
        attached, which also sees a target that exits while the programs attach."""
        self._check_targets()
        if isinstance(self.prometheus, str):
            from tracer.sinks.prometheus import parse_listen

            try:
                self.prometheus = parse_listen(self.prometheus)
            except ValueError as e:
                raise TraceFailure(str(e), EXIT_USAGE) from None
        if self.otlp is not None:
            self._check_otlp()
        if not re.fullmatch(r"auto|off|\d+(,\d+)*", self.gpu):
            raise TraceFailure(f"--gpu {self.gpu!r}: give auto, off, or GPU indices like 0 or 0,2",
                               EXIT_USAGE)
        self._check_numbers()
        if self.bpf_stats not in STATS_MODES:
            raise TraceFailure(f"--bpf-stats {self.bpf_stats!r}: give one of "
                               f"{', '.join(STATS_MODES)}", EXIT_USAGE)
        _check_pids(self.pids, exited)
        if self.command:
            _check_command(self.command)

    def _check_targets(self) -> None:
        """One kind of target; --match only with --auto, and a valid regular expression."""
        if sum(map(bool, (self.pids, self.command, self.auto))) > 1:
            raise TraceFailure("give one of --pid PID, -- CMD or --auto, not several", EXIT_USAGE)
        if not self.pids and not self.command and not self.auto:
            raise TraceFailure("nothing to trace: give --pid PID, -- CMD or --auto (see iotrace "
                               "--help)", EXIT_USAGE)
        if self.match is not None:
            if not self.auto:
                raise TraceFailure("--match works with --auto: iotrace --auto --match REGEX",
                                   EXIT_USAGE)
            try:
                re.compile(self.match)
            except re.error as e:
                raise TraceFailure(f"--match {self.match!r} is not a valid regular expression: "
                                   f"{e}", EXIT_USAGE) from None

    def _check_otlp(self) -> None:
        """--otlp: a URL to post to, and the optional packages that push (an extra not
        installed is the user's to install: bad usage, as `iotrace mcp` says it)."""
        from tracer.sinks.otlp_target import missing_packages, parse_otlp_url

        try:
            self.otlp = parse_otlp_url(self.otlp)
        except ValueError as e:
            raise TraceFailure(str(e), EXIT_USAGE) from None
        missing = missing_packages()
        if missing:
            raise TraceFailure(missing, EXIT_USAGE)

    def _check_numbers(self) -> None:
        """The command line's parser checks these as it reads them; a Python caller's here."""
        numbers = [("--interval", self.interval_s, MOST_SECONDS),
                   ("--slow-ms", self.slow_ms, SLOW_MS_MAX), ("roll_s", self.roll_s, MOST_SECONDS)]
        if self.duration_s is not None:
            numbers.insert(0, ("--duration", self.duration_s, MOST_SECONDS))
        for name, value, most in numbers:
            problem = number_problem(name, value, most=most)
            if problem:
                raise TraceFailure(problem, EXIT_USAGE)


def _check_pids(pids: list[int], exited: bool) -> None:
    from tracer.live.discovery import gone

    for pid in pids:
        if pid == os.getpid():
            raise TraceFailure(f"PID {pid} is iotrace itself: give the PID of the job to trace",
                               EXIT_USAGE)
        if not os.path.exists(f"/proc/{pid}"):
            raise TraceFailure(f"no process with PID {pid}: check it is running (pgrep -a "
                               "python)", EXIT_USAGE)
    # pgrep lists zombies too: one among live PIDs is left out later, all of them leave nothing
    if exited and pids and all(gone(pid) for pid in pids):
        listed = " ".join(map(str, pids))
        raise TraceFailure(f"PID {listed} has exited (a zombie its parent has not reaped): "
                           "nothing to trace; check the job is running (pgrep -a python)",
                           EXIT_USAGE)


def _check_command(cmd: list[str]) -> None:
    exe = cmd[0]
    if "/" in exe:
        ok = os.path.isfile(exe) and os.access(exe, os.X_OK)
    else:
        ok = shutil.which(exe) is not None
    if not ok:
        raise TraceFailure(f"cannot execute {exe!r}: no such executable file (check the command "
                           "after --)", EXIT_USAGE)


def prepare_output(path: str | None) -> Path:
    """Creates the trace directory; refuses a non-empty one or one that cannot be written."""
    if path == "":
        raise TraceFailure("-o '' names no directory: give -o DIR, or leave -o out for "
                           "./iotrace-YYYYmmdd-HHMMSS", EXIT_USAGE)
    out = Path(path or time.strftime("iotrace-%Y%m%d-%H%M%S"))
    try:
        if out.exists() and not out.is_dir():
            raise TraceFailure(f"output {out} exists and is not a directory: choose another -o "
                               "DIR", EXIT_USAGE)
        if out.exists() and any(out.iterdir()):
            raise TraceFailure(f"output directory {out} is not empty: choose a new -o DIR or "
                               "remove it", EXIT_USAGE)
        existed = out.exists()
        if existed and out.stat().st_uid != os.geteuid():
            raise TraceFailure(f"output directory {out} belongs to uid {out.stat().st_uid}: "
                               "choose a -o DIR of your own", EXIT_USAGE)
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        # The trace holds command lines and paths: owner only, whatever the umask, and an
        # empty directory open to others is closed rather than refused (it has nothing yet).
        mode = out.stat().st_mode & 0o777
        if mode != 0o700:
            os.chmod(out, 0o700)
            if existed and mode & 0o077:
                print(f"iotrace: output directory {out} was open to others (mode {mode:04o}): "
                      "made it owner-only (0700), as the trace holds command lines",
                      file=sys.stderr, flush=True)
        probe = out / ".iotrace-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise TraceFailure(f"cannot write the output directory {out}: {e.strerror}: choose "
                           "another -o DIR", EXIT_USAGE) from None
    return out


def prepare_csv(path: str) -> Path:
    """Creates the --csv file before anything is attached: a file that cannot be written fails
    here, not after the job started, and an existing file is never overwritten."""
    if path == "":
        raise TraceFailure("--csv '' names no file: give --csv FILE", EXIT_USAGE)
    csv = Path(path)
    try:
        with open(csv, "x"):
            pass
    except FileExistsError:
        raise TraceFailure(f"--csv {csv} exists: choose a new file or remove it",
                           EXIT_USAGE) from None
    except OSError as e:
        raise TraceFailure(f"cannot write --csv {csv}: {e.strerror}: choose another file",
                           EXIT_USAGE) from None
    return csv
