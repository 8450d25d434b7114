"""`iotrace mcp [DIR ...]`: a Model Context Protocol server over trace directories, so that an
AI assistant reads a trace through the same answers as `iotrace report`: the findings with
their evidence, the training loop's time by state, GPU idle time by cause, the top files, the
disks, the text summary, and read-only SQL (DuckDB) over the tables.

stdio by default (the assistant starts `iotrace mcp DIR` and talks over its stdin and
stdout); streamable HTTP only when asked (`--http [HOST:]PORT`), on 127.0.0.1 unless another
host is given. Nothing here writes to a trace: the GPU idle spans are recomputed in memory, and
the SQL connection has no file access at all (the tables are handed to it as tracer.load reads
them), so a statement that slipped past the read-only check could not write either.

The answers (`Served`, `ReadOnlySql`) need neither the MCP SDK nor a client; `serve` wires them
to the SDK, imported only then (`pip install 'iotrace[mcp]'`).
"""

# No `from __future__ import annotations`: the SDK reads the tools' parameter types, defined
# in build_server with names local to it, from their evaluated annotations.
import datetime
import decimal
import math
import threading
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from tracer.api import Trace, TraceError, load
from tracer.core.vocab import LOOP_STATES
from tracer.render.html import _plain, summary_json
from tracer.report import SavedProcesses, diagnose_trace, recompute_gpu, training_since
from tracer.tracedir.schema import TABLES

ROWS_MAX = 200  # rows a SQL answer carries: an assistant's context is small
FILES_MAX = 100
SQL_SECONDS = 60.0  # a statement still running then is interrupted
NEEDS = "iotrace mcp needs the MCP SDK and DuckDB: pip install 'iotrace[mcp]' (mcp==2.3.0, duckdb)"


class AnswerError(Exception):
    """A question the server cannot answer as asked: one line for the assistant."""


def _cell(v: object) -> object:
    """A SQL value as JSON: timestamps as ISO 8601, decimals as floats, the rest as text."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, datetime.datetime | datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, list | tuple):
        return [_cell(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _cell(x) for k, x in v.items()}
    return str(v)


def _records(df: pd.DataFrame) -> list[dict]:
    """A frame's rows as JSON objects, its named index as the first field."""
    if df.index.name is not None:
        df = df.reset_index()
    return _plain(df.to_dict("records"))  # type: ignore[return-value]


class ReadOnlySql:
    """DuckDB over one trace's tables, for SELECT statements only.

    An in-memory database with file access switched off and its configuration locked before
    any statement runs: the tables are the DataFrames tracer.load reads (damaged segments
    skipped, a process's last row), handed over when a statement first names them, so DuckDB
    itself never opens a file. Only one statement of type SELECT runs (WITH, FROM-first,
    DESCRIBE and SUMMARIZE are SELECTs to DuckDB)."""

    def __init__(self, trace: Trace) -> None:
        import duckdb

        self.duckdb = duckdb
        self.trace = trace
        self.con = duckdb.connect(":memory:")
        # stdout is the MCP transport: nothing but its messages may go there
        self.con.execute("SET enable_progress_bar = false")
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")
        self.known = set(TABLES) | set(trace.tables)
        self.registered: set[str] = set()

    def _statement(self, text: str) -> None:
        """Refuses anything but one SELECT, in one line."""
        duckdb = self.duckdb
        try:
            statements = self.con.extract_statements(text)
        except duckdb.Error as e:
            raise AnswerError(_one_line(e)) from None
        if len(statements) != 1:
            raise AnswerError(f"one statement at a time, not {len(statements)}")
        kind = statements[0].type
        if kind != duckdb.StatementType.SELECT:
            raise AnswerError(f"refused: this server is read-only and runs a SELECT (or WITH ... "
                              f"SELECT) only, not a {kind.name} statement")

    def _register(self, text: str) -> None:
        try:
            names = {n.lower() for n in self.duckdb.get_table_names(text)}
        except self.duckdb.Error as e:
            raise AnswerError(_one_line(e)) from None
        for name in sorted((names & self.known) - self.registered):
            try:
                frame = self.trace[name]
            except TraceError as e:
                raise AnswerError(str(e)) from None
            self.con.register(name, frame)
            self.registered.add(name)

    def query(self, text: str, limit: int = ROWS_MAX) -> dict:
        """{columns, rows (lists), row_count, truncated, note?}; AnswerError on a refused or
        failed statement (DuckDB's message, one line)."""
        self._statement(text)
        self._register(text)
        timer = threading.Timer(SQL_SECONDS, self.con.interrupt)
        timer.start()
        try:
            cursor = self.con.execute(text)
            rows = cursor.fetchmany(limit + 1)
            columns = [d[0] for d in cursor.description or []]
        except self.duckdb.Error as e:
            if isinstance(e, self.duckdb.InterruptException):
                raise AnswerError(f"stopped after {SQL_SECONDS:g} s: narrow the query "
                                  "(a WHERE, a LIMIT, an aggregate)") from None
            raise AnswerError(_one_line(e)) from None
        finally:
            timer.cancel()
        out: dict[str, Any] = {"columns": columns,
                               "rows": [[_cell(v) for v in r] for r in rows[:limit]],
                               "row_count": min(len(rows), limit), "truncated": len(rows) > limit}
        if out["truncated"]:
            out["note"] = (f"only the first {limit} rows: aggregate, or add WHERE/LIMIT/OFFSET "
                           "for the rest")
        return out


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


