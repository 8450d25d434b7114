// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Syscall layer: latency and bytes of read/write/fsync family syscalls per (process, op, fd kind).
 * One enter program per op and one exit program; the loader attaches each to the syscall
 * tracepoints of its op (tracer/loader.py: SYSCALLS), so only I/O syscalls pay anything.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define S_IFREG 0100000
#define S_IFBLK 0060000
#define S_IFIFO 0010000

struct sys_start {
	__u64 ts_ns;
	__u8 op;
	__u8 target;
};

/* In-flight syscalls by thread id. LRU: a thread that dies inside a syscall cannot leak a slot. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct sys_start);
} sys_starts SEC(".maps");

/* Kind of the current task's file descriptor `fd`, read from task->files. */
static __always_inline __u8 fd_target(unsigned int fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *file = NULL;
	umode_t mode;

	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return IOT_TARGET_OTHER;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	if (!file)
		return IOT_TARGET_OTHER;
	mode = BPF_CORE_READ(file, f_inode, i_mode) & S_IFMT;
	if (mode == S_IFREG || mode == S_IFBLK)
		return IOT_TARGET_FILE;
	if (mode == S_IFIFO)
		return IOT_TARGET_PIPE;
	if (mode == S_IFSOCK)
		return IOT_TARGET_SOCKET;
	return IOT_TARGET_OTHER;
}

static __always_inline int handle_enter(struct trace_event_raw_sys_enter *ctx, __u8 op)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct sys_start start;

	if (!is_tracked(tgid))
		return 0;
	start.op = op;
	start.target = fd_target((unsigned int)ctx->args[0]);
	start.ts_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&sys_starts, &tid, &start, BPF_ANY);
	return 0;
}

SEC("tracepoint")
int sys_enter_read(struct trace_event_raw_sys_enter *ctx)
{
	return handle_enter(ctx, IOT_OP_READ);
}

SEC("tracepoint")
int sys_enter_write(struct trace_event_raw_sys_enter *ctx)
{
	return handle_enter(ctx, IOT_OP_WRITE);
}

SEC("tracepoint")
int sys_enter_fsync(struct trace_event_raw_sys_enter *ctx)
{
	return handle_enter(ctx, IOT_OP_FSYNC);
}

SEC("tracepoint")
int sys_exit_io(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct sys_start *start = bpf_map_lookup_elem(&sys_starts, &tid);
	struct hist_key key = {};
	long ret;

	if (!start)
		return 0;
	key.tgid = id >> 32;
	key.layer = IOT_LAYER_SYSCALL;
	key.op = start->op;
	key.target = start->target;
	ret = ctx->ret;
	hist_add(&key, bpf_ktime_get_ns() - start->ts_ns,
		 ret > 0 && key.op != IOT_OP_FSYNC ? (__u64)ret : 0);
	bpf_map_delete_elem(&sys_starts, &tid);
	return 0;
}
