// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Floors for scripts/bench_overhead.py, on iotrace's syscall attach points (the raw
 * sys_enter/sys_exit tracepoints; bpftrace 0.17 cannot attach there):
 *
 *   raw-floor     floor_enter/floor_exit: empty programs, what the kernel's dispatch costs;
 *   timing-floor  time_enter/time_exit: the least a per-call latency histogram takes: for the
 *                 loop's process only, a start time in task-local storage at enter, and at exit
 *                 the latency into a log2 slot of an array; no fd, no file, no per-process key;
 *   io-floor      io_enter/io_exit: the timing floor for the syscalls iotrace times (by number,
 *                 bpf/syscalls.bpf.h) in every process: what timing a job's I/O calls takes
 *                 however many processes it has (a DataLoader's workers), with no user space;
 *   classic-floor classic_enter/classic_exit: empty programs on the classic tracepoints of
 *                 every syscall iotrace traces, where its classic syscall hooks attach.
 */
#define IOT_KFUNCS_HERE /* see core_fixes.bpf.h */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "bits.bpf.h"
#include "syscalls.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

__u32 target_tgid = 0; /* set by the bench once the loop runs */

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} slots SEC(".maps");

/* The latency of a call that started at *ts into its log2 slot. */
static __always_inline void count_latency(__u64 *ts)
{
	__u64 *n, d = bpf_ktime_get_ns() - *ts;
	__u32 slot = log2_u64(d) & 63;

	n = bpf_map_lookup_elem(&slots, &slot);
	if (n)
		__sync_fetch_and_add(n, 1);
	*ts = 0;
}

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

SEC("raw_tp/sys_enter")
int time_enter(void *ctx)
{
	__u64 *ts;

	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	ts = bpf_task_storage_get(&starts, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (ts)
		*ts = bpf_ktime_get_ns();
	return 0;
}

SEC("raw_tp/sys_exit")
int time_exit(void *ctx)
{
	__u64 *ts;

	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	ts = bpf_task_storage_get(&starts, bpf_get_current_task_btf(), 0, 0);
	if (ts && *ts)
		count_latency(ts);
	return 0;
}

SEC("raw_tp/sys_enter")
int io_enter(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 *ts;

	if (op_of_syscall(ctx->args[1]) == 0xff)
		return 0;
	ts = bpf_task_storage_get(&starts, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (ts)
		*ts = bpf_ktime_get_ns();
	return 0;
}

SEC("raw_tp/sys_exit")
int io_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 *ts;

	if (op_of_syscall(syscall_nr(user_regs(ctx))) == 0xff)
		return 0;
	ts = bpf_task_storage_get(&starts, bpf_get_current_task_btf(), 0, 0);
	if (ts && *ts)
		count_latency(ts);
	return 0;
}

SEC("tp")
int classic_enter(void *ctx)
{
	return 0;
}

SEC("tp")
int classic_exit(void *ctx)
{
	return 0;
}
