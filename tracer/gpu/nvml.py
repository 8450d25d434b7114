"""GPU sampling through NVML; with `tracer.gpu.idle`, what the training loop was doing while the GPU idled.

The pieces, each usable alone (the live session uses `GpuMonitor`, `iotrace report` the functions):

- `GpuSource`: the one small interface to the GPU. `NvmlSource` implements it with nvidia-ml-py
  (`pynvml`, imported only inside it); tests replay recorded NVML streams through the same interface.
  `open_source("auto" | "off" | "0,2")` applies the `--gpu` rules.
- `calibrate`: NVML sample timestamps are microseconds on a clock NVML does not document (wall clock
  on some drivers, time since boot on others). The clock whose current value the newest sample is
  closest to wins; every timestamp written is UTC ns.
- `GpuSampler.poll(ts_ns)`: rows of the `gpu` table, one per NVML utilisation sample. When the
  driver's sample buffer has nothing new (an idle GPU empties it: that is idleness, not missing data)
  one row from `nvmlDeviceGetUtilizationRates` stands for the time since the previous row.
- `IdleDetector` / `idle_spans`: hard idle spans (util <= 5 % for at least 2 consecutive samples);
  `soft_idle_s`: sum of (1 - util/100) * period, for stalls shorter than a sample.
- `attribute`: rows of the `gpu_idle` table: each span with the share of it the training loop spent in
  each state of the `loop` table, the dominant state as cause, and a confidence.
- `gpu_evidence` / `gpu_sentence`: numbers and a sentence for the findings ("GPU 0 idle 62 % of the
  time; 85 % of that while the loop waited on DataLoader reads").

Which process owns a GPU: NVML lists the compute processes on each GPU (host PIDs, most device
memory first); `gpu_owners` maps them to traced `main` processes (DDP: one rank per GPU; rank 0's
stray context on other GPUs holds less memory and loses). A GPU NVML names no traced process on
(a container's PIDs it cannot see; offline) goes to the rank or `main` process whose environment
gives it that GPU (CUDA_VISIBLE_DEVICES at its LOCAL_RANK, `tracer.core.roles.cuda_device`);
failing that, to the single traced `main` process; with several and no information its spans
get pid null and cause "unknown".

Times: all `*_ns` arguments and row values are int nanoseconds (timestamps since the Unix epoch, UTC);
the functions that read rows also accept pandas Timestamps / numpy datetime64 (rows read back with
`DataFrame.to_dict("records")`).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tracer.gpu.idle import (
    STARTUP_DECIDED_NS,
    IdleDetector,
    IdleSpan,
    StartupSignals,
    attribute,
    first_loop_ns,
    gpu_owners,
    gpu_startup_end,
    ns_of,
)

T = TypeVar("T")

DEFAULT_PERIOD_NS = 166_666_667
"""NVML's utilisation sample period on most data-centre GPUs (1/6 s; between 1/6 s and 1 s)."""

MAX_PERIOD_NS = 1_000_000_000
"""NVML never averages one utilisation sample over more than a second."""

CALIBRATION_TOLERANCE_NS = 5_000_000_000
"""The newest sample must be within this of a clock's current value for the clock to fit."""

CALIBRATION_ATTEMPTS = 10
"""Polls with samples that fit no clock before the sampler anchors the newest sample at now."""

CLOCKS = ("realtime", "boottime", "monotonic")
"""Candidate clocks of NVML timestamps, in order of preference on a tie."""


# -- errors -------------------------------------------------------------------------------------


class GpuUnavailable(Exception):
    """No GPU sampling is possible (no NVML, no driver, no such GPU). The message is one line naming
    what is wrong and what to do; with an explicit `--gpu 0,2` the CLI exits 3 with it."""


class GpuError(Exception):
    """One NVML query failed for one device (permission denied, not supported, ...); the message is
    one line. Sampling of other devices, and tracing of I/O, go on."""


class GpuLost(GpuError):
    """The device stopped answering (fallen off the bus, Xid): it is not polled again."""


class CalibrationError(ValueError):
    """The sample timestamps fit none of the clocks."""


# -- the source interface -----------------------------------------------------------------------


