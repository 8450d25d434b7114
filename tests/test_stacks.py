"""Python stacks (tracer.core.stacks, tracer.live.stacks): py-spy run on a real Python process
whose line is known from its source, and the line a finding names picked from its frames."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tracer.core.diagnosis.evidence import code_samples
from tracer.core.diagnosis.rules.context import code_line
from tracer.core.diagnosis.words import at_code
from tracer.core.stacks import (
    DATA_WAIT,
    GPU_WAIT,
    HOST,
    SAVE,
    SLOW_READ,
    SLOW_WRITE,
    CodeLine,
    Frame,
    is_library,
    parse_dump,
    thread_of,
    user_frame,
)
from tracer.live import stacks as live_stacks
from tracer.live.stacks import StackSampler, find_reader, missing_line

READER = find_reader()
needs_reader = pytest.mark.skipif(READER is None, reason="py-spy is not installed")

SCRIPT = '''\
import os, threading, time

r, w = os.pipe()  # never written: a read that waits

def load_sample():
    os.read(r, 1)  # the line the stack is at

def other():
    time.sleep(600)

threading.Thread(target=other, name="helper", daemon=True).start()
print("ready", flush=True)
load_sample()
'''


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def python(minor: int) -> str | None:
    """An interpreter of Python 3.`minor` that runs: this one, on PATH, under /usr/bin, or
    one pyenv installed; None when there is none."""
    if sys.version_info[:2] == (3, minor):
        return sys.executable
    found = [shutil.which(f"python3.{minor}"), f"/usr/bin/python3.{minor}",
             *map(str, sorted(Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/python3.{minor}")))]
    for exe in filter(None, found):
        try:
            if subprocess.run([exe, "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
                return exe
        except OSError:
            continue
    return None


@pytest.fixture(params=[11, 12, 13], ids=lambda m: f"3.{m}")
def sleeper(request, tmp_path: Path):
    exe = python(request.param)
    if exe is None:
        pytest.skip(f"no Python 3.{request.param} here")
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([exe, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)  # in the read by now
        yield proc, script
    finally:
        proc.kill()
        proc.wait()


def test_library_code_is_not_the_users() -> None:
    assert is_library("/usr/lib/python3.11/threading.py")
    assert is_library("/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py")
    assert is_library("/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py")
    assert is_library("/usr/lib/python3/dist-packages/numpy/core.py")
    assert is_library("<frozen runpy>")
    assert not is_library("/app/train.py")
    assert not is_library("/home/me/lib/python3-tools/train.py")  # not a version folder
    assert not is_library("train.py")
    frames = [Frame("/venv/lib/python3.11/site-packages/torch/serialization.py", 900, "save"),
              Frame("/app/train.py", 131, "save_checkpoint"), Frame("/app/train.py", 200, "main")]
    assert user_frame(frames) == 1
    assert user_frame(frames[:1]) is None
    # a DataLoader worker collating: the user's frames under its bootstrap are its parent's
    torch = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils"
    worker = [Frame(f"{torch}/collate.py", 155, "collate"),
              Frame(f"{torch}/worker.py", 374, "_worker_loop"),
              Frame("/usr/lib/python3.11/multiprocessing/process.py", 108, "BaseProcess.run"),
              Frame("/usr/lib/python3.11/multiprocessing/process.py", 314,
                    "BaseProcess._bootstrap"),
              Frame("/app/train.py", 485, "train")]
    assert user_frame(worker) is None
    assert user_frame([Frame("/app/train.py", 110, "Data.__getitem__"), *worker]) == 0


@needs_reader
def test_a_dump_of_a_real_process_names_its_line(sleeper) -> None:
    proc, script = sleeper
    done = subprocess.run([READER, "dump", "--pid", str(proc.pid), "--json", "--nonblocking"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    threads = parse_dump(done.stdout)
    assert len(threads) == 2
    main = thread_of(threads, proc.pid, proc.pid)
    assert main is not None and not main.active  # waiting in a read
    frames = main.frames
    mine = frames[user_frame(frames)]
    assert (mine.file, mine.line, mine.function) == (
        str(script), _line_of(SCRIPT, "the line the stack is at"), "load_sample")
    # a thread id that is not there: no frames, but the main thread is found by its name
    assert thread_of(threads, proc.pid, 1) is None
    assert thread_of([th._replace(os_tid=0) for th in threads], proc.pid, proc.pid) == main._replace(
        os_tid=0)


@needs_reader
def test_the_sampler_gives_rows_with_the_lines_text(sleeper) -> None:
    proc, script = sleeper
    notes: list[str] = []
    sampler = StackSampler(READER, time.time_ns, notes.append)
    try:
        assert sampler.ask(proc.pid, proc.pid, SLOW_READ, "main")
        assert not sampler.ask(proc.pid, proc.pid, SLOW_READ, "main")  # one in flight
        rows = []
        deadline = time.monotonic() + 30
        while not rows and time.monotonic() < deadline:
            time.sleep(0.05)
            rows = sampler.take()
        assert not sampler.ask(proc.pid, proc.pid, SLOW_READ, "main")  # within GAP_S
    finally:
        sampler.close()
    assert [r["depth"] for r in rows] == list(range(len(rows)))
    user = [r for r in rows if r["user"]]
    assert len(user) == 1
    line = _line_of(SCRIPT, "the line the stack is at")
    assert (user[0]["file"], user[0]["line"], user[0]["function"], user[0]["text"]) == (
        str(script), line, "load_sample", "os.read(r, 1)  # the line the stack is at")
    assert {r["reason"] for r in rows} == {SLOW_READ} and not notes
    assert all(r["text"] is None for r in rows if not r["user"])


def _sampled(sampler: StackSampler, pid: int) -> list[dict]:
    """The rows of the sample in flight for `pid`, once it is done."""
    deadline = time.monotonic() + 30
    while pid in sampler._busy and time.monotonic() < deadline:
        time.sleep(0.05)
    return sampler.take()


@needs_reader
def test_a_slow_write_sample_that_finds_no_write_is_dropped(sleeper) -> None:
    """A sample asked for by a slow write whose thread is in no write by the time it is
    read (here: in a read) shows where the thread went next: no rows, and it may be asked
    again at once. The same thread asked for by a slow read gives its line."""
    proc, _ = sleeper
    sampler = StackSampler(READER, time.time_ns, lambda _: None)
    sampler._started -= 1000  # the reader's CPU budget is not what this is about
    try:
        assert not live_stacks.in_io_call(proc.pid, proc.pid, SLOW_WRITE)
        assert live_stacks.in_io_call(proc.pid, proc.pid, SLOW_READ)
        assert sampler.ask(proc.pid, proc.pid, SLOW_WRITE, "main")
        assert _sampled(sampler, proc.pid) == []
        assert sampler.dumps == 1
        assert sampler.ask(proc.pid, proc.pid, SLOW_WRITE, "main")  # not within GAP_S
        assert _sampled(sampler, proc.pid) == []
        assert sampler.ask(proc.pid, proc.pid, SLOW_READ, "main")
        rows = _sampled(sampler, proc.pid)
        assert [r["line"] for r in rows if r["user"]] == [_line_of(SCRIPT, "the line the")]
    finally:
        sampler.close()


@needs_reader
def test_a_loop_that_runs_is_not_sampled_as_waiting_for_batches(tmp_path: Path) -> None:
    """A loop asked for because it waited for batches, which runs by the time it is read (the
    batch came): no rows, and it may be asked again at once. One asleep gives rows, and a
    line found again is asked for less often."""
    script = tmp_path / "spin.py"
    script.write_text("print('ready', flush=True)\nwhile True:\n    pass\n")
    (tmp_path / "sleep.py").write_text(SCRIPT)
    spinner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    sleeper = subprocess.Popen([sys.executable, str(tmp_path / "sleep.py")],
                               stdout=subprocess.PIPE, text=True)
    sampler = StackSampler(READER, time.time_ns, lambda _: None)
    sampler._started -= 1000  # the reader's CPU budget is not what this is about
    try:
        assert spinner.stdout.readline().strip() == sleeper.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        assert sampler.ask(spinner.pid, spinner.pid, DATA_WAIT, "main")
        assert _sampled(sampler, spinner.pid) == []
        assert sampler.dumps == 1
        assert sampler.ask(spinner.pid, spinner.pid, DATA_WAIT, "main")  # not within GAP_S
        assert _sampled(sampler, spinner.pid) == []
        key = (sleeper.pid, sleeper.pid, DATA_WAIT)
        for gap in (live_stacks.GAP_S, 2 * live_stacks.GAP_S):
            sampler._last.pop(key, None)
            assert sampler.ask(*key, "main")
            rows = _sampled(sampler, sleeper.pid)
            assert [r["line"] for r in rows if r["user"]] == [_line_of(SCRIPT, "the line the")]
            assert sampler._repeat[key][1] == gap
        assert not sampler.ask(*key, "main")
        sampler._last[key] -= 1.5 * live_stacks.GAP_S  # past GAP_S, within twice it
        assert not sampler.ask(*key, "main")
    finally:
        sampler.close()
        for p in (spinner, sleeper):
            p.kill()
            p.wait()


@needs_reader
def test_a_loops_workers_share_one_threads_gap(tmp_path: Path) -> None:
    """The DataLoader workers of one loop read the same line, and their slow reads come all
    the time: one of them is sampled per gap, not each, so that they do not spend the reader's
    budget before the loop waits for batches. Another loop's workers have a gap of their own."""
    (tmp_path / "sleep.py").write_text(SCRIPT)
    workers = [subprocess.Popen([sys.executable, str(tmp_path / "sleep.py")],
                                stdout=subprocess.PIPE, text=True) for _ in range(3)]
    sampler = StackSampler(READER, time.time_ns, lambda _: None)
    sampler._started -= 1000  # the reader's CPU budget is not what this is about
    try:
        assert all(w.stdout.readline().strip() == "ready" for w in workers)
        first, second, other = (w.pid for w in workers)
        assert sampler.ask(first, first, SLOW_READ, "dataloader_worker", loop=10)
        _sampled(sampler, first)
        assert not sampler.ask(second, second, SLOW_READ, "dataloader_worker", loop=10)
        assert sampler.ask(other, other, SLOW_READ, "dataloader_worker", loop=20)
        _sampled(sampler, other)
        assert sampler.ask(second, second, SLOW_READ, "dataloader_worker")  # no loop: its own
        _sampled(sampler, second)
        assert sampler.dumps == 3
    finally:
        sampler.close()
        for w in workers:
            w.kill()
            w.wait()


