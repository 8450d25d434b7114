"""Which programs hook the I/O syscalls (loader.SYSCALL_HOOKS), chosen from the mode, the
IOTRACE_FORCE knob and what tracefs has: a fake tracefs tree, no privileges."""

from pathlib import Path

from tracer.kernel.loader import (
    CLASSIC_SYSCALLS,
    SYSCALL_HOOKS,
    choose_syscall_hooks,
    classic_syscalls_missing,
)


def fake_tracefs(root: Path, leave_out: str = "") -> Path:
    for way, names in CLASSIC_SYSCALLS.values():
        for name in names:
            event = f"sys_{way}_{name}"
            if event != leave_out:
                (root / "events" / "syscalls" / event).mkdir(parents=True)
                (root / "events" / "syscalls" / event / "id").write_text("1\n")
    return root


def test_every_syscall_has_an_enter_and_an_exit():
    enters = [n for prog in ("sys_enter_tp", "sys_enter_pos_tp") for n in CLASSIC_SYSCALLS[prog][1]]
    assert sorted(enters) == sorted(CLASSIC_SYSCALLS["sys_exit_tp"][1])
    assert len(set(enters)) == len(enters) == 15  # op_of_syscall's (bpf/syscalls.bpf.h)
    assert set(SYSCALL_HOOKS["classic"]) == set(CLASSIC_SYSCALLS)


def test_mode_and_knob(tmp_path):
    dirs = (str(tmp_path / "debug" / "tracing"), str(fake_tracefs(tmp_path / "tracing")))
    assert classic_syscalls_missing(dirs) is None
    assert choose_syscall_hooks(False, set(), dirs) == ("raw", None)
    assert choose_syscall_hooks(True, set(), dirs) == ("classic", None)
    assert choose_syscall_hooks(True, {"raw_syscalls"}, dirs) == ("raw", None)
    assert choose_syscall_hooks(False, {"classic_syscalls"}, dirs) == ("classic", None)
    assert choose_syscall_hooks(False, {"raw_tp", "mixed_syscalls"}, dirs) == ("mixed", None)


def test_without_tracefs_the_raw_pair_and_why(tmp_path):
    dirs = (str(tmp_path / "debug" / "tracing"), str(tmp_path / "tracing"))
    hooks, why = choose_syscall_hooks(True, set(), dirs)
    assert hooks == "raw"
    assert why == (f"classic syscall hooks: no tracefs at {tmp_path}/tracing (mount -t tracefs "
                   f"nodev {tmp_path}/tracing); the raw pair instead")
    fake_tracefs(tmp_path / "tracing", leave_out="sys_exit_pwritev2")
    hooks, why = choose_syscall_hooks(True, set(), dirs)
    assert hooks == "raw" and "no tracepoint syscalls:sys_exit_pwritev2 in" in why
    # libbpf looks in debugfs first when it is there: so does the check
    fake_tracefs(tmp_path / "debug" / "tracing")
    assert choose_syscall_hooks(True, set(), dirs) == ("classic", None)