@dataclass(frozen=True)
class GpuDevice:
    index: int  # NVML device index (nvidia-smi's numbering; CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID)
    uuid: str
    name: str
    mig: bool = False  # MIG mode is enabled: NVML reports no utilisation for it


class GpuSource(Protocol):
    """What iotrace needs from a GPU. Each method raises `GpuError` (or `GpuLost`) for a failed query."""

    def devices(self) -> list[GpuDevice]:
        """The devices to sample, in index order."""
        ...

    def samples(self, index: int, since_us: int) -> list[tuple[int, float]]:
        """Utilisation samples (timestamp in NVML's microseconds, util %) newer than `since_us`
        (0: the whole buffer), oldest first; [] when the buffer has none (NVML_ERROR_NOT_FOUND)."""
        ...

    def utilization(self, index: int) -> tuple[float, float]:
        """(gpu %, memory %) over the driver's last sample period (nvmlDeviceGetUtilizationRates)."""
        ...

    def pcie(self, index: int) -> tuple[float, float] | None:
        """(rx bytes/s, tx bytes/s) over the last 20 ms, or None where not supported."""
        ...

    def processes(self, index: int) -> list[int]:
        """PIDs (host PID namespace) with a compute context on the device, most memory first."""
        ...

    def close(self) -> None:
        """Release the library (nvmlShutdown)."""
        ...


