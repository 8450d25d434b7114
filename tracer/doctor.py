"""`iotrace doctor`: what this host supports, one verdict line each, and what to do about a gap."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import TextIO

from tracer.core.histogram import format_ns
from tracer.kernel import libbpf as _libbpf
from tracer.kernel.host import btf_path, btf_problem, privilege_problem
from tracer.kernel.loader import (
    BPF_DIR,
    OBJECT,
    BadSetting,
    HostCannotTrace,
    classic_syscalls_missing,
)
from tracer.kernel.probes import Probes
from tracer.live.stacks import READER, find_reader, missing_line

SELF_CALLS = 20_000  # page-cache pread64 calls the doctor traces of itself to measure the cost
SELF_TOP = 4  # programs named in that line


@dataclass
class Check:
    name: str
    ok: bool | None  # None: optional feature, absent
    detail: str


def _libbpf_check() -> Check:
    try:
        major, minor = _libbpf.version()
    except _libbpf.LibbpfMissing as e:
        return Check("libbpf", False, f"{e}: apt-get install libbpf1 (libbpf >= 1.0)")
    ok = major >= 1
    return Check("libbpf", ok, f"libbpf {major}.{minor}" + ("" if ok else ": need >= 1.0"))


def _nvml_check() -> Check:
    try:
        import pynvml
    except ImportError:
        return Check("NVML", None, "nvidia-ml-py is not installed: pip install nvidia-ml-py "
                     "(GPU sampling off)")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return Check("NVML", None, f"no NVIDIA driver or GPU ({e}): GPU sampling off")
    try:
        n = pynvml.nvmlDeviceGetCount()
        return Check("NVML", True, f"{n} GPU(s), driver {pynvml.nvmlSystemGetDriverVersion()}")
    finally:
        pynvml.nvmlShutdown()


def _stacks_check() -> Check:
    """The Python stacks' reader (tracer.live.stacks): findings name the user's line with it."""
    reader = find_reader()
    if reader is None:
        return Check("Python stacks", None, f"{missing_line()}: findings name no line of code")
    try:
        done = subprocess.run([reader, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("Python stacks", False, f"{reader} does not run ({e}): reinstall {READER}")
    version = done.stdout.strip() or READER
    return Check("Python stacks", done.returncode == 0, f"{version} ({reader})")


def _load_attach_checks() -> list[Check]:
    """Loads and attaches the programs, tracking the doctor itself; with BPF stats, measures
    what tracing costs a page-cache pread64."""
    try:
        probes = Probes()
    except BadSetting as e:
        return [Check("load+attach", False, str(e))]
    checks = []
    try:
        probes.load()
        unavailable = probes.stats.enable()
        probes.loader.track(os.getpid())
        probes.loader.attach()
        n = len(probes.loader.links)
        checks.append(Check("load+attach", True, f"{n} programs attached and detached; "
                            f"block_io_start: {probes.loader.features.get('block_io_start')}"))
        if unavailable:
            checks.append(Check("BPF stats", None, f"per-program cost unavailable: {unavailable}"))
        else:
            before = "" if probes.stats.before is None else (
                f"; kernel.bpf_stats_enabled stays {probes.stats.before}")
            checks.append(Check("BPF stats", True, "per-program run counts and times "
                                "(BPF_ENABLE_STATS), counted for 2 % of every "
                                f"interval while iotrace runs (--bpf-stats){before}"))
            checks.append(_measure_self(probes))
    except HostCannotTrace as e:
        checks.append(Check("load+attach", False, str(e)))
    finally:
        probes.close()
    return checks


def _program_times(probes: Probes) -> dict[str, tuple[int, int]]:
    return {f"{obj}/{name}": (st.run_cnt, st.run_time_ns)
            for obj, name, _, st in probes.stats.program_stats()}


def _measure_self(probes: Probes, calls: int = SELF_CALLS) -> Check:
    """`calls` pread64 of a cached page by this (tracked) process: the BPF time they added,
    per call and per program. Programs run for the whole host, so others' work adds a little."""
    fd = os.open(BPF_DIR / OBJECT, os.O_RDONLY)
    try:
        os.pread(fd, 4096, 0)  # cached from here on
        before = _program_times(probes)
        for _ in range(calls):
            os.pread(fd, 4096, 0)
        after = _program_times(probes)
    finally:
        os.close(fd)
    delta = {k: (after[k][0] - before.get(k, (0, 0))[0], after[k][1] - before.get(k, (0, 0))[1])
             for k in after}
    ran = sorted(((k, n, ns) for k, (n, ns) in delta.items() if n > 0), key=lambda r: -r[2])
    total_ns = sum(ns for _, _, ns in ran)
    per_prog = ", ".join(f"{k} {ns / n:.0f} ns/run" for k, n, ns in ran[:SELF_TOP])
    return Check("own cost", True, f"{calls} traced page-cache pread64: "
                 f"{format_ns(total_ns / calls)} of BPF per call ({per_prog})")