class Served:
    """One trace directory as the server answers about it; the diagnosis is replayed once."""

    def __init__(self, name: str, trace: Trace) -> None:
        self.name = name
        self.trace = trace

    @cached_property
    def diagnosis(self):
        return diagnose_trace(self.trace)

    @cached_property
    def training_since(self) -> dict[int, int]:
        return training_since(self.diagnosis, SavedProcesses(self.trace))

    @cached_property
    def summary_json(self) -> dict:
        return summary_json(self.trace)

    @cached_property
    def gpu(self):
        """The GPU idle spans and samples, recomputed in memory as `iotrace report` does (it
        also writes them to DIR/gpu_idle; this server writes nothing); None without samples."""
        return recompute_gpu(self.trace, write=False, diagnosis=self.diagnosis)

    @cached_property
    def sql(self) -> ReadOnlySql:
        return ReadOnlySql(self.trace)

    def about(self) -> dict:
        s = self.summary_json
        return {"trace": self.name, "directory": s["directory"], "host": s["host"],
                "targets": s["targets"], "start": s["start"], "stop": s["stop"],
                "duration_s": s["duration_s"], "stop_reason": s["stop_reason"],
                "roles": s["roles"], "findings": [f["kind"] for f in s["findings"]],
                "tables": self.trace.tables}

    def summary(self) -> str:
        return self.trace.summary()

    def findings(self) -> dict:
        return {"trace": self.name, "findings": self.summary_json["findings"]}

    def loop_time(self) -> dict:
        split = self.trace.loop_split(self.training_since)
        return {"trace": self.name, "states": list(LOOP_STATES), "loops": _records(split),
                "note": "per training loop (pid): seconds after its start-up, startup_s, and "
                        "<state>_pct, the share of those seconds in each state"}

    def gpu_idle(self) -> dict:
        if self.gpu is None:
            notes = [n for n in self.trace.meta.get("unavailable") or [] if "GPU" in n]
            return {"trace": self.name, "gpus": [],
                    "note": "no GPU samples in this trace" + (f": {notes[0]}" if notes else "")}
        spans = pd.DataFrame(self.gpu[0])
        return {"trace": self.name, "gpus": _records(self.trace.gpu_idle_by_cause(spans)),
                "note": "per GPU: sampled_s, idle_s (hard idle spans) and <cause>_s"}

    def top_files(self, n: int) -> dict:
        if not 1 <= n <= FILES_MAX:
            raise AnswerError(f"n must be 1 to {FILES_MAX}, not {n}")
        return {"trace": self.name, "files": _records(self.trace.top_files(n))}

    def devices(self) -> dict:
        return {"trace": self.name, "devices": _records(self.trace.device_summary())}

    def tables(self) -> dict:
        """The tables saved in the trace, each with its columns (the schema's, else the first
        segment's for a table this iotrace does not know)."""
        out = []
        for name in self.trace.tables:
            schema = TABLES.get(name)
            if schema is None:
                schema = self.trace[name].dtypes
                columns = [{"name": c, "type": str(t)} for c, t in schema.items()]
            else:
                columns = [{"name": f.name, "type": str(f.type)} for f in schema]
            out.append({"name": name, "columns": columns})
        return {"trace": self.name, "tables": out,
                "note": "columns are documented in docs/trace-format.md; durations are *_ns"}


