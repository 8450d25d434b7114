"""The container of Dockerfile.privileged, built with podman here (scripts/container-image.sh:
a Debian base made from Debian's packages, no image registry), run privileged with the host's
PID namespace as README and docs/container.md say: it traces a job started outside it by its
host PID, and one in a PID namespace of its own, with the exact counts of tests/test_kernel_exact.py
and the PIDs that namespace sees in `ns_pid`.

The image is built once per content of the tree (its tag is the hash of the build context):
about two minutes when none is there, seconds when it is.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from test_kernel_exact import PAGE, check_trace, prime, workload_args

from conftest import EXACT, ROOT, needs_root, unseen, warm

pytestmark = [needs_root, pytest.mark.kernel]

PODMAN = [str(ROOT / "scripts/podman.sh")]
IMAGE_SCRIPT = ROOT / "scripts/container-image.sh"
BASE_IMAGE = "localhost/iotrace-base:bookworm"
# How Dockerfile.privileged's header and docs/container.md run the image (the host's network:
# nothing to set up, as the DaemonSet's hostNetwork).
RUN = ["run", "--rm", "--privileged", "--pid=host", "--network=host"]


def podman(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> str:
    """The image of this tree: the one built before, or built now (skips, saying why, where
    podman or what builds the base is missing)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (`make container` installs it and builds the image)")
    if Path("/sys/fs/cgroup/unified/cgroup.controllers").exists() and shutil.which("runc") is None:
        pytest.skip("cgroup v1 with a cgroup2 hierarchy beside it, where crun starts no container, "
                    "and no runc (`make container` installs it)")
    tag = subprocess.run([str(IMAGE_SCRIPT), "--tag"], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.strip()
    if podman("image", "exists", tag).returncode == 0:
        return tag
    if podman("image", "exists", BASE_IMAGE).returncode != 0 and shutil.which("mmdebstrap") is None:
        pytest.skip(f"no {BASE_IMAGE} and no mmdebstrap to make it (`make container`)")
    built = subprocess.run([str(IMAGE_SCRIPT)], capture_output=True, text=True, timeout=900,
                           cwd=ROOT)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return tag


def trace_in_container(image: str, pid: int, out: Path) -> subprocess.Popen:
    """`iotrace --pid PID` in the container, the trace directory bind-mounted at out/trace;
    returns once it says it is tracing."""
    out.mkdir()
    tracer = subprocess.Popen([*PODMAN, *RUN, "-v", f"{out}:/out", image, "--pid", str(pid),
                               "-o", "/out/trace", "--no-tui", *EXACT],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = tracer.stderr.readline()
    if not line.startswith("Tracing"):
        tracer.kill()
        pytest.fail(line + tracer.communicate(timeout=30)[1])
    return tracer


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def test_image_runs_doctor(image):
    r = podman(*RUN, image, "doctor", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "This host can trace with iotrace." in r.stdout, r.stdout
    # the wheel's object, not a checkout: the image holds no source tree
    assert "/opt/iotrace/lib/python3.11/site-packages/tracer/bpf/iotrace.bpf.o" in r.stdout


def test_container_traces_a_host_job_by_its_pid(image, iowork, data_file, tmp_path):
    prime(iowork, data_file)
    ready_r, ready_w = os.pipe()
    work = subprocess.Popen([str(iowork), *workload_args(data_file), "--wait-signal",
                             "--ready-fd", str(ready_w)], pass_fds=(ready_w,))
    os.close(ready_w)
    tracer = None
    try:
        assert os.read(ready_r, 1) == b"r"
        tracer = trace_in_container(image, work.pid, tmp_path / "out")
        warm(data_file)
        work.send_signal(signal.SIGUSR1)
        assert work.wait(timeout=30) == 0
        _, stderr = tracer.communicate(timeout=60)  # ends by itself: its target exited
        assert tracer.returncode == 0, stderr
    finally:
        os.close(ready_r)
        for p in (work, tracer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    check_trace(tmp_path / "out" / "trace", parent_pid=work.pid)


def test_container_traces_a_job_in_its_own_pid_namespace(image, iowork, data_file, tmp_path):
    """`unshare --pid --fork --mount-proc sh -c 'iowork ...'`: the shell is the namespace's 1,
    iowork its 2 and iowork's child its 3; the tracer, in yet another container, is given
    iowork's host PID, and charges everything to host PIDs."""
    direct, child_direct = 20, 5
    prime(iowork, data_file)
    ready_r, ready_w = os.pipe()
    job = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
         f"{iowork} {data_file} --direct {direct} --child-direct {child_direct} --wait-signal "
         f"--ready-fd {ready_w}"], pass_fds=(ready_w,))
    os.close(ready_w)
    tracer = None
    try:
        assert os.read(ready_r, 1) == b"r"
        (shell,) = children(job.pid)
        (work,) = children(shell)
        tracer = trace_in_container(image, work, tmp_path / "out")
        os.kill(work, signal.SIGUSR1)
        assert job.wait(timeout=30) == 0
        _, stderr = tracer.communicate(timeout=60)
        assert tracer.returncode == 0, stderr
    finally:
        os.close(ready_r)
        for p in (job, tracer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    out = tmp_path / "out" / "trace"
    procs = pd.read_parquet(out / "processes").set_index("pid")
    (kid,) = procs.index[procs.ppid == work]
    assert procs.loc[work, "role"] == "main" and procs.loc[kid, "role"] == "child"
    assert procs.loc[work, "ns_pid"] == 2 and work != 2
    assert procs.loc[kid, "ns_pid"] == 3 and kid != 3
    lat = pd.read_parquet(out / "latency")
    reads = lat[(lat.layer == "syscall") & (lat.op == "read") & (lat.target == "file")]
    by_pid = reads.groupby("pid")[["count", "bytes"]].sum()
    assert by_pid.loc[work].tolist() == [direct, PAGE * direct]
    assert by_pid.loc[kid].tolist() == [child_direct, PAGE * child_direct]
    blocks = lat[(lat.layer == "block") & (lat.op == "read")].groupby("pid")["count"].sum()
    assert set(blocks.index) <= {work, kid}
    assert blocks.sum() + unseen(out)[0] == direct + child_direct
