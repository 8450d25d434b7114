"""Roles of traced processes, from the names PyTorch gives them and, under torchrun, from the
environment it gives each rank (the roles: `tracer.core.vocab`)."""

from __future__ import annotations

from tracer.core.vocab import AGENT, CHILD, DATALOADER_WORKER, MAIN, RANK

__all__ = ["AGENT", "CHILD", "DATALOADER_WORKER", "ELASTIC_COMM", "MAIN", "PIN_COMM", "RANK",
           "WORKER_COMM", "cuda_device", "is_agent_cmdline", "rank_env", "role_of"]

WORKER_COMM = "pt_data_worker"
PIN_COMM = "pt_data_pin"  # the pin-memory thread of the main process
ELASTIC_COMM = "pt_elastic"  # torchrun's agent (its main thread names itself so)
# The agent's command before it renames itself: `torchrun ...`, `python -m torch.distributed.run`
_AGENT_ARGS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def role_of(is_target: bool, comm: str, *, rank: bool = False, agent: bool = False) -> str:
    """`rank`: the process is a rank itself (not a worker or child that inherited its
    environment); `agent`: known to be torchrun's agent by its command line."""
    if agent or comm == ELASTIC_COMM:
        return AGENT
    if rank and comm != WORKER_COMM:
        return RANK
    if is_target:
        return MAIN
    if comm == WORKER_COMM:
        return DATALOADER_WORKER
    return CHILD


def is_agent_cmdline(argv: list[str]) -> bool:
    """The command of torchrun's agent: its program or module among the first arguments."""
    return any(a.rsplit("/", 1)[-1] in _AGENT_ARGS for a in argv[:3])


def _variables(environ: bytes, names: tuple[bytes, ...]) -> dict[bytes, bytes]:
    """The variables `names` of an environment as /proc/PID/environ holds it (NUL-separated)."""
    env = {}
    for item in environ.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in names:
            env[key] = value
    return env


def rank_env(environ: bytes) -> tuple[int, int | None, int] | None:
    """(RANK, LOCAL_RANK, WORLD_SIZE) from a process's environment as /proc/PID/environ holds
    it (NUL-separated), None unless RANK and WORLD_SIZE are both there and numbers."""
    env = _variables(environ, (b"RANK", b"LOCAL_RANK", b"WORLD_SIZE"))
    try:
        rank, world = int(env[b"RANK"]), int(env[b"WORLD_SIZE"])
        local = int(env[b"LOCAL_RANK"]) if b"LOCAL_RANK" in env else None
    except (KeyError, ValueError):
        return None
    return rank, local, world


def cuda_device(environ: bytes) -> str | None:
    """The GPU a process's environment gives it, as CUDA_VISIBLE_DEVICES names it (an index or
    a UUID; CUDA takes a UUID's prefix too), None when it does not say one GPU.

    A rank uses the entry at its LOCAL_RANK (`torch.cuda.set_device(local_rank)`, as DDP scripts
    do), or the only one when its launcher left it one; without the variable, GPU LOCAL_RANK.
    A process that is no rank is only given one when a single GPU is visible: with several it
    may use any of them."""
    env = {k: v.decode(errors="replace")
           for k, v in _variables(environ, (b"CUDA_VISIBLE_DEVICES", b"LOCAL_RANK")).items()}
    local = env.get(b"LOCAL_RANK", "")
    visible = env.get(b"CUDA_VISIBLE_DEVICES")
    if visible is None:
        return local if local.isdigit() else None
    # CUDA reads the list up to its first invalid entry; "-1" or "" hides every GPU.
    entries = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry or entry.startswith("-"):
            break
        entries.append(entry)
    if len(entries) == 1:
        return entries[0]
    if local.isdigit() and int(local) < len(entries):
        return entries[int(local)]
    return None
