"""Privacy: --redact-paths leaves no name in any output; traces are readable by their owner only."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import IOTRACE, ROOT, needs_root, run_iotrace, warm
from tracer.core.redact import KEPT_PROGRAMS, Redactor

# A job that takes a secret on its command line three ways, reads a file by a relative name and
# starts a program whose name is a secret too (its comm).
JOB = """\
import subprocess, sys
with open("secret-dataset.bin", "rb") as f:
    f.read(4096)
subprocess.run(["./secretexe", "secret-dataset.bin", "--cached", "5"], check=True)
"""
SECRETS = ("T0KEN-A1", "T0KEN-B2", "T0KEN-C3", "secret-dataset", "secretjob", "secretexe")


def _strings_of_trace(out: Path) -> str:
    """Every string value of every table of the trace, and every other file as text."""
    texts = []
    for path in sorted(out.rglob("*")):
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            for col in table.columns:
                texts.extend(str(v) for v in col.to_pylist())
        elif path.is_file():
            texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


@needs_root
@pytest.mark.kernel
def test_redact_paths_leaves_no_name_in_any_output(iowork, tmp_path):
    """Secret tokens (--token=S, --key S, -t S), a relative file name, the script's and an
    executable's name: none of them in stderr/stdout, meta.json, any table, `iotrace report`
    (text, JSON, HTML) or the Perfetto export. PyTorch-independent names that the rule keeps
    (python3, option names) are still there, and so are the counts."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "secretjob.py").write_text(JOB)
    shutil.copy(iowork, work / "secretexe")
    data = work / "secret-dataset.bin"
    with open(data, "wb") as f:  # iowork wants 64 MiB; a hole reads as well as data
        f.truncate(64 << 20)
    warm(data)
    out = tmp_path / "trace"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [*IOTRACE, "-o", str(out), "--redact-paths", "--no-tui", "--", "python3", "secretjob.py",
         "--token=T0KEN-A1", "--key", "T0KEN-B2", "-t", "T0KEN-C3"],
        capture_output=True, text=True, timeout=120, cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    streams = [r.stdout, r.stderr]
    for args in (("report", str(out)), ("report", str(out), "--json")):
        rep = run_iotrace(*args)
        assert rep.returncode == 0, rep.stderr
        streams.append(rep.stdout)
    html, perfetto = tmp_path / "r.html", tmp_path / "p.json"
    for args in (("report", str(out), "--html", str(html)),
                 ("export", str(out), "--perfetto", str(perfetto))):
        assert run_iotrace(*args).returncode == 0
    streams += [html.read_text(), perfetto.read_text(), _strings_of_trace(out)]
    everything = "\n".join(streams)
    leaked = [s for s in SECRETS if s in everything]
    assert not leaked, leaked
    meta = json.loads((out / "meta.json").read_text())
    words = meta["targets"]["command"]
    assert words[0] == "python3" and "--token=" in words[2] and words[3] == "--key", words
    procs = pq.read_table(out / "processes").to_pandas()
    assert "python3" in set(procs.comm)  # a well-known program keeps its name
    others = set(procs.comm) - KEPT_PROGRAMS
    assert others and all(len(c) == 10 and int(c, 16) >= 0 for c in others), others
    files = pq.read_table(out / "files").to_pandas()
    assert files[files.op == "read"].ops.sum() >= 6  # the job's read and secretexe's 5


def test_redaction_rule():
    """The documented rule, word by word: options keep their names, values and names are
    hashed, well-known programs and PyTorch's thread names are kept; one name, one hash."""
    r = Redactor(True, salt=b"s")
    h = r.word("secret")
    assert len(h) == 10 and h != "secret"
    assert r.word("--token=secret") == f"--token={h}"
    assert r.word("--key") == "--key" and r.word("-t") == "-t"
    assert r.word("-psecret") not in ("-psecret", "-p")
    assert r.word("data/secret") == f"{r.word('data')}/{h}"
    assert r.word("/usr/bin/python3.12").endswith("/python3.12")
    assert "usr" not in r.word("/usr/bin/python3.12")
    assert r.word("torchrun") == "torchrun"
    assert r.comm("secret") == h
    assert [r.comm(c) for c in ("pt_data_worker", "pt_data_pin", "pt_elastic", "python3")] == [
        "pt_data_worker", "pt_data_pin", "pt_elastic", "python3"]
    assert r.cmdline("python3 secret --n=secret") == f"python3 {h} --n={h}"
    off = Redactor(False)
    assert off.cmdline("a --t=b") == "a --t=b" and off.comm("x") == "x"


def test_redact_paths_says_it_leaves_the_commands_own_output():
    """command.log is what the traced command printed: iotrace does not rewrite it, and its
    help says so where the option is."""
    r = run_iotrace("--help")
    assert r.returncode == 0
    help_text = " ".join(r.stdout.split())
    assert "not the traced command's own output (command.log)" in help_text


def _modes(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): oct(p.stat().st_mode & 0o777) for p in out.rglob("*")}


@needs_root
@pytest.mark.kernel
def test_trace_is_private_whatever_the_umask(iowork, data_file, tmp_path):
    """Under umask 000, with an existing empty -o directory open to everyone (0777): the
    directory is made 0700 (said in one line on stderr), every folder in it is 0700 and every
    file 0600: they hold full command lines."""
    out = tmp_path / "trace"
    out.mkdir()
    os.chmod(out, 0o777)
    warm(data_file)
    r = subprocess.run([*IOTRACE, "-o", str(out), "--", str(iowork), str(data_file), "--cached",
                        "3"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       preexec_fn=lambda: os.umask(0))
    assert r.returncode == 0, r.stderr
    assert oct(out.stat().st_mode & 0o777) == "0o700"
    said = [line for line in r.stderr.splitlines() if "0777" in line]
    assert len(said) == 1 and "0700" in said[0], r.stderr
    modes = _modes(out)
    assert "meta.json" in modes and "processes" in modes
    wrong = {p: m for p, m in modes.items()
             if m != ("0o700" if (out / p).is_dir() else "0o600")}
    assert not wrong, wrong
    html = tmp_path / "r.html"
    r = subprocess.run([*IOTRACE, "report", str(out), "--html", str(html)], cwd=ROOT,
                       capture_output=True, text=True, preexec_fn=lambda: os.umask(0))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(html.stat().st_mode) == 0o600


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a directory as another user")
def test_refuses_an_output_directory_of_another_user(tmp_path):
    """An empty -o directory that someone else owns is not taken over (and not chmod'ed)."""
    out = tmp_path / "theirs"
    out.mkdir()
    os.chmod(out, 0o777)
    os.chown(out, 65534, 65534)
    r = run_iotrace("-o", str(out), "--", sys.executable, "-c", "pass")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "belongs to" in r.stderr, r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o777