class Traces:
    """The trace directories served, each named as given (or by its folder's name, or its
    index); every question goes through `ask`, one at a time, since the tools run in worker
    threads and the traces' caches and DuckDB connections are not thread-safe."""

    def __init__(self, directories: list[str]) -> None:
        self.served: list[Served] = []
        for d in directories:
            self.served.append(Served(d, load(d)))  # TraceError: the caller's one line
        self.lock = threading.Lock()

    def pick(self, which: str | None) -> Served:
        names = ", ".join(f"{i}: {s.name}" for i, s in enumerate(self.served))
        if which is None or which == "":
            if len(self.served) == 1:
                return self.served[0]
            raise AnswerError(f"{len(self.served)} traces are served: say which (trace=), one "
                              f"of {names}")
        if which.isdigit() and int(which) < len(self.served):
            return self.served[int(which)]
        want = which.rstrip("/") or which
        for key in (lambda s: s.name.rstrip("/"), lambda s: Path(s.name).name,
                    lambda s: str(s.trace.directory.resolve())):
            hits = [s for s in self.served if key(s) == want]
            if len(hits) == 1:
                return hits[0]
        raise AnswerError(f"no trace {which!r} here: give one of {names}")

    def ask(self, which: str | None, question: Callable[[Served], Any]) -> Any:
        with self.lock:
            try:
                return question(self.pick(which))
            except TraceError as e:
                raise AnswerError(str(e)) from None


INSTRUCTIONS = """\
iotrace traces a PyTorch training job's I/O in the kernel and says why its GPU idles. Each tool
answers about one trace directory (trace=: its name, folder name or index from `traces`; the
only one by default). Start with `findings` (the verdicts, most severe first, with their numbers
and advice) or `summary` (the text of `iotrace report`); `loop_time` splits the training loop's
time by state, `gpu_idle` GPU idle time by cause, `top_files` and `devices` show where the I/O
went; `tables` lists the tables and columns that `sql` (one read-only SELECT, DuckDB) queries.
Times are in ns unless named _s or _ms, sizes in bytes."""

TRACE_HELP = "which trace: its directory as served, its folder name, or its index (see traces)"


# The tools that take only `trace`: name, the question, what the assistant is told.
TRACE_TOOLS: list[tuple[str, Callable[[Served], Any], str]] = [
    ("summary", Served.summary,
     "The text summary of the trace, exactly as `iotrace report DIR` prints it: what was "
     "traced, the findings, the loop's time by state, GPU idle, top files, disks, latency."),
    ("findings", Served.findings,
     "The verdicts (what holds the job back), most severe first: kind, severity 0-100, pid, "
     "summary, advice and evidence (the numbers behind it), as `iotrace report --json`."),
    ("loop_time", Served.loop_time,
     "The training loop's time by state per main process, after its start-up: data wait (I/O, "
     "CPU, network), synchronous loading/writes, checkpoint, GPU wait, compute, other (%)."),
    ("gpu_idle", Served.gpu_idle,
     "Per GPU: seconds sampled, seconds hard idle, and the idle seconds by cause (what the "
     "training loop was doing meanwhile). Empty, with a note, for a trace without NVML."),
    ("devices", Served.devices,
     "Per disk that did I/O, means over the trace as iostat -x gives them (r_s, rkb_s, w_s, "
     "wkb_s, await_ms, util_pct, max_util_pct) and others_read_pct (untraced readers' share)."),
    ("tables", Served.tables, "The trace's tables with their columns and types, for `sql`."),
]
TOP_FILES = ("The files the traced processes spent most syscall time on: time_ns, reads, "
             "read_bytes, writes, write_bytes, pages_missed, cache_hit_pct, fs_type, pids, roles.")
