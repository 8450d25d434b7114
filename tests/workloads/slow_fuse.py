"""A small FUSE file system with a slow backend, as object-store mounts (gcsfuse, s3fs,
mountpoint-s3) serve data: `python slow_fuse.py BACKING MOUNTPOINT [--delay-ms N]`.

It mounts MOUNTPOINT read-only with the files of BACKING, whose bytes it fetches, read by read,
from a backend over TCP on 127.0.0.1: a child process (`slowfuse_store`) standing in for the
object store, which holds the files in memory and answers each request after N ms (default
20). The serving process renames itself `slowfuse`, so that the tests can tell it by name. It
runs in the foreground until unmounted (fusermount3 -u), then stops the store, or until killed
(the store dies with it); it prints "ready PORT", the store's port, once the mount answers."""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import queue
import signal
import socket
import stat
import struct
import sys
import threading
import time

import mfusepy

NAME = b"slowfuse"


def _set_name(name: bytes) -> None:
    """PR_SET_NAME: the main thread's (and so the process's) comm."""
    ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name), 0, 0, 0)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("backend closed")
        buf += chunk
    return bytes(buf)


class Store:
    """The object store: the files of `root` in memory; a request is (path length, path,
    offset, size), the answer (length, bytes) after `delay_s`."""

    def __init__(self, root: str, delay_s: float, listener: socket.socket) -> None:
        self.delay_s, self.listener = delay_s, listener
        self.files = {}
        for name in os.listdir(root):
            with open(os.path.join(root, name), "rb") as f:
                self.files[name] = f.read()

    def serve_forever(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    n, = struct.unpack("<I", _recv_exact(conn, 4))
                    path = _recv_exact(conn, n).decode()
                    offset, size = struct.unpack("<QI", _recv_exact(conn, 12))
                except ConnectionError:
                    return
                time.sleep(self.delay_s)
                data = self.files.get(path, b"")[offset:offset + size]
                conn.sendall(struct.pack("<I", len(data)) + data)


def start_store(root: str, delay_s: float) -> tuple[int, int]:
    """Forks the store (before any thread starts); returns its port and pid. It dies with
    this process (PR_SET_PDEATHSIG), if not stopped before."""
    listener = socket.create_server(("127.0.0.1", 0))
    store = Store(root, delay_s, listener)  # loaded before the mount: no reads while serving
    pid = os.fork()
    if pid == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        _set_name(b"slowfuse_store")
        try:
            store.serve_forever()
        finally:
            os._exit(0)
    port = listener.getsockname()[1]
    listener.close()
    return port, pid


class Client:
    """A pool of connections to the backend, kept open (libfuse's threads come and go), one
    per read in flight, as an object store's client keeps them."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.idle: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()

    def get(self, path: str, offset: int, size: int) -> bytes:
        try:
            sock = self.idle.get_nowait()
        except queue.Empty:
            sock = socket.create_connection(("127.0.0.1", self.port))
        raw = path.encode()
        sock.sendall(struct.pack("<I", len(raw)) + raw + struct.pack("<QI", offset, size))
        n, = struct.unpack("<I", _recv_exact(sock, 4))
        data = _recv_exact(sock, n)
        self.idle.put(sock)
        return data


class SlowFs(mfusepy.Operations):
    use_ns = True

    def __init__(self, root: str, client: Client) -> None:
        self.root, self.client = root, client

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def getattr(self, path, fh=None):
        try:
            st = os.lstat(self._real(path))
        except OSError as e:
            raise mfusepy.FuseOSError(e.errno) from None
        mode = st.st_mode & ~0o222  # read-only
        return {"st_mode": mode, "st_size": st.st_size, "st_nlink": st.st_nlink,
                "st_uid": st.st_uid, "st_gid": st.st_gid, "st_mtime": st.st_mtime_ns,
                "st_atime": st.st_atime_ns, "st_ctime": st.st_ctime_ns}

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._real(path))]

    def open(self, path, flags):
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise mfusepy.FuseOSError(errno.EROFS)
        if not stat.S_ISREG(os.stat(self._real(path)).st_mode):
            raise mfusepy.FuseOSError(errno.EISDIR)
        return 0

    def read(self, path, size, offset, fh):
        return self.client.get(path.lstrip("/"), offset, size)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("backing")
    ap.add_argument("mountpoint")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    args = ap.parse_args()
    _set_name(NAME)
    port, store = start_store(os.path.abspath(args.backing), args.delay_ms / 1000)
    fs = SlowFs(os.path.abspath(args.backing), Client(port))

    def ready() -> None:
        # the mount answers once the kernel has it: then say so to whoever started this
        for _ in range(500):
            if os.path.ismount(args.mountpoint):
                print(f"ready {port}", flush=True)
                return
            time.sleep(0.01)

    threading.Thread(target=ready, daemon=True).start()
    # the source names the backend, as an object store's mount names its bucket
    try:
        mfusepy.FUSE(fs, args.mountpoint, foreground=True, ro=True, nothreads=False,
                     fsname=f"tcp://127.0.0.1:{port}/{os.path.basename(args.backing)}",
                     subtype="slowfuse")
    finally:  # unmounted: the store goes too, reaped here rather than left to init
        os.kill(store, signal.SIGKILL)
        os.waitpid(store, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
