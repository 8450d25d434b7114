"""The linked BPF object: every program keeps the stage it was written in (the self-cost tables
name programs "stage/name"), read from the object's ELF symbols without loading it."""

import pytest

from tracer.kernel.elf import function_files
from tracer.kernel.loader import BPF_DIR, OBJECT

STAGES = {"proc", "syscall", "pagecache", "block", "sched", "memory", "cuda"}


@pytest.fixture
def built():
    path = BPF_DIR / OBJECT
    if not path.exists():
        pytest.skip(f"{path} is not built (make build)")
    return path


def test_every_program_has_its_stage(built):
    files = function_files(built)
    stages = {name: f.removesuffix(".bpf.c") for name, f in files.items()}
    assert set(stages.values()) == STAGES
    assert stages["fork_btf"] == "proc" and stages["track"] == "proc"
    assert stages["free_slot"] == "proc"
    assert stages["sys_enter"] == "syscall" and stages["sys_exit"] == "syscall"
    assert stages["sys_enter_tp"] == stages["sys_enter_pos_tp"] == stages["sys_exit_tp"] == "syscall"
    assert stages["add_page_raw"] == "pagecache"
    assert stages["rq_issue_raw"] == "block" and stages["io_start_raw"] == "block"
    assert stages["switch_btf"] == "sched"
    assert stages["cuda_enter"] == stages["cuda_exit"] == "cuda"
