"""What to trace: the processes named with --pid (a DataLoader worker stands for its training
process), and with --auto the PyTorch jobs found in /proc and those the kernel reports as they
name their DataLoader workers or torchrun agents (EVENT_DISCOVER)."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, TextIO

import psutil

from tracer.core.roles import ELASTIC_COMM, WORKER_COMM

if TYPE_CHECKING:
    from tracer.core.redact import Redactor
    from tracer.kernel.probes import Probes
    from tracer.live.processes import ProcessTable


def job_of(pid: int) -> int:
    """The training process behind a DataLoader worker's parent: the parent itself, or the
    process that started it when it is a multiprocessing forkserver."""
    try:
        proc = psutil.Process(pid)
        if "multiprocessing.forkserver" in " ".join(proc.cmdline()):
            return proc.ppid()
    except psutil.Error:
        pass
    return pid


def gone(pid: int) -> bool:
    """True when the process has exited (a zombie counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Discovery:
    """Adds targets to the process table and to the kernel's tracked set; says on `err` which
    it found by itself."""

    def __init__(self, processes: ProcessTable, probes: Probes, redact: Redactor, err: TextIO,
                 match: str | None = None):
        self.processes, self.probes, self.redact, self.err = processes, probes, redact, err
        self.match = re.compile(match) if match else None
        self._scanned: set[int] = set()
        # iotrace and the processes it runs under (a wrapper script, sudo, a shell) are never a
        # job to find: their command lines hold iotrace's own --match REGEX.
        self._ours = {os.getpid(), *(p.pid for p in psutil.Process().parents())}

    def targets(self, pids: list[int]) -> list[int]:
        """The processes to trace as `main` for the PIDs given (`$(pgrep -f train.py)` lists a
        trainer and its DataLoader workers alike): a PID below another given one is traced as
        its descendant, with the role its name and place give it; a DataLoader worker given
        without its parent stands for its training process, which is traced instead."""
        given, out = set(pids), []
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                if given & {p.pid for p in proc.parents()}:
                    continue
                if proc.name() == WORKER_COMM:
                    parent = job_of(proc.ppid())
                    print(f"iotrace: PID {pid} is a DataLoader worker: tracing its training "
                          f"process, PID {parent}, and its descendants", file=self.err,
                          flush=True)
                    pid = parent
            except psutil.Error:
                pass  # gone: add_target says so
            if pid not in out:
                out.append(pid)
        return out

    def add_target(self, pid: int) -> None:
        """Traces a process and its descendants: the kernel follows its forks from now on, the
        ones alive now are found in /proc and marked in the kernel as if it had seen them
        start (a DataLoader worker as a worker)."""
        if self.processes.get(pid) is not None:
            return
        try:
            proc = psutil.Process(pid)
            # first: its forks from now on are followed in the kernel
            self.probes.loader.track(pid, worker=proc.name() == WORKER_COMM)
            self.processes.add_existing(pid, is_target=True)
            for kid in proc.children(recursive=True):
                if kid.pid != os.getpid() and self.processes.get(kid.pid) is None:
                    self.probes.loader.track(kid.pid, pid, worker=kid.name() == WORKER_COMM)
                    self.processes.add_existing(kid.pid, is_target=False)
        except psutil.NoSuchProcess:
            self.processes.mark_gone(pid)

    def scan(self) -> None:
        """--auto: finds training jobs in /proc (DataLoader workers' parents, torchrun agents,
        --match); the kernel reports new ones as they name their workers (EVENT_DISCOVER)."""
        me = os.getpid()
        for p in psutil.process_iter(["pid", "ppid", "name", "cmdline"]):
            pid = p.info["pid"]
            if pid == me or pid in self._scanned or pid in self._ours:
                continue
            self._scanned.add(pid)
            if p.info["name"] == WORKER_COMM:
                self.found(p.info["ppid"])
            elif p.info["name"] == ELASTIC_COMM or self._matches(p.info["cmdline"]):
                self.found(pid)

    def _matches(self, cmdline: list[str] | None) -> bool:
        return bool(self.match and self.match.search(" ".join(cmdline or ())))

    def found(self, pid: int) -> None:
        """A training process was found: trace it (or the process behind its forkserver)."""
        pid = job_of(pid)
        if pid in (0, 1) or pid in self._ours:  # tracing an ancestor would trace iotrace too
            return
        owners = self.processes.owners()
        if pid in owners or not psutil.pid_exists(pid):
            return  # already traced (a target or a descendant of one), or gone
        self.add_target(pid)
        proc = self.processes.get(pid)
        print(f"Tracing PID {pid} ({self.redact.comm(proc.comm) if proc else '?'})"
              " and its descendants", file=self.err, flush=True)
