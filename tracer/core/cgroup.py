"""Which container or pod a cgroup path belongs to, from the names that container runtimes give
their cgroups. Pure: a path in, names out; `tracer.live.cgroups` finds the path of a cgroup id.

Recognised, on cgroup v1 (a controller's hierarchy, e.g. /sys/fs/cgroup/blkio) and v2 alike,
with the cgroupfs and the systemd drivers:

    /docker/<id>                                  docker, cgroupfs driver
    /system.slice/docker-<id>.scope               docker, systemd driver
    /machine.slice/libpod-<id>.scope              podman
    /kubepods/burstable/pod<uid>/<id>             Kubernetes, cgroupfs driver
    /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/
        cri-containerd-<id>.scope                 Kubernetes, systemd driver (containerd)
        crio-<id>.scope                           ... (CRI-O)
        docker-<id>.scope                         ... (dockershim)

A container ID is 64 hex digits; a pod UID is a UUID, written with `_` for `-` by the systemd
driver (given back with `-`). A path that matches none of them has neither.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_ID = r"[0-9a-f]{64}"
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD = re.compile(rf"(?:^|/)(?:kubepods[^/]*-)?pod({_UID})(?:\.slice)?(?=/|$)")
# a runtime's name for its container's cgroup: a scope of systemd, or a bare ID
_CONTAINER = re.compile(
    rf"(?:^|/)(?:(docker|cri-containerd|crio|libpod)-({_ID})\.scope|({_ID}))(?=/|$)")
_RUNTIMES = {"docker": "docker", "cri-containerd": "containerd", "crio": "cri-o",
             "libpod": "podman"}


class Container(NamedTuple):
    container_id: str | None  # 64 hex digits
    pod_uid: str | None  # Kubernetes: the pod's UID (with dashes)
    runtime: str | None  # docker, containerd, cri-o, podman; None when the path does not say


NONE = Container(None, None, None)


def container_of(path: str | None) -> Container:
    """The container and pod whose cgroup `path` is (or is below), from its names."""
    if not path:
        return NONE
    pod = _POD.search(path)
    uid = pod.group(1).replace("_", "-") if pod else None
    found = None
    for m in _CONTAINER.finditer(path):
        found = m  # the innermost: a container nested in a pod's or a docker parent's cgroup
    if found is None:
        return Container(None, uid, None)
    prefix, scoped, bare = found.groups()
    if scoped:
        return Container(scoped, uid, _RUNTIMES[prefix])
    runtime = "docker" if re.search(r"(?:^|/)docker/", path) else None
    return Container(bare, uid, runtime)


def short_name(path: str | None, container_id: str | None = None,
               pod_uid: str | None = None) -> str:
    """How a finding names a cgroup: its container (12 digits, as `docker ps` shows it) and
    pod when it has them (given, as a trace's rows carry them, or read from the path), else
    its path; "" for none."""
    if container_id is None and pod_uid is None:
        container_id, pod_uid, _ = container_of(path)
    if container_id:
        name = f"container {container_id[:12]}"
        return f"{name} of pod {pod_uid}" if pod_uid else name
    if pod_uid:
        return f"pod {pod_uid}"
    return path or ""
