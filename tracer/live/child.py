"""The command iotrace starts (`iotrace -- CMD`): forked, held stopped until it is tracked, then
let go to exec, so that the trace sees it from its first instruction."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tracer.errors import EXIT_USAGE, TraceFailure
from tracer.kernel.libbpf import set_pdeathsig

# A closed terminal or a dropped SSH session sends SIGHUP: it ends the trace as Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class HeldChild:
    """A forked child that stops itself (SIGSTOP) until it is tracked, then execs the command.

    Stopping does no syscall the tracer counts (a pipe handshake would show up as a pipe read
    of the traced command). A failed exec is reported back through a close-on-exec pipe.
    """

    def __init__(self, argv: list[str], output: Path | None = None):
        """`output`: a file for the command's stdout and stderr (the live view owns the
        terminal); None leaves them alone."""
        self.argv = argv
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: no Python-level cleanup may run here
            try:
                os.close(err_r)
                # Killed while holding it, iotrace must not leave it stopped for ever: the
                # kernel kills it with its parent (a stopped process takes SIGKILL). Undone by
                # release(), so the command itself runs as if iotrace had not been there.
                set_pdeathsig(signal.SIGKILL)
                if os.getppid() != parent:  # the parent died before the prctl took effect
                    os._exit(127)
                if output is not None:
                    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                    os.dup2(fd, 1)
                    os.dup2(fd, 2)
                    os.close(fd)
                for sig in STOP_SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                # Python ignores these, and an ignored signal stays ignored across exec: the
                # command would get EPIPE instead of dying in `| head`, as it does untraced.
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGSTOP)
                set_pdeathsig(0)  # tracked now: the job outlives iotrace, as any command does
                os.execvp(argv[0], argv)
            except OSError as e:
                os.write(err_w, f"{e.errno}:{e.strerror}".encode())
            finally:
                os._exit(127)
        os.close(err_w)
        _, status = os.waitpid(pid, os.WUNTRACED)
        self.pid, self._err = pid, err_r
        self.status: int | None = None
        if not os.WIFSTOPPED(status):
            self.status = os.waitstatus_to_exitcode(status)
        self.released = False

    def release(self) -> None:
        """Lets the child exec; raises TraceFailure if the exec failed."""
        self.released = True
        os.kill(self.pid, signal.SIGCONT)
        failure = os.read(self._err, 512).decode(errors="replace")
        os.close(self._err)
        if failure:
            self.reap(block=True)
            reason = failure.split(":", 1)[-1]
            raise TraceFailure(f"cannot execute {self.argv[0]!r}: {reason}", EXIT_USAGE)

    def abandon(self) -> None:
        """The trace could not start: the child must not run the command untraced."""
        os.kill(self.pid, signal.SIGKILL)
        self.reap(block=True)

    def reap(self, block: bool = False) -> bool:
        """True once the child has exited (and is reaped)."""
        if self.status is None:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status is not None

    def exit_code(self) -> int | None:
        """The command's status as time(1) and strace give it (a code as is, 128 + the signal
        that killed it); None while it runs."""
        if not self.reap():
            return None
        return self.status if self.status >= 0 else 128 - self.status
