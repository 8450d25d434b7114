"""What this host offers for tracing: privileges, BTF, libbpf. Shared by the tracer and `doctor`."""

from __future__ import annotations

import os

BTF_ENV = "IOTRACE_BTF"  # overrides the BTF path (tests, unusual kernels)
DEFAULT_BTF = "/sys/kernel/btf/vmlinux"

CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


def btf_path() -> str:
    return os.environ.get(BTF_ENV, DEFAULT_BTF)


def effective_caps(status_path: str = "/proc/self/status") -> int:
    """The CapEff bit mask of this process ("CapEff:\t000001ffffffffff")."""
    with open(status_path) as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def privilege_problem() -> str | None:
    """None when this process may load and attach tracing programs, else what is missing."""
    caps = effective_caps()
    if caps >> CAP_SYS_ADMIN & 1 or (caps >> CAP_BPF & 1 and caps >> CAP_PERFMON & 1):
        return None
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    return (f"running as {who} without CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): "
            "run iotrace as root (sudo iotrace ...), or in a container with --privileged")


def btf_problem() -> str | None:
    path = btf_path()
    if os.path.exists(path):
        return None
    return (f"{path} is missing: this kernel has no BTF type information, which iotrace's CO-RE "
            "programs need (a kernel built with CONFIG_DEBUG_INFO_BTF=y; most distribution "
            "kernels since 2020 have it)")


def tracing_problem() -> str | None:
    """The first reason this host cannot trace (checked before anything is loaded)."""
    return privilege_problem() or btf_problem()


TRACER_NICE = 10  # the tracer's niceness while it traces (SCHED_BATCH too): see yield_to_job


def yield_to_job() -> None:
    """Makes every thread of this process give way to the traced job on a busy CPU: SCHED_BATCH
    (the tracer waking does not preempt a running task) at nice 10 (the job, waking, preempts
    the tracer at once). On 2 CPUs the tracer otherwise took the CPU of an O_DIRECT loop just
    as its reads completed (3.6 % of the loop's time spent waiting for its CPU, against 0.3 %
    untraced). Called once attached: attaching runs at the normal priority, so that a busy
    host does not delay it. Threads started later inherit it; the traced command, forked
    before, does not."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(tid), os.SCHED_BATCH, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, int(tid), TRACER_NICE)
        except OSError:  # a thread that just ended; or no permission: keep the default
            pass
