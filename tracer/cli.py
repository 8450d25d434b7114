"""The `iotrace` command: parse, validate, delegate. One clear line and an exit code per bad input.

Exit codes (README, "Exit codes"): 0 success, 2 bad usage or input, 3 the host cannot trace, 1 a bug;
and 4 (tracer.errors.EXIT_OUTPUT) when the trace directory fills up or fails while tracing;
after a trace of `-- CMD`, CMD's status (its code, or 128 + its signal), as the README says.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from tracer.core.version import __version__
from tracer.errors import EXIT_BUG, EXIT_HOST, EXIT_OK, EXIT_USAGE, TraceFailure, drop_output
from tracer.kernel.host import tracing_problem
from tracer.live.options import (
    MOST_SECONDS,
    SLOW_MS_MAX,
    TraceOptions,
    number_problem,
    prepare_output,
)

SUBCOMMANDS = ("doctor", "demo", "report", "export", "mcp")

USAGE = """\
iotrace --pid PID [PID ...] [options]     attach to running processes and their descendants
iotrace [options] -- CMD [ARG ...]         start CMD and trace it from its first instruction
iotrace doctor | iotrace demo | iotrace report DIR | iotrace export DIR --perfetto OUT.json
iotrace mcp [DIR ...]                      serve traces to an AI assistant (Model Context Protocol)"""


class UsageError(Exception):
    """Bad usage or input: one line for the user, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage dump
        raise UsageError(f"{message} (see iotrace --help)")