SQL = ("Run one read-only SELECT over the trace's tables (DuckDB) and get its rows (at most "
       f"{ROWS_MAX}; said when cut). Anything that writes is refused.")
SQL_HELP = ("one SELECT (or WITH ... SELECT) in DuckDB's SQL; the tables are named as in "
            "`tables`: latency, files, loop, findings, processes, threads, devices, ...")


def build_server(traces: Traces):
    """The MCP server (the SDK's MCPServer) with one read-only tool per question."""
    from typing import Annotated

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations
    from pydantic import Field

    from tracer.core.version import __version__

    server = MCPServer("iotrace", version=__version__, instructions=INSTRUCTIONS,
                       log_level="WARNING")
    hints = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)
    Which = Annotated[str | None, Field(description=TRACE_HELP)]
    Count = Annotated[int, Field(description=f"how many files, 1 to {FILES_MAX}")]
    Query = Annotated[str, Field(description=SQL_HELP)]

    def answer(which: str | None, question: Callable[[Served], Any]) -> Any:
        try:
            return traces.ask(which, question)
        except AnswerError as e:
            raise ToolError(str(e)) from None

    def list_traces() -> dict:
        with traces.lock:
            return {"traces": [dict(index=i, **s.about()) for i, s in enumerate(traces.served)]}

    def asking(question: Callable[[Served], Any]) -> Callable[..., Any]:
        def tool(trace: Which = None) -> dict:
            return answer(trace, question)
        return tool

    def top_files(trace: Which = None, n: Count = 10) -> dict:
        return answer(trace, lambda s: s.top_files(n))

    def sql(query: Query, trace: Which = None) -> dict:
        return answer(trace, lambda s: s.sql.query(query))

    server.add_tool(list_traces, name="traces", annotations=hints, description=(
        "The trace directories served: each one's name, host, command, start, duration, "
        "finding kinds and tables."))
    for name, question, description in TRACE_TOOLS:
        # the summary is text; the others JSON objects
        server.add_tool(asking(question), name=name, description=description, annotations=hints,
                        structured_output=False if name == "summary" else None)
    server.add_tool(top_files, name="top_files", description=TOP_FILES, annotations=hints)
    server.add_tool(sql, name="sql", description=SQL, annotations=hints)
    return server


def found_here(folder: Path) -> list[str]:
    """`iotrace mcp` with no DIR: the trace directories in `folder` (each with a meta.json),
    as iotrace names them by default (iotrace-YYYYmmdd-HHMMSS), sorted."""
    return sorted(str(p.parent) for p in folder.glob("*/meta.json"))


def parse_http(spec: str) -> tuple[str, int]:
    """`--http [HOST:]PORT` -> (host, port), host 127.0.0.1 unless given; ValueError with one
    line otherwise."""
    host, sep, port = spec.rpartition(":")
    host = host.strip("[]") if sep else "127.0.0.1"
    if not port.isdigit() or not 1 <= int(port) <= 65535 or (sep and not host):
        raise ValueError(f"--http {spec!r}: give PORT (on 127.0.0.1) or HOST:PORT, e.g. 8765 "
                         "or 127.0.0.1:8765")
    return host, int(port)


def missing_packages() -> str | None:
    """What to install when the MCP SDK or DuckDB is missing (`NEEDS`), else None."""
    try:
        import duckdb  # noqa: F401
        import mcp  # noqa: F401
    except ImportError:
        return NEEDS
    return None


def serve(directories: list[str], http: tuple[str, int] | None = None) -> int:
    """Serves `directories` on stdio, or on streamable HTTP at `http` (host, port) until the
    client leaves or Ctrl-C. Raises TraceError for a directory that is not a trace."""
    server = build_server(Traces(directories))
    if http is None:
        server.run()
    else:
        server.run("streamable-http", host=http[0], port=http[1])
    return 0
