// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Syscall layer: latency and bytes of read/write/fsync family syscalls per (process, op, fd kind),
 * per file for regular files, openat per file, and slow operations as events.
 *
 * Two ways to hook the syscalls, one body of work (enter_body, exit_body); the loader takes
 * one per mode (loader.py, SYSCALL_HOOKS). One program on the raw sys_enter tracepoint and one
 * on raw sys_exit run for every syscall of every process, so the syscall number is checked
 * first (a few compares) and the rest runs only for the I/O syscalls of traced processes. Per
 * traced call this costs about half what the classic per-syscall tracepoints
 * (sys_enter_pread64, ...) cost, because those build a perf record before the program runs;
 * but these run no program for the host's other syscalls (docs/benchmarks.md). Kernel memory
 * is read with plain loads through BTF-typed pointers rather than bpf_probe_read_kernel() calls.
 */
#define IOT_KFUNCS_HERE /* see core_fixes.bpf.h */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "tracked.bpf.h"
#include "slots.bpf.h"
#define FILE_SCRATCH syscall_file_scratch
#include "files.bpf.h"
#include "syscalls.bpf.h"

#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define AF_UNIX 1
#define S_IFREG 0100000
#define S_IFBLK 0060000
#define S_IFIFO 0010000

/* The struct file behind fd `fd` of `task`, NULL if none. Plain loads: the fd array is read
 * through a read-only cast of its slot to a struct whose first field is a struct file *. */
static __always_inline struct file *fd_file_of(struct task_struct *task, int fd)
{
	struct files_struct *files = task->files;
	struct fdtable *fdt;
	struct kiocb *slot;

	if (!files || fd < 0)
		return NULL;
	fdt = files->fdt;
	if (!fdt || (unsigned int)fd >= fdt->max_fds)
		return NULL;
	slot = kernel_view((void *)fdt->fd + fd * sizeof(struct file *) -
				   bpf_core_field_offset(struct kiocb, ki_filp), struct kiocb);
	return slot->ki_filp;
}

/* A socket's family tells the network from local hand-overs: PyTorch passes the shared memory
 * of every batch between processes over AF_UNIX sockets, which a data wait must not take for
 * a wait on the network. */
static __always_inline __u8 socket_target(struct file *file)
{
	struct socket *sock = kernel_view(file->private_data, struct socket);
	struct sock *sk = sock ? sock->sk : NULL;

	if (sk && sk->__sk_common.skc_family == AF_UNIX)
		return IOT_TARGET_UNIX_SOCKET;
	return IOT_TARGET_SOCKET;
}

static __always_inline __u8 target_of(struct file *file)
{
	umode_t mode = file->f_inode->i_mode & S_IFMT;

	if (mode == S_IFREG || mode == S_IFBLK)
		return IOT_TARGET_FILE;
	if (mode == S_IFIFO)
		return IOT_TARGET_PIPE;
	if (mode == S_IFSOCK)
		return socket_target(file);
	return IOT_TARGET_OTHER;
}

/* file_first_sight for this thread's syscall on `file`, remembered in last_sent (so that the
 * thread's next calls on it skip the check) only once the file is named or its record sent:
 * a record lost to a full ring buffer is tried again at the next call. */
static __always_inline void check_first_sight(struct sys_start *start, struct file *file,
					      const struct file_id *id, int fd, __u64 dir_ino,
					      __u32 tgid)
{
	if (file_first_sight(file, id, fd, dir_ino, tgid))
		start->last_sent = *id;
}

/* Each thread's file open for writing, from the open to its close (struct write_span): only
 * threads that opened one have a record, so a close elsewhere costs a task-storage lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct write_span);
} write_spans SEC(".maps");

#define O_APPEND_FLAG 02000 /* the same on x86 and arm64 */

/* A save begins: `file` (fd `fd`) was opened for writing, empty (created or truncated) and not
 * for appending (logs append). The newest such file is the thread's span; one opened before
 * and still open is forgotten (a file held open for the run is no save). */
static __always_inline void span_open(struct task_struct *task, struct file *file, int fd,
				      const struct file_id *fid)
{
	struct write_span *span;

	if (!(file->f_mode & FMODE_WRITE) || (file->f_flags & O_APPEND_FLAG) ||
	    file->f_inode->i_size != 0)
		return;
	span = bpf_task_storage_get(&write_spans, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!span)
		return;
	span->file = *fid;
	span->fd = fd;
	span->since_ns = bpf_ktime_get_ns();
}

/* close(fd): the end of the thread's span when fd is its file. Every close of the host comes
 * here: threads that never opened a span get no record, and return after the lookup. */
static __always_inline void span_close(int fd)
{
	struct write_span *span;

	span = bpf_task_storage_get(&write_spans, bpf_get_current_task_btf(), 0, 0);
	if (!span || !span->since_ns || span->fd != fd)
		return;
	span->ended_file = span->file;
	span->ended_since_ns = span->since_ns;
	span->ended_ns = bpf_ktime_get_ns();
	span->since_ns = 0;
}