class NvmlSource:
    """`GpuSource` over nvidia-ml-py. Raises `GpuUnavailable` when NVML cannot start."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as e:
            raise GpuUnavailable(
                "no NVML: the nvidia-ml-py package is not installed (pip install nvidia-ml-py)"
            ) from e
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise GpuUnavailable(_init_reason(pynvml, e)) from e
        self._handles: dict[int, Any] = {}
        self._devices: list[GpuDevice] = []
        self._pcie_unsupported: set[int] = set()
        try:
            count = pynvml.nvmlDeviceGetCount()
            for index in range(count):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                self._handles[index] = handle
                self._devices.append(GpuDevice(index, _text(pynvml.nvmlDeviceGetUUID(handle)),
                                               _text(pynvml.nvmlDeviceGetName(handle)),
                                               self._mig(handle)))
        except pynvml.NVMLError as e:
            self.close()
            raise GpuUnavailable(f"NVML cannot list the GPUs: {e}") from e

    def _mig(self, handle: Any) -> bool:
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError:  # NOT_SUPPORTED (no MIG on this GPU), FUNCTION_NOT_FOUND (old driver)
            return False
        return current == nvml.NVML_DEVICE_MIG_ENABLE

    def _error(self, index: int, what: str, e: Exception) -> GpuError:
        nvml = self._nvml
        value = getattr(e, "value", None)
        if value == nvml.NVML_ERROR_GPU_IS_LOST:
            return GpuLost(f"GPU {index} is lost (fallen off the bus? see dmesg for an Xid): "
                           "its sampling stops, tracing of I/O goes on")
        if value == nvml.NVML_ERROR_NO_PERMISSION:
            return GpuError(f"GPU {index}: permission denied reading {what} (run iotrace as root)")
        return GpuError(f"GPU {index}: NVML cannot read {what}: {e}")

    def devices(self) -> list[GpuDevice]:
        return list(self._devices)

    def samples(self, index: int, since_us: int) -> list[tuple[int, float]]:
        nvml = self._nvml
        try:
            value_type, raw = nvml.nvmlDeviceGetSamples(self._handles[index],
                                                         nvml.NVML_GPU_UTILIZATION_SAMPLES, since_us)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_NOT_FOUND:  # nothing new in the buffer
                return []
            raise self._error(index, "utilisation samples", e) from e
        field = _VALUE_FIELDS.get(value_type, "uiVal")
        out = [(int(s.timeStamp), float(getattr(s.sampleValue, field))) for s in raw]
        return sorted((ts, v) for ts, v in out if ts > since_us)

    def utilization(self, index: int) -> tuple[float, float]:
        nvml = self._nvml
        try:
            rates = nvml.nvmlDeviceGetUtilizationRates(self._handles[index])
        except nvml.NVMLError as e:
            raise self._error(index, "utilisation rates", e) from e
        return float(rates.gpu), float(rates.memory)

    def pcie(self, index: int) -> tuple[float, float] | None:
        if index in self._pcie_unsupported:
            return None
        nvml = self._nvml
        handle = self._handles[index]
        try:
            # KB/s, each a 20 ms byte count taken during the call; NVML's KB is 1024 bytes.
            rx = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
            tx = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
        except nvml.NVMLError as e:
            if e.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                self._pcie_unsupported.add(index)
                return None
            raise self._error(index, "PCIe throughput", e) from e
        return float(rx) * 1024.0, float(tx) * 1024.0

    def processes(self, index: int) -> list[int]:
        nvml = self._nvml
        handle = self._handles[index]
        try:
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)  # the _v3 entry point
            except nvml.NVMLLibraryMismatchError:  # a driver older than the binding
                procs = nvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)
        except nvml.NVMLError as e:
            raise self._error(index, "its processes", e) from e
        procs = sorted(procs, key=lambda p: -(p.usedGpuMemory or 0))
        seen: list[int] = []
        for p in procs:  # one entry per (process, MIG instance): keep each pid once
            if int(p.pid) not in seen:
                seen.append(int(p.pid))
        return seen

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing must never fail the session
            self._nvml.nvmlShutdown()


_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
"""nvmlValueType_t (NVML_VALUE_TYPE_*) -> the nvmlValue_t union member holding the value."""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _init_reason(nvml: Any, e: Any) -> str:
    value = getattr(e, "value", None)
    if value == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return "no NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"
    if value == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "no NVML: the NVIDIA driver is not loaded (no GPU, or `modprobe nvidia`)"
    if value == nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return ("no NVML: the NVML library and the loaded NVIDIA driver differ in version "
                "(reboot, or reload the nvidia kernel module)")
    if value == nvml.NVML_ERROR_NO_PERMISSION:
        return "no NVML: permission denied opening the NVIDIA device files (/dev/nvidia*)"
    return f"no NVML: {e}"


class _Subset:
    """A source restricted to some device indices (`--gpu 0,2`)."""

    def __init__(self, source: GpuSource, indices: Sequence[int]) -> None:
        self._source = source
        self._indices = set(indices)

    def devices(self) -> list[GpuDevice]:
        return [d for d in self._source.devices() if d.index in self._indices]

    def samples(self, index: int, since_us: int) -> list[tuple[int, float]]:
        return self._source.samples(index, since_us)

    def utilization(self, index: int) -> tuple[float, float]:
        return self._source.utilization(index)

    def pcie(self, index: int) -> tuple[float, float] | None:
        return self._source.pcie(index)

    def processes(self, index: int) -> list[int]:
        return self._source.processes(index)

    def close(self) -> None:
        self._source.close()


def parse_gpu_spec(spec: str) -> str | list[int]:
    """"auto", "off", or the sorted device indices of "0,2". Raises ValueError (bad usage, exit 2)."""
    text = spec.strip().lower()
    if text in ("auto", "off"):
        return text
    try:
        indices = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        indices = []
    if not indices or min(indices) < 0:
        raise ValueError(f"--gpu {spec!r}: expected auto, off, or GPU indices such as 0 or 0,2")
    return indices


def open_source(spec: str, factory: Callable[[], GpuSource] = NvmlSource
                ) -> tuple[GpuSource | None, str | None]:
    """Apply `--gpu auto|off|0,2`: returns (source, reason).

    - "off": (None, None).
    - "auto": (source, None) when NVML and a GPU exist; (None, one-line reason) otherwise.
    - "0,2": (source of those devices, None); raises `GpuUnavailable` (CLI: exit 3) when NVML cannot
      start or a named GPU does not exist.
    In every case with a source, devices in MIG mode are kept (listed in meta) but not sampled, and
    `reason` says so in one line. A malformed spec raises ValueError (exit 2).
    """
    wanted = parse_gpu_spec(spec)
    if wanted == "off":
        return None, None
    try:
        source = factory()
    except GpuUnavailable as e:
        if wanted == "auto":
            return None, f"GPU sampling off: {e}"
        raise GpuUnavailable(f"--gpu {spec}: {e}") from e
    devices = source.devices()
    if wanted == "auto":
        if not devices:
            source.close()
            return None, "GPU sampling off: NVML found no NVIDIA GPU"
    else:
        assert isinstance(wanted, list)
        have = {d.index for d in devices}
        missing = [i for i in wanted if i not in have]
        if missing:
            source.close()
            listed = ", ".join(str(i) for i in sorted(have)) or "none"
            raise GpuUnavailable(f"--gpu {spec}: no such GPU {', '.join(map(str, missing))} "
                                 f"(this host has GPU {listed}; see nvidia-smi -L)")
        source = _Subset(source, wanted)
        devices = source.devices()
    return source, mig_reason(devices)


def mig_reason(devices: Sequence[GpuDevice]) -> str | None:
    """One line about the devices in MIG mode, or None."""
    mig = [d for d in devices if d.mig]
    if not mig:
        return None
    which = ", ".join(f"{d.index} ({d.name})" for d in mig)
    rest = "the other GPUs are sampled" if len(mig) < len(devices) else "no GPU is sampled"
    return (f"GPU {which} in MIG mode: NVML reports no utilisation for MIG devices, so idle time "
            f"is not measured there; {rest}, tracing of I/O goes on")


# -- clocks -------------------------------------------------------------------------------------


def read_clocks() -> dict[str, int]:
    """The current value of each candidate clock in ns, read back to back."""
    return {
        "boottime": time.clock_gettime_ns(time.CLOCK_BOOTTIME),
        "monotonic": time.clock_gettime_ns(time.CLOCK_MONOTONIC),
        "realtime": time.time_ns(),
    }


def calibrate(sample_ts_us: Sequence[int], now: Mapping[str, int],
              tolerance_ns: int = CALIBRATION_TOLERANCE_NS) -> tuple[str, int]:
    """Which clock NVML's sample timestamps are on, and the offset to UTC.

    `now` holds the current value in ns of "realtime" (required), "monotonic" and "boottime", read
    together right after the samples were fetched. The newest sample must lie within `tolerance_ns`
    of a clock's value (it is at most one sample period old); among the clocks that fit, the closest
    wins (a tie: realtime, boottime, monotonic). Returns (clock, offset_ns) with
    UTC ns = sample_us * 1000 + offset_ns. Raises CalibrationError when no clock fits, ValueError
    for no samples.
    """
    if not sample_ts_us:
        raise ValueError("calibrate needs at least one sample timestamp")
    newest_ns = max(sample_ts_us) * 1000
    fits = []
    for rank, clock in enumerate(CLOCKS):
        if clock in now:
            gap = abs(now[clock] - newest_ns)
            if gap <= tolerance_ns:
                fits.append((gap, rank, clock))
    if not fits:
        gaps = ", ".join(f"{c} {(now[c] - newest_ns) / 1e9:+.1f} s" for c in CLOCKS if c in now)
        raise CalibrationError(f"NVML sample timestamps fit no clock (newest sample vs {gaps})")
    clock = min(fits)[2]
    return clock, now["realtime"] - now[clock]


# -- sampling -----------------------------------------------------------------------------------


def gpu_row(ts: int, device: GpuDevice, util: float, mem: float | None,
            pcie: tuple[float, float] | None, period_ns: int) -> dict:
    """One row of the `gpu` table."""
    return {"ts": ts, "gpu": device.index, "uuid": device.uuid, "name": device.name,
            "util_pct": util, "mem_util_pct": mem,
            "pcie_rx_bytes_s": None if pcie is None else pcie[0],
            "pcie_tx_bytes_s": None if pcie is None else pcie[1],
            "sample_period_ns": period_ns}


class GpuSampler:
    """Polls a `GpuSource` once per interval into rows of the `gpu` table.

    Each row covers (ts - sample_period_ns, ts]. Sample rows: one per NVML utilisation sample, the
    period the time since the previous row (capped at 1 s). When the buffer holds nothing new, one
    row at the poll time from the utilisation rates, its period the whole time since the previous row
    (an idle GPU empties the buffer). mem_util_pct and PCIe are read once per poll and repeated on the
    poll's rows (null where unsupported). Samples from before the sampler started are dropped.

    Problems (permission denied, a lost GPU, MIG) become one line each in `notes`, once;
    `take_notes()` returns the new ones. Reading PCIe costs 2 x 20 ms per GPU per poll (NVML counts
    bytes during the call): pass pcie=False on hosts with many GPUs if that matters.
    """

    def __init__(self, source: GpuSource, clocks: Callable[[], Mapping[str, int]] = read_clocks,
                 pcie: bool = True) -> None:
        self.source = source
        self.clocks = clocks
        self.pcie = pcie
        self.devices = source.devices()
        self.clock: str | None = None  # the calibrated NVML clock; "anchored" when none fitted
        self.offset_ns: int | None = None
        self.processes: dict[int, list[int]] = {d.index: [] for d in self.devices}
        self.notes: list[str] = []
        self._noted: set[str] = set()
        self._new_notes: list[str] = []
        self._failed_calibrations = 0
        self._lost: set[int] = set()
        self.start_ns = int(clocks()["realtime"])
        self._since_us = {d.index: 0 for d in self.devices}
        self._prev_ns = {d.index: self.start_ns for d in self.devices}
        self._prev_was_sample = {d.index: False for d in self.devices}
        self._period_ns = {d.index: DEFAULT_PERIOD_NS for d in self.devices}
        reason = mig_reason(self.devices)
        if reason:
            self._note(reason)

    @property
    def sampled(self) -> list[GpuDevice]:
        """The devices polled now (not MIG, not lost)."""
        return [d for d in self.devices if not d.mig and d.index not in self._lost]

    def _or_note(self, read: Callable[[], T], why: str = "") -> T | None:
        """`read()`, or None and a note (the error, then `why`) when NVML refuses it; a GPU
        lost (GpuLost) is the caller's to handle."""
        try:
            return read()
        except GpuLost:
            raise
        except GpuError as e:
            self._note(f"{e}{why}")
            return None

    def _note(self, line: str) -> None:
        if line not in self._noted:
            self._noted.add(line)
            self.notes.append(line)
            self._new_notes.append(line)

    def take_notes(self) -> list[str]:
        """The notes added since the last call."""
        new, self._new_notes = self._new_notes, []
        return new

    def lost(self, index: int) -> bool:
        return index in self._lost

    def meta(self) -> dict:
        """For meta.json: the devices and the clock of NVML timestamps."""
        return {
            "gpus": [{"index": d.index, "uuid": d.uuid, "name": d.name, "mig": d.mig}
                     for d in self.devices],
            "nvml_clock": self.clock,
            "nvml_clock_to_utc_offset_ns": self.offset_ns,
            "notes": list(self.notes),
        }

    def _calibrate(self, ts_us: list[int]) -> bool:
        now = self.clocks()
        try:
            self.clock, self.offset_ns = calibrate(ts_us, now)
        except CalibrationError as e:
            self._failed_calibrations += 1
            if self._failed_calibrations < CALIBRATION_ATTEMPTS:
                return False  # samples from long ago, or a clock jump: try with the next ones
            self.clock, self.offset_ns = "anchored", now["realtime"] - max(ts_us) * 1000
            self._note(f"{e}: the newest sample is taken as now (timestamps approximate)")
        return True

    def poll(self, ts_ns: int) -> list[dict]:
        """Rows of the `gpu` table for everything since the previous poll; `ts_ns` is now (UTC ns)."""
        rows: list[dict] = []
        for device in self.sampled:
            try:
                rows.extend(self._poll_device(device, ts_ns))
            except GpuLost as e:
                self._lost.add(device.index)
                self._note(str(e))
            except GpuError as e:
                self._note(str(e))
        return rows

    def _poll_device(self, device: GpuDevice, ts_ns: int) -> list[dict]:
        i = device.index
        # samples: not supported under vGPU, for one, where the utilisation rates still work
        raw = self._or_note(lambda: self.source.samples(i, self._since_us[i]),
                            "; using the utilisation rates once per poll instead") or []
        bad = [v for _, v in raw if not 0.0 <= v <= 100.0]
        if bad:
            self._note(f"GPU {i}: NVML returned utilisation samples outside 0-100 % "
                       f"(e.g. {int(bad[0]) if bad[0].is_integer() else bad[0]}); they are left out")
            raw = [(t, v) for t, v in raw if 0.0 <= v <= 100.0]
        if raw:
            self._since_us[i] = max(self._since_us[i], raw[-1][0])
            if self.offset_ns is None and not self._calibrate([t for t, _ in raw]):
                raw = []
        util_now, mem = self._or_note(lambda: self.source.utilization(i)) or (None, None)
        pcie = self._or_note(lambda: self.source.pcie(i)) if self.pcie else None
        self._processes(i)

        rows = []
        if self.offset_ns is not None:
            for t_us, util in raw:
                ts = t_us * 1000 + self.offset_ns
                prev = self._prev_ns[i]
                if ts <= prev or ts > ts_ns + MAX_PERIOD_NS:
                    continue  # before the start, covered by a rates row, or a clock jump
                gap = ts - prev
                if self._prev_was_sample[i] and gap <= MAX_PERIOD_NS:
                    period = gap
                    self._period_ns[i] = gap
                else:
                    period = min(gap, self._period_ns[i])
                rows.append(gpu_row(ts, device, util, mem, pcie, period))
                self._prev_ns[i] = ts
                self._prev_was_sample[i] = True
        if not rows and util_now is not None and ts_ns > self._prev_ns[i]:
            rows.append(gpu_row(ts_ns, device, util_now, mem, pcie, ts_ns - self._prev_ns[i]))
            self._prev_ns[i] = ts_ns
            self._prev_was_sample[i] = False
        return rows

    def _processes(self, index: int) -> None:
        pids = self._or_note(lambda: self.source.processes(index))
        if pids is None:
            return
        known = self.processes[index]
        self.processes[index] = pids + [p for p in known if p not in pids]


