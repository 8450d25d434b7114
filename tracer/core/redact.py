"""--redact-paths: names are hashed in every output (the trace, the summary, the live view,
the `Tracing ...` line, and so `iotrace report` and the Perfetto export of the trace).

What is hashed, and what is kept (the rule):
- a path, absolute or relative (a word with a '/'): each component, so the directory structure
  survives (grouping by directory, depth) but no name does;
- a command-line word (meta.json `command_line` and `targets.command`, the `processes` table's
  `cmdline`, the `Tracing I/O of ...` line): hashed, except an option's name (`-u`, `--cached`,
  the `--token=` of `--token=VALUE`, whose value is hashed) and a well-known program
  (`KEPT_PROGRAMS`: python, torchrun, iotrace, ...), kept by its base name. So a secret passed
  as `--token=S`, `--token S` or `-t S`, a file name and a script's name are hashed alike;
- a process or thread name (comm, in every table, the summary and the live view): hashed,
  except PyTorch's own names (`pt_data_worker`, `pt_data_pin`, `pt_elastic`: roles are read
  from them, also by `iotrace report`) and the well-known programs above.
Numbers, PIDs, devices, file system types, container IDs and pod UIDs and the diagnosis's words
are not names and stay (a cgroup's path is a path).

A hash is the first 10 hex digits of the salted SHA-256 of the name. The salt is random per
trace: a name hashes the same everywhere in one trace (a file's name in a path and on the
command line), and hashes cannot be compared with a dictionary of common names computed in
advance.
"""

from __future__ import annotations

import hashlib
import os
import re

from tracer.core.roles import ELASTIC_COMM, PIN_COMM, WORKER_COMM

# Launchers and interpreters a training job is started with: their names say how the job runs
# and nothing about it.
KEPT_PROGRAMS = frozenset({
    "iotrace", "python", "python3", "torchrun", "accelerate", "deepspeed", "mpirun", "srun",
    "env", "sh", "bash", "uv", "conda",
})
_PYTHON_VERSION = re.compile(r"python3\.\d+")
_OPTION = re.compile(r"(-[A-Za-z0-9]|--[A-Za-z0-9][A-Za-z0-9_.-]*)")  # -u, --data-dir
KEPT_COMMS = frozenset({WORKER_COMM, PIN_COMM, ELASTIC_COMM})


def _kept_program(name: str) -> bool:
    return name in KEPT_PROGRAMS or bool(_PYTHON_VERSION.fullmatch(name))


class Redactor:
    def __init__(self, enabled: bool, salt: bytes | None = None) -> None:
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

    def word(self, word: str) -> str:
        """One command-line word, by the rule above."""
        if not self.enabled or not word:
            return word
        if word.startswith("-"):
            name, eq, value = word.partition("=")
            if _OPTION.fullmatch(name):
                return name + eq + (self.word(value) if eq else "")
            return self._h(word)  # -pSECRET: a value glued to a short option
        if "/" in word:
            head, _, base = word.rstrip("/").rpartition("/")
            if _kept_program(base):  # /usr/bin/python3: where it lives is hashed, not what
                return self.path(head + "/") + "/" + base if head else "/" + base
            return self.path(word)
        return word if _kept_program(word) else self._h(word)

    def cmdline(self, cmdline: str) -> str:
        """A command line joined with spaces: every word by the rule."""
        if not self.enabled:
            return cmdline
        return " ".join(self.word(w) for w in cmdline.split(" "))

    def argv(self, argv: list[str]) -> list[str]:
        return [self.word(a) for a in argv] if self.enabled else argv

    def comm(self, comm: str) -> str:
        """A process or thread name: PyTorch's and the well-known programs' kept."""
        if not self.enabled or not comm or comm in KEPT_COMMS or _kept_program(comm):
            return comm
        return self._h(comm)