def _positive(name: str, allow_zero: bool = False, most: float = MOST_SECONDS):
    """`most`: the largest value taken (a finite number of seconds or milliseconds that the
    kernel's u64 nanoseconds and meta.json's JSON can hold), so that nothing fails after
    attaching."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be a number, not {text!r}") from None
        problem = number_problem(name, v, text, allow_zero=allow_zero, most=most)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return v

    return parse


def _pid(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a PID (a positive integer)")
    return int(text)


def trace_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="iotrace", usage=USAGE, description=(
        "Trace the I/O of a PyTorch job (or any process) in the kernel with eBPF: syscall and "
        "block latency histograms per process, saved as Parquet."))
    p.add_argument("--pid", nargs="+", type=_pid, default=[], metavar="PID",
                   help="attach to these running processes and every process they fork")
    p.add_argument("-d", "--duration", type=_positive("--duration"), metavar="S",
                   help="stop after S seconds (default: when the targets exit, or Ctrl-C)")
    p.add_argument("-i", "--interval", type=_positive("--interval"), default=1.0, metavar="S",
                   help="seconds between snapshots of the in-kernel counters (default 1)")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="trace directory (default ./iotrace-YYYYmmdd-HHMMSS); must be new or empty")
    p.add_argument("--slow-ms", type=_positive("--slow-ms", most=SLOW_MS_MAX), default=10.0, metavar="MS",
                   help="record each operation slower than MS milliseconds as an event (default 10)")
    p.add_argument("--auto", action="store_true",
                   help="trace every PyTorch training job on the host as it appears: a process "
                        "that starts DataLoader workers or runs torchrun (pt_elastic)")
    p.add_argument("--match", metavar="REGEX",
                   help="with --auto, also trace processes whose command line matches REGEX")
    p.add_argument("--prometheus", metavar="[HOST:]PORT",
                   help="serve Prometheus metrics on HOST:PORT (host 127.0.0.1 unless given; "
                        "9473 is iotrace's usual port)")
    p.add_argument("--otlp", metavar="URL",
                   help="push the metrics --prometheus serves (with it or without it) every "
                        "interval to an OpenTelemetry collector's OTLP/HTTP receiver at URL "
                        "(e.g. http://127.0.0.1:4318; needs pip install 'iotrace[otlp]')")
    p.add_argument("--gpu", default="auto", metavar="auto|off|N[,N]",
                   help="sample GPU utilisation through NVML: auto (when a GPU and NVML exist), "
                        "off, or the GPU indices to sample (fails when there is no such GPU)")
    p.add_argument("--no-tui", action="store_true",
                   help="no live view: one line per interval instead (implied when stdout is not "
                        "a terminal)")
    p.add_argument("--csv", metavar="FILE",
                   help="also write per-interval system, device and process numbers as CSV "
                        "to FILE, which must not exist yet")
    p.add_argument("--redact-paths", action="store_true",
                   help="hash names in every output (the trace, the summary, the live view): "
                        "paths, command-line words but option names and launchers such as "
                        "python3, process names but PyTorch's; not the traced command's own "
                        "output (command.log)")
    p.add_argument("--bpf-stats", choices=("sampled", "always", "off"), default="sampled",
                   help="count iotrace's own BPF programs' runs and time (the kernel's BPF stats): "
                        "during 2 %% of every interval (sampled, the default), the whole run "
                        "(always: exact counts, but the kernel's clock reads add about 80 ns "
                        "to every program run), or not at all")
    p.add_argument("--version", action="version", version=f"iotrace {__version__}")
    return p


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _system_allocator_for_pyarrow() -> None:
    """The tracer's pyarrow allocates from the C library's malloc, not from its own mimalloc,
    which keeps what writing and merging segments freed: 10-20 MiB of the tracer's peak RSS
    (docs/benchmarks.md). pyarrow reads the choice once, from the environment, when it makes
    its first pool; the variable is gone again before the traced command inherits it."""
    name = "ARROW_DEFAULT_MEMORY_POOL"
    if name in os.environ or "pyarrow" in sys.modules:
        return
    os.environ[name] = "system"
    try:
        import pyarrow

        pyarrow.default_memory_pool()
    finally:
        del os.environ[name]


def cmd_trace(argv: list[str]) -> int:
    _system_allocator_for_pyarrow()
    from tracer.live.session import run_trace

    opts_argv, command = _split_command(argv)
    if "--pid" in opts_argv:
        i = opts_argv.index("--pid")
        if i + 1 >= len(opts_argv) or opts_argv[i + 1].startswith("-"):
            raise UsageError("--pid needs at least one PID (did $(pgrep ...) match nothing? "
                             "check the job is running)")
    args = trace_parser().parse_args(opts_argv)
    if "--" in argv and not command:
        raise UsageError("nothing after --: give the command to start, e.g. iotrace -- python "
                         "train.py")
    # The options' own checks, the host's, then the trace directory and the CSV file made
    opts = TraceOptions.checked(output=args.output, csv=args.csv, pids=args.pid, command=command,
                                duration_s=args.duration, interval_s=args.interval,
                                slow_ms=args.slow_ms, auto=args.auto, match=args.match,
                                prometheus=args.prometheus, otlp=args.otlp,
                                tui=sys.stdout.isatty() and not args.no_tui, gpu=args.gpu,
                                redact_paths=args.redact_paths, bpf_stats=args.bpf_stats,
                                argv=["iotrace", *argv])
    return run_trace(opts)


def cmd_doctor(argv: list[str]) -> int:
    from tracer.doctor import doctor

    _Parser(prog="iotrace doctor", description="Check what this host supports.").parse_args(argv)
    return doctor(sys.stdout)


def cmd_demo(argv: list[str]) -> int:
    from tracer.demo import default_output, run_demo

    p = _Parser(prog="iotrace demo", description=(
        "Train a small PyTorch model in four configurations (no workers, I/O-bound workers, "
        "CPU-bound workers, synchronous checkpoints) on a cold, throttled dataset; trace each "
        "and print the verdict."))
    p.add_argument("-o", "--output", metavar="DIR", help="where the traces go (a new directory)")
    args = p.parse_args(argv)
    problem = tracing_problem()
    if problem:
        raise TraceFailure(problem, EXIT_HOST)
    out = prepare_output(args.output or str(default_output()))
    return run_demo(out)


def cmd_report(argv: list[str]) -> int:
    from tracer.report import report, report_nodes

    p = _Parser(prog="iotrace report", description="Summarise a trace directory (text, --html, "
                "--json); several: one distributed job traced on each of its nodes.")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("more", metavar="DIR", nargs="*",
                   help="more trace directories of the same job, one per node")
    p.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML report with plots")
    p.add_argument("--json", action="store_true", help="print the summary and findings as JSON")
    p.add_argument("--histograms", action="store_true",
                   help="add the latency histograms per process and layer to the text summary")
    args = p.parse_args(argv)
    if args.histograms and (args.html or args.json):
        raise UsageError("--histograms is for the text summary: --html and --json hold the "
                         "latency percentiles already; leave one out")
    if args.more:
        if args.html or args.json:
            raise UsageError("--html and --json take one trace directory: give one DIR")
        return report_nodes([args.directory, *args.more], sys.stdout, args.histograms)
    if not (args.html or args.json):
        return report(args.directory, sys.stdout, args.histograms)
    import json

    from tracer.api import TraceError, load
    from tracer.render.html import gpu_idle_json, summary_json, write_html
    from tracer.report import recompute_gpu, trace_training_since

    try:
        trace = load(args.directory)
        gpu = recompute_gpu(trace)  # DIR/gpu_idle from DIR/gpu, as the text report does
        if args.html:
            try:
                path = write_html(trace, args.html, trace_training_since(trace))
            except ImportError as e:
                raise UsageError(str(e)) from None
            except OSError as e:
                raise UsageError(f"cannot write {args.html}: {e.strerror}: choose another --html "
                                 "path") from None
            print(f"Report written to {path}", file=sys.stderr)  # stdout stays pure for --json
        if args.json:
            summary = summary_json(trace)
            if gpu is not None:
                summary["gpu_idle"] = gpu_idle_json(trace)
            json.dump(summary, sys.stdout, indent=2, allow_nan=False)
            print()
    except TraceError as e:
        raise UsageError(str(e)) from None
    return EXIT_OK


def cmd_export(argv: list[str]) -> int:
    p = _Parser(prog="iotrace export", description=(
        "Write a trace as Chrome trace JSON for ui.perfetto.dev / chrome://tracing, optionally "
        "merged into a PyTorch profiler (Kineto) trace."))
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--perfetto", required=True, metavar="OUT.json",
                   help="the Chrome trace JSON to write (.json.gz: compressed)")
    p.add_argument("--merge", metavar="KINETO.json",
                   help="add iotrace's tracks into this torch.profiler trace, aligned by wall clock")
    args = p.parse_args(argv)
    from tracer.api import TraceError, load
    from tracer.render.perfetto import KinetoError, export_perfetto

    try:
        path = export_perfetto(load(args.directory), args.perfetto, merge=args.merge)
    except (TraceError, KinetoError) as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot write {args.perfetto}: {e.strerror or e}") from None
    print(f"Perfetto trace written to {path}", file=sys.stderr)
    return EXIT_OK


def cmd_mcp(argv: list[str]) -> int:
    p = _Parser(prog="iotrace mcp", description=(
        "Serve trace directories to an AI assistant over the Model Context Protocol (stdio): "
        "findings, the loop's time, GPU idle, top files, disks, read-only SQL."))
    p.add_argument("directories", metavar="DIR", nargs="*",
                   help="trace directories (default: those in the current directory)")
    p.add_argument("--http", metavar="[HOST:]PORT",
                   help="serve streamable HTTP on HOST:PORT instead of stdio (host 127.0.0.1 "
                        "unless given)")
    args = p.parse_args(argv)
    from pathlib import Path

    from tracer.api import TraceError
    from tracer.mcp_server import found_here, missing_packages, parse_http, serve

    try:
        http = parse_http(args.http) if args.http is not None else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    # An optional extra not installed is the user's to install, as for --html without
    # matplotlib: bad usage or input (2), not a host that cannot trace (3).
    missing = missing_packages()
    if missing:
        raise UsageError(missing)
    directories = args.directories or found_here(Path.cwd())
    if not directories:
        raise UsageError("no trace directory here: give one or more, iotrace mcp DIR [DIR ...]")
    try:
        return serve(directories, http)
    except TraceError as e:
        raise UsageError(str(e)) from None


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"iotrace: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    warnings.showwarning = _one_line_warning
    try:
        head = _split_command(argv)[0]
        if head and head[0] in SUBCOMMANDS:
            commands = {"doctor": cmd_doctor, "demo": cmd_demo, "report": cmd_report,
                        "export": cmd_export, "mcp": cmd_mcp}
            return commands[head[0]](argv[1:])
        return cmd_trace(argv)
    except UsageError as e:
        print(f"iotrace: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except TraceFailure as e:
        print(f"iotrace: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("iotrace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `iotrace report DIR | head`: the reader had what it wanted
        drop_output(sys.stdout)
        return EXIT_OK
    except Exception as e:  # a bug: say so in one line; the traceback only on request
        if os.environ.get("IOTRACE_DEBUG"):
            raise
        print(f"iotrace: internal error: {type(e).__name__}: {e} (rerun with IOTRACE_DEBUG=1 "
              "for the traceback, and please report it)", file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
