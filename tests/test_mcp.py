"""`iotrace mcp`: the MCP server, driven by the SDK's own client (stdio, and streamable HTTP
when asked), against a hand-made trace (exact numbers, no root) and a real one (kernel).

Every answer is checked against what `tracer.load(DIR)` gives for the same question; the SQL
tool against the tables, a bad statement (one clear error) and statements that would write
(refused, nothing written).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from test_api import CKPT, FILES, FINDINGS, LATENCY, LOOP, META, PROCESSES, SHARD, T0, S, row

from conftest import IOTRACE, ROOT, needs_root
from tracer.api import load
from tracer.render.html import _plain
from tracer.report import recompute_gpu, trace_training_since
from tracer.sinks.parquet import TraceWriter

anyio = pytest.importorskip("anyio")
mcp = pytest.importorskip("mcp")
pytest.importorskip("duckdb")

TOOLS = {"traces", "summary", "findings", "loop_time", "gpu_idle", "top_files", "devices",
         "tables", "sql"}


def _params(*args: str):
    return mcp.StdioServerParameters(command=IOTRACE[0], args=[*IOTRACE[1:], "mcp", *args],
                                     cwd=str(ROOT))


def ask(dirs: list[Path], calls: list[tuple[str, dict]], http: int | None = None) -> tuple:
    """Starts `iotrace mcp DIRS` through the SDK's client, lists the tools, makes `calls`:
    returns (tool names, [(is_error, text)])."""

    async def session(streams) -> tuple:
        async with mcp.ClientSession(*streams) as s:
            await s.initialize()
            names = [t.name for t in (await s.list_tools()).tools]
            out = []
            for name, arguments in calls:
                r = await s.call_tool(name, arguments)
                (content,) = r.content
                out.append((bool(r.is_error), content.text))
            return names, out

    async def main() -> tuple:
        if http is None:
            async with mcp.stdio_client(_params(*map(str, dirs))) as streams:
                return await session(streams)
        from mcp.client.streamable_http import streamable_http_client

        async with streamable_http_client(f"http://127.0.0.1:{http}/mcp") as streams:
            return await session(streams)

    return anyio.run(main)


def _files_of(directory: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _records(df: pd.DataFrame) -> list[dict]:
    return _plain(df.reset_index().to_dict("records"))


# -- a hand-made trace: every tool's answer ----------------------------------------------------

# GPU 0 idle (0 %) for the first second, while the loop waited for data, busy after; GPU 1 busy.
GPU = [row("gpu", ts=T0 + i * S // 4, gpu=g, uuid=f"GPU-{g}", util_pct=0.0 if g == 0 and i <= 4
           else 90.0, sample_period_ns=S // 4) for i in range(1, 9) for g in (0, 1)]


@pytest.fixture
def hand(tmp_path: Path) -> Path:
    """test_api's two-interval trace of a job with two DataLoader workers, with GPU samples."""
    d = tmp_path / "trace"
    d.mkdir()
    with TraceWriter(d, META) as w:
        for table, rows in (("processes", PROCESSES), ("latency", LATENCY), ("files", FILES),
                            ("loop", LOOP), ("findings", FINDINGS), ("gpu", GPU)):
            w.add(table, rows)
    return d