@needs_reader
def test_a_process_that_is_not_python_is_given_up(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    sampler = StackSampler(READER, time.time_ns, lambda _: None)
    try:
        for _ in range(live_stacks.FAILURES):
            while not sampler.ask(proc.pid, proc.pid, SLOW_READ, None):
                sampler._last.clear()
                time.sleep(0.05)
        deadline = time.monotonic() + 30
        while proc.pid not in sampler._given_up and time.monotonic() < deadline:
            time.sleep(0.05)
        sampler._last.clear()
        assert not sampler.ask(proc.pid, proc.pid, SLOW_READ, None)
        assert sampler.take() == []
    finally:
        sampler.close()
        proc.kill()
        proc.wait()


def test_no_reader_is_said_once_in_one_line(monkeypatch) -> None:
    monkeypatch.setenv(live_stacks.READER_ENV, "")
    assert find_reader() is None
    monkeypatch.setenv(live_stacks.READER_ENV, "/nonexistent/py-spy")
    assert find_reader() is None
    assert missing_line() == "no Python stacks: py-spy not found (pip install py-spy)"


def test_a_source_file_is_read_once_for_every_process_that_sees_it(tmp_path: Path) -> None:
    """A DataLoader forks new workers each epoch: their lines come from the one copy kept of
    the file, not one more a process."""
    src = tmp_path / "train.py"
    src.write_text("import os\nx = os.read(0, 1)\n")
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
                for _ in range(3)]
    sampler = StackSampler("py-spy", time.time_ns, lambda _: None)
    try:
        for child in children:
            assert sampler._source(child.pid, str(src), 2) == "x = os.read(0, 1)"
        assert len(sampler._sources) == 1
        assert sampler._source(children[0].pid, str(tmp_path / "gone.py"), 1) is None
    finally:
        sampler.close()
        for child in children:
            child.kill()
            child.wait()


