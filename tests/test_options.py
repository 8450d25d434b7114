"""TraceOptions checks itself: a Python caller gets the command line's refusals, in its words and
with its exit code, before anything is attached."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tracer.errors import EXIT_USAGE, TraceFailure
from tracer.live.options import TraceOptions, prepare_csv, prepare_output


def refusal(opts: TraceOptions) -> str:
    with pytest.raises(TraceFailure) as e:
        opts.validate()
    assert e.value.exit_code == EXIT_USAGE
    return str(e.value)


def free_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


@pytest.mark.parametrize("fields, words", [
    ({}, "nothing to trace: give --pid PID, -- CMD or --auto"),
    ({"pids": [1], "command": ["true"]}, "give one of --pid PID, -- CMD or --auto, not several"),
    ({"command": ["true"], "match": "x"}, "--match works with --auto"),
    ({"auto": True, "match": "("}, "--match '(' is not a valid regular expression"),
    ({"auto": True, "prometheus": "host:port"}, "the port must be a number"),
    ({"auto": True, "gpu": "all"}, "--gpu 'all': give auto, off, or GPU indices"),
    ({"auto": True, "interval_s": 0.0}, "--interval must be greater than 0"),
    ({"auto": True, "duration_s": float("inf")}, "--duration must be at most 1e+09"),
    ({"auto": True, "slow_ms": 1e30}, "--slow-ms must be at most 8.64e+07"),
    ({"auto": True, "bpf_stats": "never"}, "--bpf-stats 'never'"),
    ({"pids": [os.getpid()]}, "is iotrace itself"),
    ({"command": ["/nonexistent/cmd"]}, "cannot execute '/nonexistent/cmd'"),
])
def test_the_command_lines_refusals(fields, words):
    assert words in refusal(TraceOptions(output=Path("t"), **fields))


def test_no_such_pid():
    pid = free_pid()
    assert f"no process with PID {pid}" in refusal(TraceOptions(output=Path("t"), pids=[pid]))


def test_a_listen_address_is_parsed():
    opts = TraceOptions(output=Path("t"), auto=True, prometheus="9473")
    opts.validate()
    assert opts.prometheus == ("127.0.0.1", 9473)


def test_a_session_checks_its_options():
    """Session (run_trace, the demo) refuses bad options before it loads anything."""
    from tracer.live.session import Session

    with pytest.raises(TraceFailure, match="not several"):
        Session(TraceOptions(output=Path("t"), pids=[1], command=["true"]), None, None)


def test_the_output_and_csv_are_made_new(tmp_path):
    out = prepare_output(str(tmp_path / "t"))
    assert out.is_dir() and out.stat().st_mode & 0o777 == 0o700
    (out / "x").write_text("")
    with pytest.raises(TraceFailure, match="is not empty"):
        prepare_output(str(out))
    csv = prepare_csv(str(tmp_path / "n.csv"))
    with pytest.raises(TraceFailure, match="exists: choose a new file"):
        prepare_csv(str(csv))


def test_checked_makes_nothing_for_bad_options(tmp_path):
    """As the command line: the options are checked before the trace directory is made."""
    with pytest.raises(TraceFailure, match="--gpu 'all'"):
        TraceOptions.checked(output=tmp_path / "t", csv=tmp_path / "n.csv", auto=True, gpu="all")
    assert not any(tmp_path.iterdir())
