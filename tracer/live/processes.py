"""The traced processes: who they are (comm, parent, command line, role) and when they lived.

Fed by the kernel's life-cycle events (fork/exec/exit on the ring buffer) and, for processes that
already existed at attach time, by one look at /proc through psutil.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import psutil

from tracer.core import abi
from tracer.core.diagnosis.feed import Known
from tracer.core.roles import DATALOADER_WORKER, cuda_device, is_agent_cmdline, rank_env, role_of
from tracer.core.vocab import LOOP_ROLES, RANK
from tracer.live.clock import Clock


# Slots: a job that re-forks its DataLoader workers every epoch leaves thousands of them here.
@dataclass(slots=True)
class Process:
    pid: int
    ppid: int
    comm: str
    is_target: bool
    cmdline: str
    first_seen_ns: int  # UTC ns
    exit_ns: int | None = None  # UTC ns
    exit_code: int | None = None  # the code of a normal exit (exit(3) is 3)
    exit_signal: int | None = None  # the signal that killed it (SIGSEGV is 11)
    written: dict | None = None  # its last row given to the trace, while it may still change
    final_written: bool = False  # its last row, with its exit, is in the trace
    forgotten: bool = False  # gone, and its kernel counters deleted
    worker_generation: int | None = None
    worker_index: int | None = None
    ns_pid: int | None = None  # the PID inside its own PID namespace (containers)
    peers: tuple[str, ...] = ()  # TCP peers seen, first MAX_PEERS (peers.py)
    # (RANK, LOCAL_RANK, WORLD_SIZE) of its environment: a rank's, and its workers' who inherit it
    rank_env: tuple[int, int | None, int] | None = None
    is_rank: bool = False  # a rank itself: its environment says so and its parent's does not
    is_agent: bool = False  # torchrun's agent, known from its command line before it renames
    cuda_device: str | None = None  # the GPU its environment gives it (roles.cuda_device)

    @property
    def role(self) -> str:
        return role_of(self.is_target, self.comm, rank=self.is_rank, agent=self.is_agent)

    @property
    def alive(self) -> bool:
        return self.exit_ns is None

    def row(self) -> dict:
        return {"pid": self.pid, "ppid": self.ppid, "comm": self.comm, "role": self.role,
                "cmdline": self.cmdline, "first_seen": self.first_seen_ns,
                "exit": self.exit_ns, "exit_code": self.exit_code,
                "exit_signal": self.exit_signal,
                "worker_generation": self.worker_generation, "worker_index": self.worker_index,
                "ns_pid": self.ns_pid, "peers": ", ".join(self.peers) or None,
                **dict(zip(("rank", "local_rank", "world_size"), self.rank_env or (None,) * 3,
                           strict=True)),
                "cuda_device": self.cuda_device}

    def known_row(self) -> dict:
        """What the diagnosis's input reads of it (`feed.Known`): the columns of its
        `processes` row that say its loop, rank and peers."""
        return {"pid": self.pid, "ppid": self.ppid, "role": self.role,
                "first_seen": self.first_seen_ns, "exit": self.exit_ns,
                "rank": self.rank_env[0] if self.rank_env else None,
                "world_size": self.rank_env[2] if self.rank_env else None,
                "peers": ", ".join(self.peers) or None}


def split_wait_status(raw: int) -> tuple[int | None, int | None]:
    """The kernel's task exit_code is a wait status (exit(1) is 256, a SIGSEGV 11 or 139 with
    a core dump): (exit code, None) for a normal exit, (None, signal) for a killed process."""
    sig = raw & 0x7F
    if sig:
        return None, sig
    return (raw >> 8) & 0xFF, None


def ns_pid(pid: int, proc: str = "/proc") -> int | None:
    """The PID as the process's own PID namespace numbers it: the last field of NSpid in
    /proc/PID/status ("NSpid:\t48213\t1" for the first process of a container)."""
    try:
        with open(f"{proc}/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


def environ(pid: int, proc: str = "/proc") -> bytes:
    """/proc/PID/environ; empty when it cannot be read (gone, or another user's)."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def environ_rank(pid: int, proc: str = "/proc") -> tuple[int, int | None, int] | None:
    """The rank of a torchrun/DDP process from its environment (`roles.rank_env`); None when
    it has none or its environment cannot be read."""
    return rank_env(environ(pid, proc))


def _cmdline(pid: int) -> str:
    """Its command line; interned: a forked DataLoader worker's is its parent's, thousands of
    times in a long run."""
    try:
        return sys.intern(" ".join(psutil.Process(pid).cmdline()))
    except (psutil.Error, OSError):
        return ""


class ProcessTable:
    """Every process seen during the trace, by PID, in the order they were first seen."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.by_pid: dict[int, Process] = {}
        # The processes not forgotten yet, in the same order: the others are gone and do not
        # change, and a long run has thousands of them that an interval need not look at.
        self._not_forgotten: dict[int, Process] = {}
        self._known = Known()

    def add(self, proc: Process) -> None:
        """A process first seen now (its pid maybe taken again: the process before is gone)."""
        if proc.pid in self.by_pid:  # its pid taken again: another process, first seen now
            del self.by_pid[proc.pid]
            self._not_forgotten.pop(proc.pid, None)
            self._known.drop(proc.pid)
        self.by_pid[proc.pid] = self._not_forgotten[proc.pid] = proc

    def add_existing(self, pid: int, is_target: bool) -> Process:
        """A process found in /proc (a target, or a descendant alive at attach time)."""
        p = psutil.Process(pid)
        with p.oneshot():
            proc = Process(pid, p.ppid(), p.name(), is_target, _cmdline(pid), self.clock.now_ns())
        proc.ns_pid = ns_pid(pid)
        self._read_torchrun_role(proc)
        self.add(proc)
        return proc

    def _read_torchrun_role(self, proc: Process) -> None:
        """Whether it is torchrun's agent (its command line) and its rank (its environment),
        read after its exec; a process whose parent has the same rank environment inherited it
        (a worker, a saver, a tool the rank runs) and is not a rank of its own: torchrun's
        agent, which starts the ranks, has none."""
        proc.is_agent = is_agent_cmdline(proc.cmdline.split())
        parent = self.by_pid.get(proc.ppid)
        parent_env = parent.rank_env if parent else environ_rank(proc.ppid)
        env = environ(proc.pid)
        proc.rank_env = rank_env(env)
        proc.is_rank = proc.rank_env is not None and proc.rank_env != parent_env
        proc.cuda_device = cuda_device(env)

    def add_started(self, pid: int, ppid: int, argv: list[str]) -> Process:
        """The command iotrace itself starts (before its exec)."""
        proc = Process(pid, ppid, argv[0].rsplit("/", 1)[-1][:15], True, " ".join(argv),
                       self.clock.now_ns(), is_agent=is_agent_cmdline(argv))
        self.add(proc)
        return proc

    def on_event(self, ev: abi.ProcEvent) -> None:
        ts = self.clock.to_utc_ns(ev.ts_ns)
        proc = self.by_pid.get(ev.pid)
        comm = sys.intern(ev.comm)  # a few names for every process (and its exit's command line)
        if ev.kind == abi.EVENT_FORK:
            kid = Process(ev.pid, ev.ppid, comm, False, "", ts)
            kid.ns_pid = ev.ns_pid or ns_pid(ev.pid)
            parent = self.by_pid.get(ev.ppid)
            if parent:  # a fork shares its environment
                kid.rank_env, kid.cuda_device = parent.rank_env, parent.cuda_device
            self.add(kid)
            return
        if proc is None:
            return
        self._not_forgotten[proc.pid] = proc  # a record late for a forgotten one: looked at again
        if ev.kind == abi.EVENT_EXEC:
            proc.comm = comm
            proc.ns_pid = ev.ns_pid or proc.ns_pid
            proc.cmdline = _cmdline(ev.pid) or proc.cmdline
            self._read_torchrun_role(proc)
        elif ev.kind == abi.EVENT_EXIT:
            proc.exit_ns = ts
            proc.exit_code, proc.exit_signal = split_wait_status(ev.exit_code)
            if not proc.cmdline:
                proc.cmdline = proc.comm
        elif ev.kind == abi.EVENT_RENAME and ev.ppid == ev.pid:  # RENAME: the thread id in ppid
            proc.comm = comm

    def fill_cmdline(self, proc: Process) -> None:
        if not proc.cmdline and proc.alive:
            proc.cmdline = _cmdline(proc.pid)

    def mark_gone(self, pid: int) -> None:
        """A process that vanished without an exit event (it died before it was tracked)."""
        proc = self.by_pid.get(pid)
        if proc and proc.alive:
            proc.exit_ns = self.clock.now_ns()

    def number_workers(self) -> None:
        """Worker generation and index, from fork order: the workers of one parent form a new
        generation when they start after every earlier worker of that parent has exited (as
        DataLoader re-forks its workers each epoch unless persistent_workers=True)."""
        by_parent: dict[int, list[Process]] = {}
        for p in self.by_pid.values():
            if p.role == DATALOADER_WORKER:
                by_parent.setdefault(p.ppid, []).append(p)
        for workers in by_parent.values():
            workers.sort(key=lambda p: (p.first_seen_ns, p.pid))
            # of the generation so far: its workers still running, its last exit
            generation, index, running, last_exit = 0, 0, 0, 0
            for w in workers:
                # the generation is over only when all its workers have exited
                if index and not running and w.first_seen_ns >= last_exit:
                    generation, index, last_exit = generation + 1, 0, 0
                w.worker_generation, w.worker_index = generation, index
                index += 1
                if w.exit_ns is None:
                    running += 1
                else:
                    last_exit = max(last_exit, w.exit_ns)

    def owners(self) -> dict[int, int]:
        """Each process's training loop, by pid, as the diagnosis is told it (`known`): kept up
        to date, not walked again over every process ever seen (read-only)."""
        return self.known().owners()

    def known(self) -> Known:
        """Every process known, as the diagnosis's input reads them (`feed.interval_input`):
        the rows of those not forgotten are put again, and a forgotten one's row is its last."""
        for p in self._not_forgotten.values():
            self._known.put(p.known_row())
        # one alive stays: the forgetter marks by pid, maybe one just taken again by a new one
        self._not_forgotten = {pid: p for pid, p in self._not_forgotten.items()
                               if p.alive or not p.forgotten}
        return self._known

    def ranks(self) -> list[Process]:
        """The ranks of distributed jobs whose environment's numbers are known."""
        return [p for p in self.by_pid.values() if p.role == RANK and p.rank_env is not None]

    def rank_numbers(self) -> dict[int, int]:
        """Each rank's RANK, by pid (the summary's line per rank)."""
        return {p.pid: p.rank_env[0] for p in self.ranks()}  # type: ignore[index]

    def cuda_devices(self) -> dict[int, str]:
        """The GPU each live training loop's environment gives it, by pid (`roles.cuda_device`)."""
        return {p.pid: p.cuda_device for p in self.alive()
                if p.cuda_device is not None and p.role in LOOP_ROLES}

    def alive(self) -> list[Process]:
        return [p for p in self._not_forgotten.values() if p.alive]

    def exited(self) -> list[Process]:
        """The processes exited and not forgotten yet."""
        return [p for p in self._not_forgotten.values() if not p.alive and not p.forgotten]

    def get(self, pid: int) -> Process | None:
        return self.by_pid.get(pid)
