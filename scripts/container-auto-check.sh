#!/usr/bin/env bash
# The image run as the DaemonSet runs it (docs/container.md, "What was checked"), by hand:
#
#   scripts/container-auto-check.sh [PODMAN RUN OPTIONS...]   # as root, after make container
#
# e.g. with the DaemonSet's mounts: -v /sys/kernel/tracing:/sys/kernel/tracing:ro
# -v /sys/fs/cgroup:/sys/fs/cgroup:ro. The options come after --pid=host --network=host; without
# any, the container is privileged. `iotrace --auto --prometheus 127.0.0.1:9599` starts, a
# stand-in training job with two DataLoader workers runs on the host, /metrics is read, the
# container is stopped with SIGTERM (podman stop, as Kubernetes stops a pod); then what the trace
# says: the syscall hooks taken, the job's main and workers found, memory rows.
set -uo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/iotrace:latest}
PY=$(command -v .venv/bin/python || command -v python3)
case " $* " in *" --cap-"*) priv=() ;; *) priv=(--privileged) ;; esac
out=$(mktemp -d /tmp/iotrace-auto-check.XXXX)
name=iotrace-auto-check-$$
head -c 1048576 /dev/urandom > "$out/data.bin"
mkdir "$out/node"
scripts/podman.sh run --rm --name "$name" "${priv[@]}" --pid=host --network=host "$@" \
    -v "$out/node:/var/lib/iotrace" "$IMAGE" \
    --auto --prometheus 127.0.0.1:9599 --no-tui -i 0.5 -o /var/lib/iotrace/trace \
    >"$out/stdout" 2>"$out/stderr" &
tracer=$!
for _ in $(seq 100); do grep -qs '^Tracing' "$out/stderr" && break; sleep 0.2; done
"$PY" tests/workloads/fake_job.py "$out/data.bin" 2 25 2 &
job=$!
wait "$job"; echo "job exit: $?"
echo "/metrics iotrace_ samples: $("$PY" -c 'import urllib.request as u; print(sum(l.startswith(b"iotrace_") for l in u.urlopen("http://127.0.0.1:9599/metrics", timeout=10)))')"
podman stop -t 30 "$name" >/dev/null
wait "$tracer"; echo "iotrace exit: $?"
"$PY" - "$out/node/trace" "$job" <<'PYEOF'
import json
import sys

import pandas as pd

trace, job = sys.argv[1], int(sys.argv[2])
print("syscall hooks:", json.load(open(f"{trace}/meta.json"))["syscall_hooks"])
procs = pd.read_parquet(f"{trace}/processes")
main = bool(((procs.pid == job) & (procs.role == "main")).any())
workers = int(((procs.ppid == job) & (procs.role == "dataloader_worker")).sum())
print(f"job's main found: {main}, its workers: {workers}")
print("memory rows of the job:", int((pd.read_parquet(f"{trace}/memory").pid == job).sum()))
PYEOF
rm -rf "$out"
