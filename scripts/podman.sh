#!/usr/bin/env bash
# podman as this project runs it: `scripts/podman.sh run ...`, `scripts/podman.sh build ...`,
# any other podman command as is. Two things of some hosts are worked around here, so that the
# scripts and tests need not know them:
#   - cgroup v1 with a cgroup2 hierarchy beside it ("hybrid"): crun refuses to start anything
#     there, runc does not; runc is taken when it is installed (Debian's package runc).
#   - root without CAP_SYS_RESOURCE (in some sandboxes): podman asks the runtime for its usual
#     1048576 open files and processes, which only a process with that capability may set; the
#     container gets limits it can set instead (at most podman's own, which it caps at 32768
#     processes).
set -euo pipefail
global=()
if [ -e /sys/fs/cgroup/unified/cgroup.controllers ] && command -v runc >/dev/null; then
    global+=(--runtime runc)
fi
cmd=${1:?usage: scripts/podman.sh COMMAND [ARGS...]}
shift
limits=()
if [ "$cmd" = run ] || [ "$cmd" = build ]; then
    cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
    if (( (16#$cap_eff >> 24 & 1) == 0 )); then  # bit 24: CAP_SYS_RESOURCE
        nofile=$(ulimit -Hn)
        nproc=$(ulimit -Hu)
        (( nproc > 32768 )) && nproc=32768
        limits+=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
    fi
fi
exec podman "${global[@]}" "$cmd" "${limits[@]}" "$@"