def _row(pid: int, tid: int, role: str, reason: str, line: int, text: str | None) -> dict:
    return {"ts": 0, "taken": 0, "pid": pid, "tid": tid, "role": role, "reason": reason,
            "depth": 1, "file": "/app/train.py", "line": line, "function": "f", "user": True,
            "text": text}


def test_the_line_named_is_the_one_sampled_most() -> None:
    class Iv:  # only `code` is read
        def __init__(self, rows):
            self.code = code_samples(rows, {11: 10, 12: 10})

    ivs = [Iv([_row(11, 11, "dataloader_worker", SLOW_READ, 44, "buf = f.read()"),
               _row(12, 12, "dataloader_worker", SLOW_READ, 44, None),
               _row(10, 10, "main", DATA_WAIT, 87, "for x in loader:")]),
           Iv([_row(11, 11, "dataloader_worker", SLOW_READ, 50, "x = decode(buf)"),
               {**_row(12, 12, "dataloader_worker", SLOW_READ, 9, None), "user": False}])]
    read = code_line(ivs, 10, (SLOW_READ,), ("dataloader_worker",))
    # the function sampled most wins over a line sampled as often elsewhere
    spread = [Iv([{**_row(11, 11, "dataloader_worker", DATA_WAIT, n, None), "function": fn}
                  for n, fn in ((131, "heavy"), (132, "heavy"), (485, "train"))])]
    assert code_line(spread, 10, (DATA_WAIT,)).function == "heavy"
    # lines of one function sampled as often: the first (a save's torch.save, not its fsync)
    for lines in ((271, 267), (267, 271)):
        tie = [Iv([_row(10, 10, "main", SAVE, n, None) for n in lines])]
        assert code_line(tie, 10, (SAVE,)).line == 267
    assert read == CodeLine("/app/train.py", 44, "f", "buf = f.read()")
    assert code_line(ivs, 10, (DATA_WAIT,), ("main",), main_thread=True).line == 87
    assert code_line(ivs, 10, (DATA_WAIT,), ("main",), main_thread=False) is None
    assert code_line(ivs, 99, (SLOW_READ,)) is None
    assert at_code("The DataLoader workers read", read) == (
        " The DataLoader workers read at train.py:44 in f (`buf = f.read()`).")
    assert at_code("The loop reads", None) == ""


