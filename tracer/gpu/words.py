"""The words of the GPU's idle time in the findings: one sentence per GPU of `gpu_evidence`
(tracer.gpu.idle), its idle time and the parts of it by cause."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracer.core.vocab import GPU_STARTUP, GPU_UNKNOWN

MAX_PARTS_SAID = 3  # the sentence names the largest parts; the rest is summed

PART_WORDS = {
    GPU_STARTUP: "start-up (before the loop's first batch)",
    "data_wait_io": "waiting on DataLoader reads",
    "data_wait_cpu": "waiting on DataLoader workers busy on the CPU",
    "data_wait_network": "waiting on DataLoader workers reading from the network",
    "sync_loading": "the loop reading data itself",
    "sync_writes": "the loop writing logs and other small files",
    "checkpoint": "writing a checkpoint",
    "collective_wait": "waiting for peers in a collective",
    "gpu_wait": "the loop waiting for the GPU",
    "device_copy": "the loop copying between host and device",
    "compute": "the loop busy on the CPU",
    "other": "the loop doing something else",
    GPU_UNKNOWN: "no record of the loop",
}
"""A part of the GPU's idle time, after its seconds ("7.4 s waiting on ...")."""


def gpu_sentence(gpu: Mapping[str, Any]) -> str:
    """One sentence for one GPU of `gpu_evidence`: its idle time and the parts of it by cause,
    largest first, e.g. "GPU 0 idle 17.4 s (100 % of the time): 10.0 s start-up (before the
    loop's first batch), 7.4 s waiting on DataLoader workers busy on the CPU"."""
    idle_s = gpu["idle_ns"] / 1e9
    head = f"GPU {gpu['gpu']} idle {idle_s:.1f} s ({gpu['idle_pct']:.0f} % of the time)"
    parts = [(c, ns) for c, ns in gpu.get("idle_parts_ns", {}).items() if ns > 0]
    if not gpu["spans"] or not parts:
        return f"GPU {gpu['gpu']} idle {gpu['idle_pct']:.0f} % of the time"
    shown = parts[:MAX_PARTS_SAID]
    words = [f"{ns / 1e9:.1f} s {PART_WORDS.get(c, c)}" for c, ns in shown]
    rest = sum(ns for _, ns in parts[MAX_PARTS_SAID:])
    if rest:
        words.append(f"{rest / 1e9:.1f} s in other states")
    return f"{head}: {', '.join(words)}"


def gpu_sentences(evidence: Mapping[str, Any]) -> list[str]:
    return [gpu_sentence(g) for g in evidence["gpus"]]
