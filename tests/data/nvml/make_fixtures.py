"""Writes the recorded NVML streams used by tests/test_gpu.py (run from the repo root).

Each JSON file is what `RecordedSource` replays:
- "clock_at": the value of each clock at NVML time "nvml_us" (they all advance together);
- "devices": per device its identity, "samples" (the driver's utilisation sample stream,
  [timestamp_us, util_pct] on NVML's clock), "rates" ([from_us, gpu_pct, mem_pct]: what
  nvmlDeviceGetUtilizationRates answers from that NVML time on), "pcie" ([rx, tx] bytes/s or null),
  "processes" (compute PIDs, most memory first) and "errors" (method -> NVML error text).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
REALTIME_NS = 1_760_000_000_000_000_000  # 2025-10-09T08:53:20Z
UPTIME_US = 86_400_000_000 + 123_456  # a day after boot


def write(name: str, data: dict) -> None:
    text = json.dumps(data, indent=1)
    # One [timestamp, value] pair (or other short list of numbers) per line.
    text = re.sub(r"\[\s+([-\d.e+]+(?:,\s+[-\d.e+]+)*)\s+\]",
                  lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]", text)
    (HERE / name).write_text(text + "\n")


def busy() -> dict:
    # A healthy job: ~95 % busy, samples every 1/6 s with a little jitter, timestamps on the wall
    # clock (most drivers); one bogus sample value as NVML sometimes returns (dropped by the sampler).
    t0 = REALTIME_NS // 1000
    samples = []
    for k in range(1, 31):  # 5 s
        jitter = ((k * 37) % 7 - 3) * 150
        util = (94, 96, 95, 97, 93, 95)[k % 6]
        samples.append([t0 + k * 166_667 + jitter, util])
    samples[12][1] = 808334905
    return {
        "description": "busy GPU, ~95 %, realtime clock, 6 samples/s, one bogus sample value",
        "clock_at": {"nvml_us": t0, "realtime": REALTIME_NS, "boottime": UPTIME_US * 1000,
                     "monotonic": UPTIME_US * 1000},
        "devices": [{
            "index": 0, "uuid": "GPU-5b2a6f4e-1c1d-4e8a-9d0e-0f3c2a7b9e11",
            "name": "NVIDIA H100 80GB HBM3", "mig": False, "samples": samples,
            "rates": [[t0, 95, 41]], "pcie": [12_500_000_000.0, 310_000_000.0],
            "processes": [4242], "errors": {},
        }],
    }


def stalls() -> dict:
    # A starved job: ~95 % busy, stalls to 0 % from 2.9 s to 5.0 s and from 7.9 s to 10.0 s
    # (2 s every 5 s); samples every 200 ms; timestamps on CLOCK_BOOTTIME (some drivers), on a host
    # that was suspended once (monotonic is 42 s behind boottime, so the two can be told apart).
    t0 = UPTIME_US
    samples = []
    for k in range(1, 56):  # 11 s; sample k covers (k-1, k] * 200 ms
        if k in (15, 40):
            util = 50  # half of the period stalled
        elif 16 <= k <= 25 or 41 <= k <= 50:
            util = 3 if k == 20 else 0
        else:
            util = 95
        samples.append([t0 + k * 200_000, util])
    return {
        "description": "stalls to 0 % for 2 s every 5 s, boottime clock, 5 samples/s",
        "clock_at": {"nvml_us": t0, "realtime": REALTIME_NS, "boottime": t0 * 1000,
                     "monotonic": t0 * 1000 - 42_000_000_000},
        "devices": [{
            "index": 0, "uuid": "GPU-8f7e6d5c-4b3a-2910-8a7b-6c5d4e3f2a1b",
            "name": "NVIDIA A100-SXM4-80GB", "mig": False, "samples": samples,
            "rates": [[t0, 95, 30]], "pcie": None,
            "processes": [7777, 4242], "errors": {},
        }],
    }


def idle() -> dict:
    # A GPU with a context but no kernels: the driver's sample buffer stays empty
    # (nvmlDeviceGetSamples: NVML_ERROR_NOT_FOUND); the utilisation rates say 0 %.
    t0 = UPTIME_US
    return {
        "description": "idle GPU, empty sample buffer, rates 0 %",
        "clock_at": {"nvml_us": t0, "realtime": REALTIME_NS, "boottime": t0 * 1000,
                     "monotonic": t0 * 1000},
        "devices": [{
            "index": 0, "uuid": "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
            "name": "NVIDIA L4", "mig": False, "samples": [],
            "rates": [[t0, 0, 0]], "pcie": [0.0, 0.0], "processes": [4242], "errors": {},
        }],
    }


def mig() -> dict:
    # GPU 0 in MIG mode (NVML: Not Supported for utilisation), GPU 1 a normal busy GPU.
    t0 = REALTIME_NS // 1000
    return {
        "description": "GPU 0 in MIG mode, GPU 1 busy",
        "clock_at": {"nvml_us": t0, "realtime": REALTIME_NS, "boottime": UPTIME_US * 1000,
                     "monotonic": UPTIME_US * 1000},
        "devices": [
            {"index": 0, "uuid": "GPU-11111111-2222-3333-4444-555555555555",
             "name": "NVIDIA H100 80GB HBM3", "mig": True, "samples": [], "rates": [],
             "pcie": None, "processes": [],
             "errors": {"samples": "Not Supported", "utilization": "Not Supported",
                        "processes": "Not Supported"}},
            {"index": 1, "uuid": "GPU-66666666-7777-8888-9999-000000000000",
             "name": "NVIDIA H100 80GB HBM3", "mig": False,
             "samples": [[t0 + k * 166_667, 90] for k in range(1, 13)],
             "rates": [[t0, 90, 20]], "pcie": None, "processes": [5151], "errors": {}},
        ],
    }


if __name__ == "__main__":
    write("busy.json", busy())
    write("stalls.json", stalls())
    write("idle.json", idle())
    write("mig.json", mig())
