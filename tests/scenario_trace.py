"""Real PyTorch scenarios (tracer.workloads.scenarios) traced by the real tracer, the two ways
users trace: started by iotrace (`iotrace -- CMD`), or attached to (`iotrace --pid`) before
training or once the DataLoader workers run."""

from __future__ import annotations

import contextlib
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import psutil

from conftest import IOTRACE, ROOT
from tracer.core.roles import WORKER_COMM
from tracer.workloads.scenarios import SPECS, Output, Scenario, parse_output, prepare


@dataclass
class Traced:
    out: Path  # the trace directory
    job: Output  # what the job printed (its own clock: epochs, checkpoints)
    stdout: str  # iotrace's
    stderr: str
    workers_started: pd.Timestamp | None = None  # attached after them: when the first started

    def table(self, name: str) -> pd.DataFrame:
        return pd.read_parquet(self.out / name)

    def final_findings(self) -> pd.DataFrame:
        f = self.table("findings")
        return f[f.ts == f.ts.max()].sort_values("severity", ascending=False)

    def findings_during(self) -> pd.DataFrame:
        """The findings written while the job ran (every 10 s), before the final ones."""
        f = self.table("findings")
        return f[f.ts < f.ts.max()]


def launched(sc: Scenario, out: Path, extra: Sequence[str] = ()) -> Traced:
    """`iotrace -o OUT -- CMD`: traced from its first instruction."""
    sc.prepare_cache()
    tracer = subprocess.run([*IOTRACE, "-o", str(out), "--", *sc.argv, *extra], cwd=ROOT,
                            env=sc.env, capture_output=True, text=True, timeout=300)
    assert tracer.returncode == 0, tracer.stderr[-2000:]
    # without a terminal the job's output is the tracer's own: parse it there
    job = parse_output(0, tracer.stdout, tracer.stderr)
    return Traced(out, job, tracer.stdout, tracer.stderr)


