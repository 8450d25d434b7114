"""Roles of traced processes, from the names PyTorch gives them (DESIGN.md, Roles)."""

from __future__ import annotations

MAIN = "main"  # a process the user asked to trace
DATALOADER_WORKER = "dataloader_worker"  # a descendant named pt_data_worker
CHILD = "child"  # any other descendant

WORKER_COMM = "pt_data_worker"
PIN_COMM = "pt_data_pin"  # the pin-memory thread of the main process
ELASTIC_COMM = "pt_elastic"  # torchrun's agent


def role_of(is_target: bool, comm: str) -> str:
    if is_target:
        return MAIN
    if comm == WORKER_COMM:
        return DATALOADER_WORKER
    return CHILD