def test_each_tool_answers_what_the_trace_says(hand: Path) -> None:
    before = _files_of(hand)
    names, answers = ask([hand], [
        ("traces", {}), ("summary", {}), ("findings", {}), ("loop_time", {}), ("gpu_idle", {}),
        ("top_files", {"n": 2}), ("devices", {}), ("tables", {}),
        ("sql", {"query": "select count(*) as n, sum(count) as ops from latency"}),
        ("sql", {"query": "with r as (select * from files where op = 'read') "
                          "select path, sum(bytes) from r group by path order by 2 desc"})])
    assert set(names) == TOOLS and len(names) == len(TOOLS)
    assert not any(err for err, _ in answers), answers
    listed, summary, findings, loop, gpu, top, devices, tables, count, reads = (
        a if i == 1 else json.loads(a) for i, (_, a) in enumerate(answers))
    trace = load(hand)

    (about,) = listed["traces"]
    assert about["index"] == 0 and about["trace"] == str(hand) and about["host"] == "gpu-node-1"
    assert summary == trace.summary()  # the text of `iotrace report DIR`
    # the final verdicts, as `iotrace report --json` gives them, evidence as objects
    assert [f["kind"] for f in findings["findings"]] == list(trace.findings["kind"].astype(str))
    assert [f["kind"] for f in findings["findings"]] == [
        "dataloader_io_bound", "cold_cache", "checkpoint_stall"]
    assert findings["findings"][0]["evidence"] == {"loop_shares_pct": {"data_wait_io": 40.0},
                                                   "p99_read_ns": 130416.64}
    assert findings["findings"][0]["advice"] == FINDINGS[3]["advice"]
    # the loop: 0.8 s data wait of 2 s (start-up apart, as the report's first screen)
    want = _records(trace.loop_split(trace_training_since(trace)))
    assert loop["loops"] == want
    (main,) = loop["loops"]
    assert main["pid"] == 100 and main["seconds"] == 2.0 and main["data_wait_io_pct"] == 40.0
    assert main["checkpoint_pct"] == 25.0 and main["compute_pct"] == 35.0
    spans, _ = recompute_gpu(trace, write=False)
    assert gpu["gpus"] == _records(trace.gpu_idle_by_cause(pd.DataFrame(spans)))
    assert [g["gpu"] for g in gpu["gpus"]] == [0, 1]
    assert [g["sampled_s"] for g in gpu["gpus"]] == [2.0, 2.0]
    assert gpu["gpus"][0]["idle_s"] > 0 and gpu["gpus"][0]["data_wait_io_s"] > 0
    assert gpu["gpus"][1]["idle_s"] == 0
    assert top["files"] == _records(trace.top_files(2).set_index("path"))
    ckpt, shard = top["files"]  # the checkpoint's fsync took longest
    assert ckpt["path"] == CKPT and ckpt["write_bytes"] == 4 << 20 and ckpt["time_ns"] == 20_300_000
    assert shard["path"] == SHARD and shard["read_bytes"] == 10 << 20
    assert devices["devices"] == []  # no disk rows in this trace
    listed_tables = {t["name"]: t for t in tables["tables"]}
    assert set(listed_tables) == set(trace.tables) and "latency" in listed_tables
    assert {"name": "count", "type": "int64"} in listed_tables["latency"]["columns"]
    assert count["columns"] == ["n", "ops"]
    assert count["rows"] == [[len(trace.latency), sum(r["count"] for r in LATENCY)]]
    assert reads["rows"][0] == [SHARD, 10 << 20] and not reads["truncated"]
    assert _files_of(hand) == before  # reading writes nothing, gpu_idle included


