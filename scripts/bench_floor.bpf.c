// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Empty programs on the raw sys_enter and sys_exit tracepoints, iotrace's attach points for
 * syscalls: what the kernel's dispatch costs before any work (scripts/bench_overhead.py,
 * mode raw-floor). bpftrace 0.17 cannot attach to raw tracepoints, hence this object.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("raw_tp/sys_enter")
int floor_enter(void *ctx)
{
	return 0;
}

SEC("raw_tp/sys_exit")
int floor_exit(void *ctx)
{
	return 0;
}