@needs_reader
@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a PID namespace")
def test_a_process_in_its_own_pid_namespace(tmp_path: Path) -> None:
    """A container's process: py-spy numbers its threads as its namespace does (the main
    thread is 1), iotrace by the host's; the sample is of the right thread all the same."""
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    outer = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                              sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    sampler = StackSampler(READER, time.time_ns, lambda _: None)
    jobs: list[psutil.Process] = []
    try:
        assert outer.stdout.readline().strip() == "ready"
        jobs = psutil.Process(outer.pid).children()
        (job,) = jobs
        assert live_stacks.ns_tid(job.pid, job.pid) == 1
        assert sampler.ask(job.pid, job.pid, SLOW_READ, "main")
        rows: list[dict] = []
        deadline = time.monotonic() + 30
        while not rows and time.monotonic() < deadline:
            time.sleep(0.05)
            rows = sampler.take()
    finally:
        sampler.close()
        for p in jobs:  # the namespace's init: killed from outside it
            p.kill()
        outer.kill()
        outer.wait()
    user = [r for r in rows if r["user"]]
    assert [(r["pid"], r["tid"], r["line"], r["function"]) for r in user] == [
        (job.pid, job.pid, _line_of(SCRIPT, "the line the stack is at"), "load_sample")]


def test_loops_are_sampled_where_they_wait_for_or_keep_their_gpu() -> None:
    """after_interval's reasons for a loop's interval (no dump is run: `ask` is recorded)."""
    asked: list[tuple[int, str]] = []

    class Recorded(StackSampler):
        def ask(self, pid: int, tid: int, reason: str, role: str | None) -> bool:
            asked.append((pid, reason))
            return True

    def loop(pid: int, gpu_wait: int = 0, compute: int = 0) -> dict:
        return {"pid": pid, "interval_ns": 1000, "data_wait_io_ns": 0, "data_wait_cpu_ns": 0,
                "data_wait_network_ns": 0, "sync_loading_ns": 0, "gpu_wait_ns": gpu_wait,
                "compute_ns": compute}

    sampler = Recorded("py-spy", time.time_ns, lambda _: None)
    try:
        # 1 waits for its GPU; 2 works on the host and calls CUDA; 3 works on the host
        # without CUDA (a CPU job: not `host`); 4 hardly does either
        sampler.after_interval([loop(1, gpu_wait=600, compute=300), loop(2, compute=800),
                                loop(3, compute=900), loop(4, gpu_wait=100, compute=100)],
                               {}, {}, {}, frozenset({1, 2, 4}))
    finally:
        sampler.close()
    assert asked == [(1, GPU_WAIT), (1, HOST), (2, HOST)]
