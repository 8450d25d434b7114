"""Every bad input: one clear line on stderr, a distinct exit code, no traceback."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import IOTRACE, ROOT, needs_root, run_iotrace
from tracer.kernel.host import privilege_problem
from tracer.kernel.loader import BPF_DIR, OBJECT
from tracer.live.stacks import READER_ENV, find_reader, missing_line

USAGE, HOST = 2, 3
# Checked after the privileges: without them iotrace says so first (exit 3).
PAST_PRIVILEGES = [needs_root, pytest.mark.kernel]


def one_line_error(r: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("iotrace: error: ")
    assert "Traceback" not in r.stderr + r.stdout
    for w in words:
        assert w in lines[0], lines[0]


def without_privileges(*setpriv_args: str) -> list[str]:
    """The prefix that runs a command without the privileges to trace: none where this process
    has none already (the unit tests as any user), else `setpriv SETPRIV_ARGS` (as root)."""
    if privilege_problem():
        return []
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("dropping the privileges to trace needs root and setpriv (util-linux)")
    return ["setpriv", *setpriv_args]


def free_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


@pytest.mark.parametrize("args, code, words", [
    (["--pid"], USAGE, ["--pid needs at least one PID"]),
    (["--pid", "-d", "1"], USAGE, ["--pid needs at least one PID"]),
    (["--pid", "abc"], USAGE, ["'abc' is not a PID"]),
    ([], USAGE, ["nothing to trace"]),
    (["--"], USAGE, ["nothing after --"]),
    (["--pid", "1", "--", "true"], USAGE, ["not several"]),
    (["--match", "x", "--", "true"], USAGE, ["--match works with --auto"]),
    (["--auto", "--match", "("], USAGE, ["not a valid regular expression"]),
    (["-i", "0", "--", "true"], USAGE, ["--interval must be greater than 0"]),
    (["-i", "-1", "--", "true"], USAGE, ["--interval"]),
    (["-d", "-5", "--", "true"], USAGE, ["--duration must be greater than 0"]),
    (["--bogus", "--", "true"], USAGE, ["unrecognized arguments: --bogus"]),
    (["--", "/nonexistent/cmd"], USAGE, ["cannot execute '/nonexistent/cmd'"]),
    (["--", "no-such-command-xyz"], USAGE, ["cannot execute 'no-such-command-xyz'"]),
    pytest.param(["-o", "/proc/iotrace-out", "--", "true"], USAGE,
                 ["cannot write the output directory"], marks=PAST_PRIVILEGES),
    # Checked before anything is attached (they failed after `Tracing`, the job untraced):
    (["-i", "inf", "--", "true"], USAGE, ["--interval must be at most"]),
    (["-d", "inf", "--", "true"], USAGE, ["--duration must be at most"]),
    (["--slow-ms", "1e30", "--", "true"], USAGE, ["--slow-ms must be at most"]),
    pytest.param(["-o", "", "--", "true"], USAGE, ["-o '' names no directory"],
                 marks=PAST_PRIVILEGES),
])
def test_bad_usage(args, code, words):
    one_line_error(run_iotrace(*args), code, *words)


def test_no_such_pid():
    pid = free_pid()
    one_line_error(run_iotrace("--pid", str(pid)), USAGE, f"no process with PID {pid}")


@needs_root
@pytest.mark.kernel
def test_output_not_empty(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    one_line_error(run_iotrace("-o", str(tmp_path), "--", "true"), USAGE, "is not empty")
    assert os.listdir(tmp_path) == ["old.txt"]  # nothing touched


@needs_root
@pytest.mark.kernel
def test_csv_that_cannot_be_written(tmp_path):
    out = tmp_path / "t"
    r = run_iotrace("-o", str(out), "--csv", "/proc/iotrace.csv", "--", "true")
    one_line_error(r, USAGE, "cannot write --csv /proc/iotrace.csv")
    assert "Tracing" not in r.stderr  # refused before the job started


@needs_root
@pytest.mark.kernel
def test_csv_is_not_overwritten(tmp_path):
    csv = tmp_path / "numbers.csv"
    csv.write_text("keep me\n")
    one_line_error(run_iotrace("-o", str(tmp_path / "t"), "--csv", str(csv), "--", "true"),
                   USAGE, f"--csv {csv} exists")
    assert csv.read_text() == "keep me\n"


@needs_root
@pytest.mark.kernel
def test_output_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    one_line_error(run_iotrace("-o", str(f), "--", "true"), USAGE, "not a directory")


def test_report_of_missing_trace(tmp_path):
    one_line_error(run_iotrace("report", str(tmp_path / "none")), USAGE)


@needs_root
@pytest.mark.kernel
def test_no_btf(tmp_path):
    r = run_iotrace("-o", str(tmp_path / "t"), "--", "true",
                    env={**os.environ, "IOTRACE_BTF": "/nonexistent/vmlinux"})
    one_line_error(r, HOST, "/nonexistent/vmlinux is missing", "BTF")


@needs_root
@pytest.mark.kernel
def test_no_libbpf(tmp_path):
    r = run_iotrace("-o", str(tmp_path / "t"), "--", "true",
                    env={**os.environ, "IOTRACE_LIBBPF": "/nonexistent/libbpf.so.1"})
    one_line_error(r, HOST, "cannot load /nonexistent/libbpf.so.1", "libbpf")


def test_not_root():
    prefix = without_privileges("--reuid=65534", "--regid=65534", "--clear-groups",
                                "--inh-caps=-all")
    scratch = tempfile.mkdtemp(prefix="iotrace-nonroot-", dir="/tmp")
    os.chmod(scratch, 0o777)
    out = os.path.join(scratch, "t")
    r = subprocess.run([*prefix, *IOTRACE, "-o", str(out), "--", "true"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    one_line_error(r, HOST, "without CAP_BPF and CAP_PERFMON", "root")
    assert not os.path.exists(out)  # nothing created when the host cannot trace
    shutil.rmtree(scratch)


@needs_root
@pytest.mark.kernel
def test_doctor_says_host_can_trace():
    r = run_iotrace("doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "This host can trace" in r.stdout
    for name in ("privileges", "BTF", "libbpf", "ring buffer", "load+attach", "NVML"):
        assert name in r.stdout
    if find_reader() is not None:
        assert re.search(r"^  ok  Python stacks +py-spy \d", r.stdout, re.M), r.stdout
    r = run_iotrace("doctor", env={**os.environ, READER_ENV: ""})
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"   -  Python stacks   {missing_line()}: findings name no line of code" in r.stdout


@needs_root
@pytest.mark.kernel
def test_doctor_without_btf_fails_clearly():
    r = run_iotrace("doctor", env={**os.environ, "IOTRACE_BTF": "/nonexistent/vmlinux"})
    assert r.returncode == HOST
    assert "FAIL  BTF" in r.stdout and "Traceback" not in r.stdout + r.stderr


@needs_root
@pytest.mark.kernel
def test_command_that_fails_to_exec(tmp_path):
    """Found and executable, but the kernel refuses it: reported after the exec attempt."""
    bogus = tmp_path / "not-a-program"
    bogus.write_bytes(b"\x00\x01garbage")
    bogus.chmod(0o755)
    one_line_error(run_iotrace("-o", str(tmp_path / "t"), "--", str(bogus)), USAGE,
                   f"cannot execute '{bogus}'", "Exec format error")


def test_report_of_one_trace_given_twice(tmp_path):
    """Joining nodes' traces: the same trace twice (or a copy of it) would count its ranks
    twice."""
    from tracer.sinks.parquet import TraceWriter

    (tmp_path / "node0").mkdir()
    with TraceWriter(tmp_path / "node0", {"host": "n0", "start_ns": 1_700_000_000_000_000_000}):
        pass
    shutil.copytree(tmp_path / "node0", tmp_path / "copy")
    for second in ("node0", "copy"):
        one_line_error(run_iotrace("report", str(tmp_path / "node0"), str(tmp_path / second)),
                       USAGE, "are the same trace", "give each node's trace once")


def test_report_json_and_html_of_a_bad_directory(tmp_path):
    one_line_error(run_iotrace("report", str(tmp_path / "none"), "--json"), USAGE)
    one_line_error(run_iotrace("report", str(tmp_path / "none"), "--html", str(tmp_path / "x.html")),
                   USAGE)


def test_report_histograms_is_for_the_text(tmp_path):
    for other in (["--json"], ["--html", str(tmp_path / "x.html")]):
        one_line_error(run_iotrace("report", str(tmp_path), "--histograms", *other), USAGE,
                       "--histograms is for the text summary")


def test_export_bad_input(tmp_path):
    one_line_error(run_iotrace("export", str(tmp_path / "none"), "--perfetto",
                               str(tmp_path / "o.json")), USAGE)
    one_line_error(run_iotrace("export", str(tmp_path)), USAGE, "--perfetto")


ZOMBIE_PARENT = """
import os, time
pid = os.fork()
if pid == 0:
    os._exit(0)
