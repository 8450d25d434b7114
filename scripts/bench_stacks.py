"""What reading Python stacks costs, and which reader: py-spy against pystack.

    .venv/bin/python scripts/bench_stacks.py [--dumps 20] [--rounds 2] [--pystack DIR]

1. The readers on a live job: each reader dumps a running DataLoader job's main process and a
   worker `--dumps` times; per dump its wall time and its CPU (wait4's rusage), and whether its
   output parses. Readers: `py-spy dump --json --nonblocking` (what iotrace runs), `py-spy dump
   --json` (it stops the process while it reads), and `pystack remote --no-block` when pystack
   is importable (`--pystack DIR`: a folder to add to PYTHONPATH for it, e.g. one made with
   `pip install --target DIR pystack`).
2. Whether a reader stops the job: during each dump, the state of the dumped process's main
   thread is read from /proc every 0.2 ms; the time it was seen stopped (`t`: a reader
   attached with ptrace) is summed per dump.
3. What the stacks cost a traced job: scenarios (tracer.workloads.scenarios) launched by
   `iotrace -- ...`, with stacks and without (IOTRACE_PYSPY= set empty), the order
   alternating per round: the job's seconds per epoch from its own lines, and, with stacks,
   py-spy's CPU as iotrace reports it (meta.json `python_stacks.cpu_s`) against the job's
   CPU in the same trace (the `threads` table's on-CPU time of every traced thread).

Prints a table; writes nothing else. Read docs/benchmarks.md for what was measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracer.core.stacks import parse_dump  # noqa: E402
from tracer.live.stacks import find_reader  # noqa: E402
from tracer.workloads.scenarios import parse_output, prepare  # noqa: E402


def stopped(pid: int, done: threading.Event, seen: list[float]) -> None:
    """Polls the state of process `pid`'s main thread every 0.2 ms until `done`: appends the
    time (s) it was seen stopped (`t`, traced: a reader attached with ptrace)."""
    path = f"/proc/{pid}/stat"
    since = None
    while not done.is_set():
        try:
            with open(path) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        now = time.perf_counter()
        if state in "tT" and since is None:
            since = now
        elif state not in "tT" and since is not None:
            seen.append(now - since)
            since = None
        time.sleep(0.0002)
    if since is not None:
        seen.append(time.perf_counter() - since)


def timed(argv: list[str], env: dict | None = None, watch: int | None = None
          ) -> tuple[float, float, int, str, float]:
    """(wall s, CPU s, exit code, stdout, s the process `watch` was seen stopped) of one run."""
    seen: list[float] = []
    done = threading.Event()
    poller = threading.Thread(target=stopped, args=(watch, done, seen)) if watch else None
    if poller:
        poller.start()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.stdout.close()
    done.set()
    if poller:
        poller.join()
    return (wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status), out,
            sum(seen))


def readers(pyspy: str, pystack: str | None) -> dict[str, tuple[list[str], dict | None]]:
    out = {"py-spy --nonblocking": ([pyspy, "dump", "--json", "--nonblocking", "--pid"], None),
           "py-spy (stops it)": ([pyspy, "dump", "--json", "--pid"], None)}
    env = dict(os.environ, PYTHONPATH=pystack) if pystack else None
    probe = subprocess.run([sys.executable, "-c", "import pystack"], env=env, capture_output=True)
    if probe.returncode == 0:
        out["pystack --no-block"] = ([sys.executable, "-m", "pystack", "remote", "--no-block"], env)
    return out


def parses(name: str, text: str) -> bool:
    if name.startswith("py-spy"):
        try:
            return bool(parse_dump(text))
        except ValueError:
            return False
    return "Traceback for thread" in text  # pystack prints text only


def compare_readers(args, pyspy: str) -> None:
    sc = prepare("dataloader_io_bound", Path(tempfile.mkdtemp(prefix="bench-stacks-")))
    try:
        run = sc.start(ready=True, extra_args=["--epochs", "4"])
        run.go()
        time.sleep(4)
        kids = psutil.Process(run.pid).children()
        pids = [run.pid, kids[0].pid]
        print("| reader | wall ms per dump (median, max) | CPU ms per dump (median) | "
              "job seen stopped, ms per dump (median, max) | output parsed |")
        print("|---|---|---|---|---|")
        for name, (argv, env) in readers(pyspy, args.pystack).items():
            walls, cpus, stops, ok = [], [], [], 0
            for i in range(args.dumps):
                pid = pids[i % 2]
                wall, cpu, code, out, stop = timed([*argv, str(pid)], env, watch=pid)
                walls.append(wall)
                cpus.append(cpu)
                stops.append(stop)
                ok += code == 0 and parses(name, out)
            print(f"| {name} | {1e3 * statistics.median(walls):.1f}, {1e3 * max(walls):.1f} | "
                  f"{1e3 * statistics.median(cpus):.1f} | {1e3 * statistics.median(stops):.1f}, "
                  f"{1e3 * max(stops):.1f} | {ok}/{args.dumps} |")
        run.proc.terminate()
        run.proc.wait(60)
    finally:
        sc.cleanup()


def traced(name: str, stacks: bool, workdir: Path, out: Path) -> tuple[float, float, float]:
    """(job seconds per epoch, py-spy CPU s, the job's CPU s) of one launched, traced run."""
    sc = prepare(name, workdir)
    try:
        sc.prepare_cache()
        env = dict(sc.env)
        if not stacks:
            env["IOTRACE_PYSPY"] = ""
        done = subprocess.run([sys.executable, "-m", "tracer.cli", "-o", str(out), "--",
                               *sc.argv], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        sc.cleanup()
    job = parse_output(0, done.stdout, done.stderr)
    per_epoch = sum(e[2] for e in job.epochs) / len(job.epochs)
    meta = json.loads((out / "meta.json").read_text())
    spy = (meta.get("python_stacks") or {}).get("cpu_s", 0.0)
    job_cpu = pd.read_parquet(out / "threads").oncpu_ns.sum() / 1e9
    return per_epoch, spy, job_cpu


def cost(args) -> None:
    print("\n| scenario | round | epoch s, no stacks | epoch s, stacks | ratio | py-spy CPU s "
          "| job CPU s | py-spy / job CPU % |\n|---|---|---|---|---|---|---|---|")
    for name in args.scenarios:
        work = Path(tempfile.mkdtemp(prefix="bench-stacks-"))
        for r in range(args.rounds):
            got = {}
            for stacks in ((False, True) if r % 2 == 0 else (True, False)):
                got[stacks] = traced(name, stacks, work / "data", work / f"t{r}{int(stacks)}")
            (off, _, _), (on, spy, cpu) = got[False], got[True]
            print(f"| {name} | {r + 1} | {off:.2f} | {on:.2f} | {on / off:.3f} | {spy:.2f} | "
                  f"{cpu:.1f} | {100 * spy / cpu:.2f} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dumps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--pystack", default=None, metavar="DIR")
    p.add_argument("--scenarios", nargs="*", default=["dataloader_io_bound", "dataloader_cpu_bound"])
    p.add_argument("--skip-readers", action="store_true")
    args = p.parse_args()
    pyspy = find_reader()
    if pyspy is None:
        print("py-spy is not installed (pip install py-spy)", file=sys.stderr)
        return 2
    if not args.skip_readers:
        compare_readers(args, pyspy)
    cost(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