def test_sql_refuses_writes_and_says_what_is_wrong_in_one_line(hand: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    writes = [f"COPY latency TO '{out}/l.csv'", "CREATE TABLE t AS SELECT 1",
              "INSERT INTO latency SELECT * FROM latency", f"ATTACH '{out}/x.db' AS x",
              "INSTALL httpfs", "DROP VIEW latency", "SET enable_external_access = true",
              "SELECT 1; DELETE FROM files", "PRAGMA version"]
    calls = [("sql", {"query": q}) for q in writes]
    calls += [("sql", {"query": f"SELECT * FROM read_csv('{ROOT}/pyproject.toml')"}),  # a file
              ("sql", {"query": "SELEC count(*) FROM latency"}),
              ("sql", {"query": "SELECT nothing FROM latency"}),
              ("sql", {"query": "SELECT * FROM range(1000)"}),
              ("sql", {"query": "SELECT count(*) FROM latency"})]
    _, answers = ask([hand], calls)
    refused, outside, syntax, binder, big, count = (
        answers[:len(writes)], *answers[len(writes):])
    for (err, text), q in zip(refused, writes, strict=True):
        assert err and "\n" not in text, (q, text)
        assert "refused: this server is read-only" in text or "one statement at a time" in text, \
            (q, text)
    assert "not a COPY statement" in refused[0][1] and "not a CREATE statement" in refused[1][1]
    assert outside[0] and "Permission Error" in outside[1] and "\n" not in outside[1]
    assert syntax[0] and "syntax error" in syntax[1] and "Traceback" not in syntax[1]
    assert binder[0] and '"nothing" not found' in binder[1] and "\n" not in binder[1]
    rows = json.loads(big[1])
    assert len(rows["rows"]) == 200 and rows["truncated"] and "first 200 rows" in rows["note"]
    assert not count[0] and json.loads(count[1])["rows"] == [[len(LATENCY)]]  # still serving
    assert list(out.iterdir()) == []


def test_a_statement_that_runs_too_long_is_stopped(hand: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer import mcp_server

    monkeypatch.setattr(mcp_server, "SQL_SECONDS", 0.5)
    sql = mcp_server.ReadOnlySql(load(hand))
    started = time.monotonic()
    with pytest.raises(mcp_server.AnswerError, match="stopped after 0.5 s: narrow the query"):
        sql.query("SELECT count(*) FROM range(1000000000000) a WHERE a.range % 7 = 3")
    assert time.monotonic() - started < 30
    assert sql.query("SELECT count(*) FROM loop")["rows"] == [[len(LOOP)]]


def test_several_traces_are_named_or_numbered(hand: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(hand, other)
    _, answers = ask([hand, other], [
        ("findings", {}), ("findings", {"trace": "1"}), ("findings", {"trace": "other"}),
        ("findings", {"trace": "nope"}), ("traces", {})])
    (err, text), by_index, by_name, (bad, unknown), listed = answers
    assert err and "2 traces are served: say which" in text and str(other) in text
    assert json.loads(by_index[1])["trace"] == str(other) == json.loads(by_name[1])["trace"]
    assert bad and "no trace 'nope'" in unknown
    assert [t["trace"] for t in json.loads(listed[1])["traces"]] == [str(hand), str(other)]


def _mcp_cli(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*IOTRACE, "mcp", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_bad_input_is_one_line_and_exit_2(hand: Path, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "mcp"  # the SDK not installed: an import that fails
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named mcp')\n")
    cases = [((str(tmp_path / "missing"),), {}, "does not exist"),
             (("--http", "localhost:http", str(hand)), {}, "--http 'localhost:http'"),
             ((str(hand),), {"PYTHONPATH": f"{ROOT}:{shadow.parent}"},
              "pip install 'iotrace[mcp]'"),
             ((), {}, "no trace directory here")]
    for args, env, words in cases:
        done = _mcp_cli(*args, env=env, cwd=shadow)  # a folder without traces
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and words in done.stderr, (args, done.stderr)
        assert done.stdout == ""


def test_without_dir_it_serves_the_traces_here(hand: Path) -> None:
    params = mcp.StdioServerParameters(command=IOTRACE[0], args=[*IOTRACE[1:], "mcp"],
                                       cwd=str(hand.parent), env={"PYTHONPATH": str(ROOT)})

    async def main() -> str:
        async with mcp.stdio_client(params) as streams, mcp.ClientSession(*streams) as s:
            await s.initialize()
            return (await s.call_tool("traces", {})).content[0].text

    listed = json.loads(anyio.run(main))["traces"]
    assert [Path(t["directory"]).name for t in listed] == [hand.name]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_listens_on_loopback_only(hand: Path) -> None:
    import psutil

    port = _free_port()
    server = subprocess.Popen([*IOTRACE, "mcp", "--http", str(port), str(hand)], cwd=ROOT,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        listening: list = []
        while not listening and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.2)
            listening = [c.laddr for c in psutil.Process(server.pid).net_connections("inet")
                         if c.status == psutil.CONN_LISTEN]
        assert listening, server.stderr.read() if server.poll() is not None else "no listener"
        assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", port)]
        names, answers = ask([], [("findings", {})], http=port)
        assert set(names) == TOOLS
        first = json.loads(answers[0][1])["findings"][0]
        assert first["kind"] == "dataloader_io_bound"
    finally:
        server.terminate()
        server.communicate(timeout=30)


# -- a real trace ------------------------------------------------------------------------------

# Reads a file cold, in 16 KiB reads, for 3 s, with no DataLoader workers: synchronous loading.
_WORKLOAD = """
import os, sys, time
end = time.monotonic() + 3
while time.monotonic() < end:
    fd = os.open(sys.argv[1], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    while os.read(fd, 1 << 14):
        pass
    os.close(fd)
"""


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("real")
    data = base / "data.bin"
    data.write_bytes(os.urandom(16 << 20))
    out = base / "trace"
    done = subprocess.run([*IOTRACE, "-o", str(out), "--no-tui", "--", sys.executable, "-c",
                           _WORKLOAD, str(data)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return out


@needs_root
@pytest.mark.kernel
def test_real_trace_through_the_mcp_client(real: Path) -> None:
    data = str((real.parent / "data.bin").resolve())
    names, answers = ask([real], [
        ("findings", {}), ("loop_time", {}), ("top_files", {"n": 1}), ("devices", {}),
        ("gpu_idle", {}),
        ("sql", {"query": f"SELECT sum(bytes) FROM files WHERE path = '{data}' AND op = 'read'"}),
        ("sql", {"query": "SELECT count(*) FROM latency"}),
        ("sql", {"query": f"COPY files TO '{real}/copy.csv'"})])
    assert set(names) == TOOLS
    *ok, (refused, text) = answers
    assert not any(err for err, _ in ok), ok
    findings, loop, top, devices, gpu, read_bytes, count = (json.loads(a) for _, a in ok)
    trace = load(real)
    kinds = [f["kind"] for f in findings["findings"]]
    assert kinds == list(trace.findings["kind"].astype(str)) and "sync_loading" in kinds
    assert "dataloader_io_bound" not in kinds and "checkpoint_stall" not in kinds
    assert loop["loops"] == _records(trace.loop_split(trace_training_since(trace)))
    (main,) = loop["loops"]
    assert main["sync_loading_pct"] > 0
    (first,) = top["files"]
    assert first["path"] == data
    assert first["read_bytes"] == trace.top_files(1)["read_bytes"].iloc[0] > 16 << 20
    assert read_bytes["rows"] == [[first["read_bytes"]]]
    assert count["rows"] == [[len(trace.latency)]]
    assert devices["devices"] == _records(trace.device_summary())
    assert gpu["gpus"] == [] and "no GPU samples" in gpu["note"]
    assert refused and "not a COPY statement" in text and not (real / "copy.csv").exists()
