"""Roles of traced processes, from the names PyTorch gives them (the roles: `tracer.core.vocab`)."""

from __future__ import annotations

from tracer.core.vocab import CHILD, DATALOADER_WORKER, MAIN

__all__ = ["CHILD", "DATALOADER_WORKER", "ELASTIC_COMM", "MAIN", "PIN_COMM", "WORKER_COMM", "role_of"]

WORKER_COMM = "pt_data_worker"
PIN_COMM = "pt_data_pin"  # the pin-memory thread of the main process
ELASTIC_COMM = "pt_elastic"  # torchrun's agent


def role_of(is_target: bool, comm: str) -> str:
    if is_target:
        return MAIN
    if comm == WORKER_COMM:
        return DATALOADER_WORKER
    return CHILD