def _syscall_hooks_check() -> Check:
    """Which syscall hooks each mode takes here (loader.SYSCALL_HOOKS): --auto wants the classic
    tracepoints, which need tracefs."""
    why = classic_syscalls_missing()
    if why is None:
        return Check("syscall hooks", True, "--pid and -- CMD: raw sys_enter/sys_exit; --auto: "
                     "the classic per-syscall tracepoints (the host's other syscalls run none)")
    return Check("syscall hooks", None, f"raw sys_enter/sys_exit in every mode: {why}; --auto "
                 "would take the classic tracepoints, which cost the host's other syscalls less")


def _ringbuf_check(privileged: bool) -> Check:
    """Probing creates a map, which needs the privileges; without them the kernel's BTF tells
    whether it has ring buffers (struct bpf_ringbuf), so a missing privilege is not blamed on
    the kernel."""
    if privileged:
        ring = _libbpf.probe_ringbuf()
        return Check("ring buffer", ring, "BPF_MAP_TYPE_RINGBUF supported" if ring else
                     "unsupported (kernel < 5.8): upgrade the kernel")
    if _libbpf.btf_has_struct("bpf_ringbuf"):
        return Check("ring buffer", None, "the kernel has ring buffers (its BTF has struct "
                     "bpf_ringbuf); not probed without the privileges above")
    return Check("ring buffer", None, "not probed without the privileges above (creating a "
                 "map needs them); the kernel's BTF has no struct bpf_ringbuf (kernel < 5.8?)")


def run_checks() -> list[Check]:
    checks = []
    problem = problem_priv = privilege_problem()
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()} with CAP_BPF+CAP_PERFMON"
    checks.append(Check("privileges", problem is None, problem or who))
    problem = btf_problem()
    checks.append(Check("BTF", problem is None, problem or btf_path()))
    lib = _libbpf_check()
    checks.append(lib)
    if lib.ok:
        btf_tp = _libbpf.has_btf_tracepoint("sched_switch")
        checks.append(Check("tp_btf", True, "tp_btf programs (direct BTF access)" if btf_tp
                            else "no BTF for tracepoints: raw_tp programs used instead"))
        checks.append(_ringbuf_check(privileged=problem_priv is None))
        built = (BPF_DIR / OBJECT).exists()
        checks.append(Check("BPF objects", built, f"{BPF_DIR / OBJECT}" if built else
                            f"missing {OBJECT}: run 'make build'"))
        if all(c.ok for c in checks):
            checks.extend(_load_attach_checks())
        elif problem_priv and all(c.ok is not False for c in checks[1:]):
            checks.append(Check("load+attach", None, "not tried without the privileges above"))
        checks.append(_syscall_hooks_check())
    checks.append(Check("kprobes/fentry", None, "not used: iotrace needs only tracepoints"))
    checks.append(_nvml_check())
    checks.append(_stacks_check())
    return checks


def doctor(out: TextIO) -> int:
    checks = run_checks()
    for c in checks:
        verdict = {True: "ok", False: "FAIL", None: "-"}[c.ok]
        print(f"{verdict:>4}  {c.name:<15} {c.detail}", file=out)
    failed = [c.name for c in checks if c.ok is False]
    if failed:
        print(f"\nThis host cannot trace: fix {', '.join(failed)} (see above).", file=out)
        return 3
    print("\nThis host can trace with iotrace.", file=out)
    return 0
