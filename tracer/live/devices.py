"""Block device names from kernel dev_t numbers, as iostat and node_exporter name them."""

from __future__ import annotations

from functools import lru_cache

from tracer.core.abi import dev_major_minor

SYS_DEV_BLOCK = "/sys/dev/block"


@lru_cache(maxsize=256)
def device_name(dev: int, sys_dev_block: str = SYS_DEV_BLOCK) -> str:
    """'vda' for the kernel dev_t of /dev/vda; 'MAJ:MIN' when sysfs does not know it."""
    major, minor = dev_major_minor(dev)
    try:
        with open(f"{sys_dev_block}/{major}:{minor}/uevent") as f:
            # uevent lines look like "DEVNAME=vda"
            for line in f:
                if line.startswith("DEVNAME="):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return f"{major}:{minor}"