def wait_for_workers(pid: int, timeout: float = 120) -> tuple[list[int], pd.Timestamp]:
    """The job's DataLoader worker PIDs once one runs, and when the first one started."""
    job = psutil.Process(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = [c for c in job.children() if c.name() == WORKER_COMM]
        if workers:
            started = min(w.create_time() for w in workers)
            return [w.pid for w in workers], pd.Timestamp(started, unit="s", tz="UTC")
        if job.status() == psutil.STATUS_ZOMBIE:  # said now, with its output, not in 2 minutes
            raise AssertionError("the job exited before it started a DataLoader worker")
        time.sleep(0.05)
    raise AssertionError("the job started no DataLoader worker")


def attached(sc: Scenario, out: Path, *, after_workers: bool = False, extra: Sequence[str] = (),
             pids_of: Callable[[int, list[int]], list[int]] | None = None,
             others: Sequence[int] = (), then: Callable[[], bool] | None = None) -> Traced:
    """`iotrace --pid PID -o OUT`, attached once the job is set up, before training, or with
    `after_workers` once its DataLoader workers run. `pids_of(job, workers)`: the PIDs to give
    (default the job's); `others`: unrelated PIDs given too (they outlive the job, so the
    tracer is then stopped as Ctrl-C would); `then`: after the workers, attach only once it
    says true (polled)."""
    run = sc.start(ready=True, extra_args=list(extra))
    started = None
    pids = [run.pid]
    if after_workers:
        run.go()
        try:
            workers, started = wait_for_workers(run.pid)
        except AssertionError as e:
            if run.proc.poll() is None:
                raise
            out = run.wait(timeout=60)
            raise AssertionError(f"{e} (exit {out.returncode}): {out.stderr[-2000:]}") from e
        time.sleep(0.5)  # they read by now
        while then is not None and not then() and run.proc.poll() is None:
            time.sleep(0.02)
        if pids_of is not None:
            pids = pids_of(run.pid, workers)
    tracer = subprocess.Popen([*IOTRACE, "--pid", *map(str, [*pids, *others]), "-o", str(out)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = tracer.stderr.readline()
        assert line.startswith("Tracing"), line + tracer.stderr.read()
        run.go()  # (already going when attached after the workers)
        job = run.wait(timeout=300)
        assert job.returncode == 0, job.stderr[-2000:]
        if others:
            time.sleep(1.5)
            tracer.send_signal(signal.SIGINT)
        stdout, stderr = tracer.communicate(timeout=60)  # ends with its targets
        assert tracer.returncode == 0, stderr
    finally:
        if tracer.poll() is None:
            tracer.send_signal(signal.SIGINT)
            tracer.communicate(timeout=60)
    return Traced(out, job, stdout, line + stderr, started)


def launched_and_attached(sc: Scenario, launch_out: Path, attach_out: Path, *,
                          extra: Sequence[str] = (),
                          pids_of: Callable[[int, list[int]], list[int]] | None = None,
                          others: Sequence[int] = (),
                          then: Callable[[], bool] | None = None) -> tuple[Traced, Traced]:
    """One run traced both ways at once: `iotrace -o LAUNCH_OUT -- CMD` from its first
    instruction, and `iotrace --pid PID -o ATTACH_OUT` once its DataLoader workers run
    (`pids_of`, `others`, `then`: as `attached`). Two runs one after the other meet different
    loads on the machine, and the loop's split follows the load; one run gives both tracers the
    same."""
    sc.prepare_cache()
    # files, not pipes: nobody reads the launch tracer's output until the job ends
    logs = [launch_out.with_name(launch_out.name + suffix) for suffix in (".stdout", ".stderr")]
    with open(logs[0], "w") as stdout, open(logs[1], "w") as stderr:
        launch = subprocess.Popen([*IOTRACE, "-o", str(launch_out), "--", *sc.argv, *extra],
                                  cwd=ROOT, env=sc.env, stdout=stdout, stderr=stderr, text=True)
    tracer = None
    try:
        job = _launched_job(launch, [*sc.argv, *extra])
        workers, started = wait_for_workers(job)
        time.sleep(0.5)  # they read by now
        while then is not None and not then() and launch.poll() is None:
            time.sleep(0.02)
        pids = pids_of(job, workers) if pids_of is not None else [job]
        tracer = subprocess.Popen([*IOTRACE, "--pid", *map(str, [*pids, *others]),
                                   "-o", str(attach_out)], cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = tracer.stderr.readline()
        assert line.startswith("Tracing"), line + tracer.stderr.read()
        assert launch.wait(timeout=300) == 0, logs[1].read_text()[-2000:]
        if others:
            time.sleep(1.5)
            tracer.send_signal(signal.SIGINT)
        stdout, stderr = tracer.communicate(timeout=60)  # ends with its targets
        assert tracer.returncode == 0, stderr
    finally:
        for p in (launch, tracer):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.communicate(timeout=60)
    launch_stdout, launch_stderr = (log.read_text() for log in logs)
    # without a terminal the job's output is the launch tracer's own: parse it there
    out = parse_output(0, launch_stdout, launch_stderr)
    return (Traced(launch_out, out, launch_stdout, launch_stderr),
            Traced(attach_out, out, stdout, line + stderr, started))


def _launched_job(tracer: subprocess.Popen, argv: Sequence[str], timeout: float = 60) -> int:
    """The PID of the command `iotrace -- ARGV` runs, once it runs ARGV (the tracer forks it
    and holds it until the trace starts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(tracer.pid).children():
            with contextlib.suppress(psutil.NoSuchProcess):
                if child.cmdline() == list(argv):
                    return child.pid
        if tracer.poll() is not None:
            raise AssertionError(f"iotrace exited ({tracer.returncode}) before the job ran")
        time.sleep(0.05)
    raise AssertionError(f"iotrace ran no {shlex.join(argv)} in {timeout} s")


def trace(name: str, mode: str, workdir: Path, tmp_path: Path) -> tuple[Traced, Scenario]:
    """Scenario `name` (made under `workdir`) traced into tmp_path/trace: launched, or attached
    to once its workers run (`mode` "launch" or "attach")."""
    sc = prepare(name, workdir)
    try:
        t = (launched(sc, tmp_path / "trace") if mode == "launch"
             else attached(sc, tmp_path / "trace", after_workers=True))
    finally:
        sc.cleanup()
    return t, sc


# How a shared run is traced: launched; attached once set up, before training; once its
# DataLoader workers run; once its first checkpoint is being written too. The launch and one
# later attach are one run with two tracers: the attach at the first save for these scenarios
# (their attach tests leave that save out of the job's clock), once the workers run for others
# that have workers.
SHARED_MODES = ("launch", "before", "workers", "save")
AT_FIRST_SAVE = {"checkpoint_pickle", "checkpoint_pickle_file", "checkpoint_pickle_fsync",
                 "checkpoint_stall"}
_shared: dict[tuple[str, str], tuple[Traced, Scenario]] = {}


def shared(name: str, mode: str, tmp_path_factory) -> tuple[Traced, Scenario]:
    """Scenario `name` traced as `mode` says (SHARED_MODES), once a session: tests that look at
    the same run from different sides (its verdict, the line it names, its files, the first
    screen; launched or attached) read one trace rather than each run the job again. They only
    read it."""
    if mode not in SHARED_MODES:
        raise ValueError(f"mode {mode!r}: one of {SHARED_MODES}")
    args = SPECS[name].train_args
    workers = int(args[args.index("--num-workers") + 1]) if "--num-workers" in args else 0
    paired = "save" if name in AT_FIRST_SAVE else "workers" if workers else None
    if (name, mode) not in _shared:
        sc = prepare(name, tmp_path_factory.getbasetemp() / "shared-scenarios")
        sides = ("launch", paired) if paired and mode in ("launch", paired) else (mode,)
        outs = [tmp_path_factory.mktemp(f"{name}-{side}") / "trace" for side in sides]
        first_save = (lambda: any(sc.checkpoint_dir.glob("ckpt-*.pt"))) if "save" in sides else None
        try:
            if len(sides) == 2:
                traced = launched_and_attached(sc, *outs, then=first_save)
            elif mode == "launch":
                traced = (launched(sc, outs[0]),)
            else:
                traced = (attached(sc, outs[0], after_workers=mode != "before", then=first_save),)
        finally:
            sc.cleanup()
        for side, t in zip(sides, traced, strict=True):
            _shared[name, side] = (t, sc)
    return _shared[name, mode]
