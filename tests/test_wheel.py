"""The install for hosts without a compiler: `pip wheel .` on a machine that built the BPF
object gives a wheel that holds it, and the wheel installed into a fresh venv runs
`iotrace doctor`, loading and attaching that object (README, "Install without a compiler")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, needs_root

OBJECT = ROOT / "tracer" / "bpf" / "iotrace.bpf.o"

pytestmark = [needs_root, pytest.mark.kernel]


def test_wheel_holds_the_bpf_object_and_runs_doctor_in_a_fresh_venv(tmp_path: Path) -> None:
    assert OBJECT.exists(), "the BPF object is not built: run make build first"
    # A copy of what the wheel is made of, so that building leaves nothing in the repository.
    src = tmp_path / "src"
    shutil.copytree(ROOT / "tracer", src / "tracer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", src)
    dist = tmp_path / "dist"
    # This environment's setuptools, and no dependencies: nothing is downloaded.
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", "-w", str(dist), str(src)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("iotrace-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("tracer/bpf/iotrace.bpf.o") == OBJECT.read_bytes()

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    python = venv / "bin" / "python"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                                "--no-deps", "-q", str(wheel)], capture_output=True, text=True,
                               timeout=120)
    assert installed.returncode == 0, installed.stderr[-2000:]
    # The dependencies (pyarrow, pandas, ...) from this environment, after the venv's own
    # site-packages: the package itself is the wheel's, not this checkout.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the checkout
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path"
                                "('purelib'))"], capture_output=True, text=True,
                               env=env, check=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    where = subprocess.run([str(python), "-c", "import tracer; print(tracer.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert where.stdout.strip() == str(site / "tracer" / "__init__.py")

    doctor = subprocess.run([str(venv / "bin" / "iotrace"), "doctor"], capture_output=True,
                            text=True, cwd=tmp_path, env=env, timeout=120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    lines = doctor.stdout.splitlines()
    assert f"  ok  BPF objects     {site / 'tracer' / 'bpf' / 'iotrace.bpf.o'}" in lines
    assert any(line.startswith("  ok  load+attach ") for line in lines), doctor.stdout
    assert "This host can trace with iotrace." in lines
