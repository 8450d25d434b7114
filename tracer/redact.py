"""--redact-paths: paths are hashed in every output (the trace, the summary, the live view).

Each component is replaced by the first 10 hex digits of its salted SHA-256, so the directory
structure survives (grouping by directory, depth) but no name does. The salt is random per
trace: the same file hashes the same within one trace, and hashes cannot be compared with a
dictionary of common names computed in advance.
"""

from __future__ import annotations

import hashlib
import os


class Redactor:
    def __init__(self, enabled: bool, salt: bytes | None = None):
        self.enabled = enabled
        self.salt = salt if salt is not None else os.urandom(16)

    def _h(self, part: str) -> str:
        return hashlib.sha256(self.salt + part.encode()).hexdigest()[:10]

    def path(self, path: str) -> str:
        """'/data/train/a.bin (deleted)' -> '/3f2a91c0de/8b1e.../...' (marks kept)."""
        if not self.enabled or not path:
            return path
        suffix = ""
        if path.endswith(" (deleted)"):
            path, suffix = path[: -len(" (deleted)")], " (deleted)"
        lead = "/" if path.startswith("/") else ""
        return lead + "/".join(self._h(p) for p in path.strip("/").split("/") if p) + suffix

    def cmdline(self, cmdline: str) -> str:
        """Hashes the words that look like paths (contain a '/')."""
        if not self.enabled:
            return cmdline
        return " ".join(self.path(w) if "/" in w else w for w in cmdline.split(" "))

    def argv(self, argv: list[str]) -> list[str]:
        return [self.path(a) if "/" in a else a for a in argv] if self.enabled else argv
