"""slow_filesystem: most of the data set's bytes came from a slow file system (overlay,
network, FUSE: SLOW_FS_TYPES).

Thresholds: slow_fs_read_share (of the bytes read). Judged only when a loop waits on its
reads; severity half of that (at least 20)."""

from __future__ import annotations

from collections import defaultdict

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding
from tracer.core.diagnosis.rules.context import Context

SLOW_FS_TYPES = {"overlay", "nfs", "nfs4", "fuse", "fuseblk", "9p", "virtiofs", "cifs", "smb3",
                 "ceph", "glusterfs", "lustre"}


def judge(ctx: Context) -> list[Finding]:
    sev = ctx.io_severity()
    if sev is None:
        return []
    fs_bytes = defaultdict(int)
    for r in ctx.reads:
        for (_path, fs), n in r.files.items():
            fs_bytes[fs] += n
    total = sum(fs_bytes.values())
    # a FUSE mount's type has its daemon's subtype (fuse.sshfs, fuse.gcsfuse)
    slow = {fs: n for fs, n in fs_bytes.items() if fs.split(".", 1)[0] in SLOW_FS_TYPES}
    if not total or sum(slow.values()) / total < ctx.thresholds.slow_fs_read_share:
        return []
    return [Finding(
        "slow_filesystem", max(20, sev // 2), None,
        words.slow_filesystem(100 * sum(slow.values()) / total, sorted(slow)),
        {"read_bytes_by_fs": dict(fs_bytes)})]
