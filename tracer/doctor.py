"""`iotrace doctor`: what this host supports, one verdict line each, and what to do about a gap."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TextIO

from tracer import _libbpf
from tracer.host import btf_path, btf_problem, privilege_problem
from tracer.loader import BPF_DIR, OBJECTS, TRACEFS, HostCannotTrace, Probes, ensure_tracefs


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


def run_checks() -> list[Check]:
    checks = []
    problem = privilege_problem()
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()} with CAP_BPF+CAP_PERFMON"
    checks.append(Check("privileges", problem is None, problem or who))
    problem = btf_problem()
    checks.append(Check("BTF", problem is None, problem or btf_path()))
    if privilege_problem() is None:
        try:
            ensure_tracefs()
            checks.append(Check("tracefs", True, f"mounted at {TRACEFS}"))
        except HostCannotTrace as e:
            checks.append(Check("tracefs", False, str(e)))
    else:
        ok = os.path.exists(f"{TRACEFS}/events")
        checks.append(Check("tracefs", ok, TRACEFS if ok else
                            f"not mounted; run as root to mount it at {TRACEFS}"))
    lib = _libbpf_check()
    checks.append(lib)
    if lib.ok:
        btf_tp = _libbpf.has_btf_tracepoint("block_rq_issue")
        checks.append(Check("tp_btf", True, "tp_btf programs (direct BTF access)" if btf_tp
                            else "no BTF for tracepoints: raw_tp programs used instead"))
        ring = _libbpf.probe_ringbuf()
        checks.append(Check("ring buffer", ring, "BPF_MAP_TYPE_RINGBUF supported" if ring else
                            "unsupported (kernel < 5.8): upgrade the kernel"))
        missing = [o for o in OBJECTS if not (BPF_DIR / f"{o}.bpf.o").exists()]
        checks.append(Check("BPF objects", not missing, f"{BPF_DIR}" if not missing else
                            f"missing {', '.join(missing)}: run 'make build'"))
        if all(c.ok for c in checks):
            probes = Probes()
            try:
                probes.load()
                probes.attach()
                n = len(probes.links)
                checks.append(Check("load+attach", True, f"{n} programs attached and detached; "
                                    f"block_io_start: {probes.features.get('block_io_start')}"))
            except HostCannotTrace as e:
                checks.append(Check("load+attach", False, str(e)))
            finally:
                probes.close()
    checks.append(Check("kprobes/fentry", None, "not used: iotrace needs only tracepoints"))
    checks.append(_nvml_check())
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