/* close(fd): ends a write span (span_close); a file of a traced thread read whole, or unlinked
 * since its open, may be folded into its folder's row (slots.bpf.h, fold_on_close). */
static __always_inline void close_body(int fd)
{
	struct task_struct *task;
	struct sys_start *start;
	struct file *file;
	struct file_id id;

	span_close(fd);
	if (!iot_config.fold_keep)
		return;
	task = bpf_get_current_task_btf();
	start = bpf_task_storage_get(&sys_starts, task, 0, 0);
	if (!start || !start->counters_at || !(file = fd_file_of(task, fd)))
		return;
	if ((file->f_inode->i_mode & S_IFMT) != S_IFREG)
		return;
	inode_id(file->f_inode, &id);
	fold_on_close(task->tgid, &id, start->counters_at, !file->f_inode->i_nlink,
		      file->f_path.dentry);
}

/* A save to a path closes its file, then fsyncs it through a new fd (torch.save(path), then
 * open + fsync + close): an fsync of the file of the thread's last span, begun within this
 * long of that span's close, opens the span again, same start, until the new fd's close. */
#define SPAN_REOPEN_NS 100000000ULL

static __always_inline void span_fsync(struct task_struct *task, int fd,
				       const struct file_id *fid)
{
	struct write_span *span;

	span = bpf_task_storage_get(&write_spans, task, 0, 0);
	if (!span || span->since_ns || !span->ended_ns ||
	    bpf_ktime_get_ns() - span->ended_ns > SPAN_REOPEN_NS)
		return;
	if (fid->ino != span->ended_file.ino || fid->dev != span->ended_file.dev ||
	    fid->gen != span->ended_file.gen)
		return;
	span->file = *fid;
	span->fd = fd;
	span->since_ns = span->ended_since_ns;
}

/* The entry of traced syscall `op` (op_of_syscall, not 0xff) with first argument `fd` and 4th
 * `pos` (the offset of a POSITIONAL op): one body for the raw and the classic tracepoints. */
static __always_inline void enter_body(__u8 op, int fd, unsigned long pos)
{
	struct task_struct *task;
	struct sys_start *start;
	struct file *file;
	struct inode *inode;
	__u32 tgid;

	task = bpf_get_current_task_btf();
	/* A thread with a record belongs to a traced process: `tracked` drops a process only
	 * once all its threads are gone. Others are looked up, and get a record if traced. */
	start = bpf_task_storage_get(&sys_starts, task, 0, 0);
	if (!start) {
		tgid = task->tgid;
		if (!is_tracked(tgid) || compat_syscall(task))
			return;
		start = bpf_task_storage_get(&sys_starts, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!start)
			return;
	} else if (compat_syscall(task)) {
		return;
	}
	start->op = op & ~POSITIONAL;
	start->target = IOT_TARGET_OTHER;
	start->file.dev = 0;
	if (op == IOT_OP_OPEN) /* the file is known at exit, from the returned fd */
		goto out;
	file = fd_file_of(task, fd);
	if (!file)
		goto out;
	start->target = target_of(file);
	if (start->target != IOT_TARGET_FILE)
		goto out;
	inode = file->f_inode;
	inode_id(inode, &start->file);
	start->dir_ino = dir_ino_of(file->f_path.dentry);
	start->offset = op & POSITIONAL ? pos : file->f_pos;
	if (start->file.ino != start->last_sent.ino || start->file.dev != start->last_sent.dev ||
	    start->file.gen != start->last_sent.gen) {
		check_first_sight(start, file, &start->file, fd, start->dir_ino, task->tgid);
	}
	if (start->op == IOT_OP_FSYNC)
		span_fsync(task, fd, &start->file);
out:
	start->ts_ns = bpf_ktime_get_ns();
}

SEC("raw_tp/sys_enter")
int sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	__u8 op = op_of_syscall(ctx->args[1]);
	struct pt_regs *regs;

	if (op == 0xff) {
		if (ctx->args[1] == NR_close)
			close_body((int)syscall_arg(user_regs(ctx), 0));
		return 0;
	}
	regs = user_regs(ctx);
	enter_body(op, (int)syscall_arg(regs, 0), syscall_arg(regs, 3));
	return 0;
}

static __always_inline void emit_slow(const struct sys_start *start, struct task_struct *task,
				      __u64 latency_ns, __u64 bytes)
{
	struct iot_slow_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_lost_event();
		return;
	}
	e->kind = IOT_EVENT_SLOW;
	e->pid = task->tgid;
	e->tid = task->pid;
	e->dev = start->file.dev;
	e->ino = start->file.ino;
	e->file_dev = start->file.dev;
	e->file_gen = start->file.gen;
	e->layer = IOT_LAYER_SYSCALL;
	e->op = start->op;
	e->ts_ns = start->ts_ns;
	e->offset = start->offset;
	e->bytes = bytes;
	e->latency_ns = latency_ns;
	e->dir_ino = start->dir_ino;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, events_wakeup());
}