while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.01)
print(pid, flush=True)
time.sleep(600)
"""


@pytest.fixture
def zombie():
    """A child that has exited and that its parent does not reap."""
    parent = subprocess.Popen([sys.executable, "-c", ZOMBIE_PARENT], stdout=subprocess.PIPE,
                              text=True)
    yield int(parent.stdout.readline())
    parent.kill()
    parent.wait()


def test_pid_of_a_zombie(zombie):
    r = run_iotrace("--pid", str(zombie))
    one_line_error(r, USAGE, f"PID {zombie} has exited", "nothing to trace")
    assert "Finding" not in r.stdout


@needs_root
@pytest.mark.kernel
def test_pid_that_exits_while_attaching_traces_nothing(zombie, tmp_path):
    """Past the command line's check (the process exits between it and attaching): no trace of
    nothing, no verdict, a usage failure."""
    from tracer.errors import TraceFailure
    from tracer.live.session import TraceOptions, run_trace

    out = tmp_path / "t"
    out.mkdir()
    with pytest.raises(TraceFailure) as e:
        run_trace(TraceOptions(output=out, pids=[zombie], bpf_stats="off"))
    assert e.value.exit_code == USAGE
    assert "nothing traced" in str(e.value)
    assert not any(out.iterdir())


@needs_root
@pytest.mark.kernel
def test_pid_that_exits_right_after_the_attach_is_not_judged(tmp_path):
    """A target that exits as soon as iotrace traces it leaves no training loop to judge: not
    `not_io_bound` and exit 0 (a verdict from nothing) but "nothing traced long enough to
    judge", exit 2; the trace is kept, and `iotrace report` says the same."""
    job = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                           stdin=subprocess.PIPE)
    out = tmp_path / "t"
    tracer = subprocess.Popen([*IOTRACE, "--pid", str(job.pid), "-o", str(out), "--no-tui"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        line = tracer.stderr.readline()
        assert line.startswith("Tracing"), line + tracer.stderr.read()
        job.stdin.close()  # the job ends now
        job.wait(timeout=10)
        stdout, stderr = tracer.communicate(timeout=60)
    finally:
        for p in (tracer, job):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert tracer.returncode == USAGE, (stdout, stderr)
    (error,) = stderr.strip().splitlines()
    assert error.startswith("iotrace: error: nothing traced long enough to judge: ")
    assert f"PID {job.pid} exited right after iotrace attached" in error
    assert "Traceback" not in stdout + stderr
    assert "Findings: none, nothing traced long enough to judge" in stdout
    assert "not_io_bound" not in stdout
    assert (out / "meta.json").exists()
    r = run_iotrace("report", str(out))
    assert r.returncode == 0, r.stderr
    assert "Findings: none, nothing traced long enough to judge" in r.stdout


def test_doctor_without_privilege_does_not_blame_the_kernel():
    """Without the capabilities (root with none left, or any other user): bpf() is refused, so
    a probe that creates a map fails as on a kernel without the feature; the doctor must blame
    the privilege only."""
    prefix = without_privileges("--bounding-set=-all", "--inh-caps=-all")
    if not (BPF_DIR / OBJECT).exists():
        pytest.skip("no BPF objects (make build): the doctor would blame them too")
    r = subprocess.run([*prefix, *IOTRACE, "doctor"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == HOST, r.stdout + r.stderr
    assert "FAIL  privileges" in r.stdout
    failed = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1, r.stdout
    assert "upgrade the kernel" not in r.stdout and "kernel < 5.8)" not in r.stdout
    assert "fix privileges (see above)" in r.stdout


@pytest.mark.kernel
@needs_root
def test_report_into_a_closed_pipe(tmp_path):
    """`iotrace report DIR | head -2`: the reader leaves early; no error, no traceback."""
    out = tmp_path / "trace"
    assert run_iotrace("-o", str(out), "--", "true").returncode == 0
    r = subprocess.run(f"{' '.join(IOTRACE)} report {out} | head -2; exit ${{PIPESTATUS[0]}}",
                       shell=True, executable="/bin/bash", cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert len(r.stdout.splitlines()) == 2
    assert r.returncode == 0 and "error" not in r.stderr, r.stderr
