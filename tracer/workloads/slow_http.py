"""A slow HTTP server of sample files, standing in for an object store or a remote data set.

    python -m tracer.workloads.slow_http DIR --delay-ms MS [--port P]

`GET /i` answers with the bytes of the i-th file of DIR (sorted by name) after MS milliseconds,
one thread per request, on 127.0.0.1 only. It prints its port on the first line of stdout once
it listens. `start(dir, delay_ms)` runs it as a process of its own (not a child of a traced job).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def serve(directory: Path, delay_ms: float, port: int = 0) -> None:
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                body = files[int(self.path.strip("/"))].read_bytes()
            except (ValueError, IndexError):
                self.send_error(404)
                return
            time.sleep(delay_ms / 1000)  # the latency of a remote store
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def start(directory: Path, delay_ms: float) -> tuple[subprocess.Popen[str], int]:
    """The server as a process of its own, and its port."""
    proc = subprocess.Popen([sys.executable, "-m", "tracer.workloads.slow_http", str(directory),
                             "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).resolve().parents[2]), start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise RuntimeError("the slow HTTP server did not start")
    return proc, int(line)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tracer.workloads.slow_http")
    p.add_argument("directory", type=Path)
    p.add_argument("--delay-ms", type=float, default=100.0)
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    serve(args.directory, args.delay_ms, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
