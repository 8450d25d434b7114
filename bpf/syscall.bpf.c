// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Syscall layer: latency and bytes of read/write/fsync family syscalls per (process, op, fd kind),
 * per file for regular files, and slow operations as events. One enter program per kind of
 * syscall and one exit program; the loader attaches each to the syscall tracepoints of its kind
 * (tracer/loader.py: SYSCALLS), so only I/O syscalls pay anything.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "files.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define S_IFREG 0100000
#define S_IFBLK 0060000
#define S_IFIFO 0010000

static __always_inline __u8 target_of(struct inode *inode)
{
	umode_t mode = BPF_CORE_READ(inode, i_mode) & S_IFMT;

	if (mode == S_IFREG || mode == S_IFBLK)
		return IOT_TARGET_FILE;
	if (mode == S_IFIFO)
		return IOT_TARGET_PIPE;
	if (mode == S_IFSOCK)
		return IOT_TARGET_SOCKET;
	return IOT_TARGET_OTHER;
}

/* `positional`: the offset is the 4th argument (pread64, preadv, preadv2, pwrite...);
 * otherwise it is the file position. */
static __always_inline int handle_enter(struct trace_event_raw_sys_enter *ctx, __u8 op,
					bool positional)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	int fd = (int)ctx->args[0];
	struct sys_start *start;
	struct file *file;
	struct inode *inode;

	if (!is_tracked(tgid))
		return 0;
	start = sys_start_of_current(true);
	if (!start)
		return 0;
	start->op = op;
	start->target = IOT_TARGET_OTHER;
	start->file.dev = 0;
	file = fd_file(fd);
	if (file) {
		inode = BPF_CORE_READ(file, f_inode);
		start->target = target_of(inode);
		if (start->target == IOT_TARGET_FILE) {
			inode_id(inode, &start->file);
			start->offset = positional ? ctx->args[3] : BPF_CORE_READ(file, f_pos);
			if (start->file.ino != start->last_sent.ino ||
			    start->file.dev != start->last_sent.dev) {
				file_first_sight(file, &start->file, fd, tgid);
				start->last_sent = start->file;
			}
		}
	}
	start->ts_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("tracepoint")
int sys_enter_read(struct trace_event_raw_sys_enter *ctx)
{
	return handle_enter(ctx, IOT_OP_READ, false);
}

SEC("tracepoint")
int sys_enter_pread(struct trace_event_raw_sys_enter *ctx)
{
	return handle_enter(ctx, IOT_OP_READ, true);
}

SEC("tracepoint")
int sys_enter_write(struct trace_event_raw_sys_enter *ctx)
{
	return handle_enter(ctx, IOT_OP_WRITE, false);
}

SEC("tracepoint")
int sys_enter_pwrite(struct trace_event_raw_sys_enter *ctx)
{
	return handle_enter(ctx, IOT_OP_WRITE, true);
}

SEC("tracepoint")
int sys_enter_fsync(struct trace_event_raw_sys_enter *ctx)
{
	return handle_enter(ctx, IOT_OP_FSYNC, false);
}

SEC("tracepoint")
int sys_enter_open(struct trace_event_raw_sys_enter *ctx)
{
	struct sys_start *start;

	if (!is_tracked(bpf_get_current_pid_tgid() >> 32))
		return 0;
	start = sys_start_of_current(true);
	if (!start)
		return 0;
	start->op = IOT_OP_OPEN;
	start->target = IOT_TARGET_OTHER;
	start->file.dev = 0;
	start->ts_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline void emit_slow(const struct sys_start *start, __u64 id, __u64 latency_ns,
				      __u64 bytes)
{
	struct iot_slow_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_lost_event();
		return;
	}
	e->kind = IOT_EVENT_SLOW;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->dev = start->file.dev;
	e->ino = start->file.ino;
	e->file_dev = start->file.dev;
	e->layer = IOT_LAYER_SYSCALL;
	e->op = start->op;
	e->ts_ns = start->ts_ns;
	e->offset = start->offset;
	e->bytes = bytes;
	e->latency_ns = latency_ns;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

SEC("tracepoint")
int sys_exit_io(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct sys_start *start = sys_start_of_current(false);
	struct hist_key key = {};
	__u64 latency_ns, bytes;
	long ret;

	if (!start || !start->ts_ns)
		return 0;
	latency_ns = bpf_ktime_get_ns() - start->ts_ns;
	ret = ctx->ret;
	bytes = ret > 0 && start->op != IOT_OP_FSYNC ? (__u64)ret : 0;
	key.tgid = id >> 32;
	key.layer = IOT_LAYER_SYSCALL;
	key.op = start->op;
	key.target = start->target;
	hist_add(&key, latency_ns, bytes, 1);
	if (start->target == IOT_TARGET_FILE) {
		struct file_key fk = {
			.tgid = key.tgid, .dev = start->file.dev, .ino = start->file.ino, .op = start->op,
		};
		file_op_add(&fk, latency_ns, bytes);
		if (iot_config.slow_ns && latency_ns >= iot_config.slow_ns)
			emit_slow(start, id, latency_ns, bytes);
	}
	start->ts_ns = 0;
	return 0;
}

/* openat: the file is known only at exit, from the returned fd. Counted per file only. */
SEC("tracepoint")
int sys_exit_open(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct sys_start *start = sys_start_of_current(false);
	struct file_key fk = {};
	struct file_id fid;
	struct file *file;
	struct inode *inode;
	long fd = ctx->ret;

	if (!start || !start->ts_ns)
		return 0;
	if (fd >= 0 && start->op == IOT_OP_OPEN && (file = fd_file((int)fd))) {
		inode = BPF_CORE_READ(file, f_inode);
		if (target_of(inode) == IOT_TARGET_FILE) {
			inode_id(inode, &fid);
			file_first_sight(file, &fid, (int)fd, id >> 32);
			fk.tgid = id >> 32;
			fk.dev = fid.dev;
			fk.ino = fid.ino;
			fk.op = IOT_OP_OPEN;
			file_op_add(&fk, bpf_ktime_get_ns() - start->ts_ns, 0);
		}
	}
	start->ts_ns = 0;
	return 0;
}