# -- the live session's entry point -------------------------------------------------------------


class GpuMonitor:
    """What the session calls once per interval: sampling, idle spans and their attribution.

    `interval(ts_ns, loop_rows, main_of)` polls the GPUs at `ts_ns` (the interval's end, UTC ns) and
    returns (gpu rows, gpu_idle rows of the spans that ended): `poll` then `idle`; `finish()` returns
    the spans still open at the end. Loop rows are kept only as long as an open span may need them.
    In launch mode (`idle`'s `startup`), a span of a loop whose start-up's end is not decided yet
    is held until it is (`gpu_startup_end`), so that its parts are those a replay gives.
    """

    def __init__(self, source: GpuSource, clocks: Callable[[], Mapping[str, int]] = read_clocks,
                 pcie: bool = True, detector: IdleDetector | None = None) -> None:
        self.sampler = GpuSampler(source, clocks=clocks, pcie=pcie)
        self.detector = detector or IdleDetector()
        self._loop: deque[Mapping[str, Any]] = deque()
        self._owners: dict[int, int] = {}
        self._first: dict[int, int] = {}  # loop pid -> its first interval's start
        self._since: int | None = None  # the first interval's end
        self._ends: dict[int, int | None] = {}  # loop pid -> its start-up's end, once decided
        self._held: list[IdleSpan] = []  # spans of a loop whose start-up is undecided

    def interval(self, ts_ns: int, loop_rows: Iterable[Mapping[str, Any]] = (),
                 main_of: Mapping[int, int] | Callable[[int], int | None] | None = None,
                 named: Mapping[int, str] | None = None,
                 startup: StartupSignals | None = None) -> tuple[list[dict], list[dict]]:
        rows = self.poll(ts_ns)
        return rows, self.idle(ts_ns, rows, loop_rows, main_of, named, startup)

    def poll(self, ts_ns: int) -> list[dict]:
        """The GPUs' samples up to `ts_ns` (NVML calls): the `gpu` rows."""
        return self.sampler.poll(ts_ns)

    def idle(self, ts_ns: int, rows: Iterable[Mapping[str, Any]],
             loop_rows: Iterable[Mapping[str, Any]] = (),
             main_of: Mapping[int, int] | Callable[[int], int | None] | None = None,
             named: Mapping[int, str] | None = None,
             startup: StartupSignals | None = None) -> list[dict]:
        """The gpu_idle rows of the spans that ended, from poll()'s rows; no NVML call, so the
        session's step (tracer.live.step) can run it. `named`: main PID -> the GPU its
        environment gives it, for GPUs NVML lists no traced process on (`idle.gpu_owners`).
        `startup`: in launch mode, the diagnosis's signals of each loop's start-up end."""
        loop_rows = list(loop_rows)
        self._loop.extend(loop_rows)
        for pid, start in first_loop_ns(loop_rows).items():
            self._first[pid] = min(start, self._first.get(pid, start))
        self._since = ts_ns if self._since is None else self._since
        spans = self.detector.feed(rows)
        for index in [d.index for d in self.sampler.devices if self.sampler.lost(d.index)]:
            spans += self.detector.flush(index)
        if main_of is not None:
            devices = [(d.index, d.uuid) for d in self.sampler.devices]
            self._owners.update(gpu_owners(self.sampler.processes, main_of, named, devices))
        ready = self._decided(ts_ns, self._held + spans, startup)
        idle = attribute(ready, self._loop, self._owners, self._startup_ends())
        self._trim(ts_ns)
        return idle

    def _owner(self, gpu: int) -> int | None:
        """The pid `attribute` gives a span of `gpu` (its single-loop rule included)."""
        if gpu in self._owners:
            return self._owners[gpu]
        pids = {int(r["pid"]) for r in self._loop}
        return next(iter(pids)) if len(pids) == 1 else None

    def _decided(self, ts_ns: int, spans: list[IdleSpan], startup: StartupSignals | None
                 ) -> list[IdleSpan]:
        """The spans whose loop's start-up end is known (or none is looked for); the others
        are held. A start-up is decided once a DataLoader worker of the loop ran, or once
        STARTUP_DECIDED_NS passed since its first interval: no signal after that counts."""
        ready, self._held = [], []
        for span in spans:
            pid = self._owner(span.gpu)
            if startup is None or pid is None or pid in self._ends:
                ready.append(span)
                continue
            first = self._first.get(pid)
            worker = startup.first_worker_ns.get(pid)
            since = first if first is not None else self._since
            if worker is not None or (since is not None and ts_ns - since > STARTUP_DECIDED_NS):
                self._ends[pid] = gpu_startup_end(worker, startup.first_data_ns.get(pid), first)
                ready.append(span)
            else:
                self._held.append(span)
        return ready

    def _startup_ends(self) -> dict[int, int]:
        return {pid: end for pid, end in self._ends.items() if end is not None}

    def _trim(self, ts_ns: int) -> None:
        # A span that starts in the next poll may begin up to a sample period before ts_ns.
        keep_from = ts_ns - 2 * MAX_PERIOD_NS
        open_since = self.detector.open_since()
        if open_since is not None:
            keep_from = min(keep_from, open_since)
        if self._held:
            keep_from = min(keep_from, *(span.start for span in self._held))
        while self._loop and ns_of(self._loop[0]["ts"]) < keep_from:
            self._loop.popleft()

    def finish(self, startup: StartupSignals | None = None) -> list[dict]:
        """gpu_idle rows of the spans open at the end of the trace, and of those held: a loop's
        start-up undecided at the end is decided on what is known (`startup`)."""
        spans = self._held + self.detector.flush()
        self._held = []
        for span in spans:
            pid = self._owner(span.gpu)
            if startup is not None and pid is not None and pid not in self._ends:
                self._ends[pid] = gpu_startup_end(startup.first_worker_ns.get(pid),
                                                  startup.first_data_ns.get(pid),
                                                  self._first.get(pid))
        return attribute(spans, self._loop, self._owners, self._startup_ends())

    def take_notes(self) -> list[str]:
        return self.sampler.take_notes()

    def meta(self) -> dict:
        return self.sampler.meta()

    def close(self) -> None:
        self.sampler.source.close()