/* openat: counted per file only, once its file is known from the returned fd. The file's
 * first-sight check is done here, so the thread's reads of it that follow skip theirs
 * (check_first_sight). */
static __always_inline void open_done(struct task_struct *task, struct sys_start *start,
				      long fd, __u64 latency_ns)
{
	struct file_id fid;
	struct file *file;
	struct inode *inode;
	__u64 dir_ino;

	if (fd < 0 || !(file = fd_file_of(task, (int)fd)))
		return;
	if (target_of(file) != IOT_TARGET_FILE)
		return;
	inode = file->f_inode;
	inode_id(inode, &fid);
	dir_ino = dir_ino_of(file->f_path.dentry);
	check_first_sight(start, file, &fid, (int)fd, dir_ino, task->tgid);
	span_open(task, file, (int)fd, &fid);
	file_open_add(task->tgid, &fid, dir_ino,
		      file->f_mode & FMODE_WRITE ? IOT_OP_WRITE : IOT_OP_READ, latency_ns,
		      inode->i_size, &start->counters_at);
}

/* The exit of a traced syscall returning `ret`: only threads with a syscall in flight (ts_ns
 * set by enter_body) go on. One body for the raw and the classic tracepoints. */
static __always_inline void exit_body(long ret)
{
	struct task_struct *task;
	struct sys_start *start;
	struct hist_key key = {};
	__u64 latency_ns, bytes;

	task = bpf_get_current_task_btf();
	start = bpf_task_storage_get(&sys_starts, task, 0, 0);
	if (!start || !start->ts_ns)
		return;
	latency_ns = bpf_ktime_get_ns() - start->ts_ns;
	if (start->op == IOT_OP_OPEN) {
		start->ts_ns = 0;
		open_done(task, start, ret, latency_ns);
		return;
	}
	bytes = ret > 0 && start->op != IOT_OP_FSYNC ? (__u64)ret : 0;
	key.tgid = task->tgid;
	key.layer = IOT_LAYER_SYSCALL;
	key.op = start->op;
	key.target = start->target;
	hist_add(&key, latency_ns, bytes, 1);
	if (start->target == IOT_TARGET_FILE) {
		file_op_add(key.tgid, &start->file, start->dir_ino, start->op, latency_ns, bytes,
			    &start->counters_at);
		if (iot_config.slow_ns && latency_ns >= iot_config.slow_ns)
			emit_slow(start, task, latency_ns, bytes);
	}
	start->ts_ns = 0;
}

/* Every syscall's exit: other syscalls than the traced ones return after two loads and a few
 * compares. */
SEC("raw_tp/sys_exit")
int sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	if (op_of_syscall(syscall_nr(user_regs(ctx))) == 0xff)
		return 0;
	exit_body(ctx->args[1]);
	return 0;
}

/*
 * The same syscalls on the classic per-syscall tracepoints (syscalls:sys_enter_read, ...): the
 * kernel runs these only for the syscalls they are attached to, so the host's other syscalls
 * run no program, and a traced call pays for a perf record built before the program runs
 * (docs/benchmarks.md). The loader attaches each program to the tracepoints of the syscalls
 * of op_of_syscall it names (loader.py, CLASSIC_SYSCALLS); SEC("tp"): libbpf attaches nothing
 * by itself. A record is the common fields, the syscall number as an int at offset 8, then
 * the arguments (enter) or the return value (exit) as longs from offset 16 (the events'
 * format files). The kernel refuses a program that reads past the record of a tracepoint it
 * is attached to, and fsync's holds one argument: the positional syscalls, whose offset is
 * the 4th, have a program of their own.
 */
struct syscall_enter_record {
	__u64 common;
	int nr;
	unsigned long fd;
};

struct syscall_enter_pos_record {
	__u64 common;
	int nr;
	unsigned long args[4];
};

struct syscall_exit_record {
	__u64 common;
	int nr;
	long ret;
};

SEC("tp")
int sys_enter_tp(struct syscall_enter_record *ctx)
{
	__u8 op = op_of_syscall(ctx->nr);

	if (op == 0xff || op & POSITIONAL)
		return 0;
	enter_body(op, (int)ctx->fd, 0);
	return 0;
}

SEC("tp")
int sys_enter_pos_tp(struct syscall_enter_pos_record *ctx)
{
	__u8 op = op_of_syscall(ctx->nr);

	if (op == 0xff || !(op & POSITIONAL))
		return 0;
	enter_body(op, (int)ctx->args[0], ctx->args[3]);
	return 0;
}

/* close, on its own classic tracepoint (close_body). */
SEC("tp")
int sys_enter_close_tp(struct syscall_enter_record *ctx)
{
	close_body((int)ctx->fd);
	return 0;
}

SEC("tp")
int sys_exit_tp(struct syscall_exit_record *ctx)
{
	exit_body(ctx->ret);
	return 0;
}
