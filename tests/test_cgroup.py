"""A cgroup path's container and pod (tracer.core.cgroup), on the paths the usual runtimes make,
and the names of a cgroup's processes (tracer.live.cgroups) on a made-up hierarchy."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from tracer.core.cgroup import Container, container_of, short_name
from tracer.live.cgroups import CgroupNames, blkcg_root, describe

CID = "3f1c9b2a7d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4"
UID = "5e0c8b2f-1a3d-4c5e-9f7a-0b1c2d3e4f5a"


@pytest.mark.parametrize("path, want", [
    (f"/docker/{CID}", Container(CID, None, "docker")),
    (f"/system.slice/docker-{CID}.scope", Container(CID, None, "docker")),
    (f"/machine.slice/libpod-{CID}.scope", Container(CID, None, "podman")),
    (f"/kubepods/burstable/pod{UID}/{CID}", Container(CID, UID, None)),
    (f"/kubepods/pod{UID}/{CID}", Container(CID, UID, None)),
    ("/kubepods.slice/kubepods-besteffort.slice/"
     f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
     Container(CID, UID, "containerd")),
    (f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope",
     Container(CID, UID, "cri-o")),
    (f"/kubepods/besteffort/pod{UID}", Container(None, UID, None)),  # the pod's own cgroup
    (f"/docker/{CID}/nested", Container(CID, None, "docker")),  # below a container's
    ("/user.slice/user-1000.slice/session-3.scope", Container(None, None, None)),
    ("/iotrace-train-1234", Container(None, None, None)),
    (f"/docker/{CID[:40]}", Container(None, None, None)),  # not an ID: too short
    ("/", Container(None, None, None)),
    (None, Container(None, None, None)),
])
def test_container_of(path, want):
    assert container_of(path) == want


def test_short_name():
    assert short_name(f"/docker/{CID}") == f"container {CID[:12]}"
    assert short_name(f"/kubepods/burstable/pod{UID}/{CID}") == (
        f"container {CID[:12]} of pod {UID}")
    assert short_name("/iotrace-x") == "/iotrace-x" and short_name(None) == ""
    # as a trace's rows give them (a redacted path names no container itself)
    assert short_name("/5f1e0a9b2c/77aa01bc3d", CID, UID) == f"container {CID[:12]} of pod {UID}"


def test_describe():
    assert describe(Counter({"dd": 4, "python3": 1})) == "4 x dd, python3"
    assert describe(Counter("abcde")) == "a, b, c and 2 more"
    assert describe(Counter()) is None


def test_ids_are_inode_numbers_of_the_hierarchys_folders(tmp_path):
    """The walk names each folder of the hierarchy by its inode number (the kernfs id that the
    kernel reads from a bio); an id of a folder made later is found by walking again."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    names = CgroupNames(str(tmp_path))
    assert names.path(os.stat(tmp_path / "a" / "b").st_ino) == "/a/b"
    assert names.path(os.stat(tmp_path).st_ino) == "/"
    assert names.path(0) is None
    (tmp_path / "c").mkdir()
    names._walked = float("-inf")  # (a walk is at most every RESCAN_S)
    assert names.path(os.stat(tmp_path / "c").st_ino) == "/c"
    (tmp_path / "a" / "cgroup.procs").write_text(f"{os.getpid()}\n999999999\n")
    mine = Path("/proc/self/comm").read_text().strip()
    assert names.processes("/a") == Counter({mine: 1})
    assert names.processes("/a", exclude=[os.getpid()]) == Counter()
    assert names.processes("/gone") == Counter()
    (tmp_path / "cgroup.procs").write_text(f"{os.getpid()}\n")
    assert names.processes("/") == Counter()  # the root's kernel-thread requests: the host's


def test_the_blkio_hierarchy_is_preferred(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "30 1 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "31 1 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
        "32 1 0:28 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio\n")
    assert blkcg_root(str(info)) == "/sys/fs/cgroup/blkio"
    info.write_text("30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    assert blkcg_root(str(info)) == "/sys/fs/cgroup"
