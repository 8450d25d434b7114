// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/* Process life cycle: keeps `tracked` equal to the traced processes and their descendants. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "tracked.bpf.h"
#include "slots.bpf.h"
#include "comm.bpf.h"

/* The task's PID as its own (innermost) PID namespace numbers it: pid->numbers[pid->level]. */
static __always_inline __u32 ns_pid_of(struct task_struct *task)
{
	struct pid *pid = BPF_CORE_READ(task, thread_pid);
	unsigned int level = BPF_CORE_READ(pid, level);
	struct upid up = {};

	if (level > 31)
		return 0;
	bpf_probe_read_kernel(&up, sizeof(up), &pid->numbers[level]);
	return up.nr;
}

static __always_inline void emit(__u32 kind, __u32 pid, __u32 ppid, __s32 exit_code,
				 struct task_struct *task)
{
	struct iot_proc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_lost_event();
		return;
	}
	e->kind = kind;
	e->pid = pid;
	e->ppid = ppid;
	e->exit_code = exit_code;
	e->ts_ns = bpf_ktime_get_ns();
	BPF_CORE_READ_STR_INTO(&e->comm, task, comm);
	e->ns_pid = kind == IOT_EVENT_EXIT ? 0 : ns_pid_of(task);
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
}

static __always_inline int handle_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	struct tracked_info *pinfo, cinfo = {};

	if (ctgid == ptgid) /* a new thread, not a new process */
		return 0;
	pinfo = bpf_map_lookup_elem(&tracked, &ptgid);
	if (!pinfo)
		return 0;
	cinfo.root = pinfo->root ? pinfo->root : ptgid;
	tracked_add(ctgid, &cinfo);
	emit(IOT_EVENT_FORK, ctgid, ptgid, 0, child);
	return 0;
}

static __always_inline int handle_exec(struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);

	if (is_tracked(tgid))
		emit(IOT_EVENT_EXEC, tgid, 0, 0, task);
	return 0;
}

static __always_inline int handle_exit(struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);

	if (!is_tracked(tgid))
		return 0;
	/* Only when the whole thread group is gone: do_exit() decrements signal->live before
	 * this tracepoint fires (6.16+ also passes it as `group_dead`, older kernels do not). */
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	tracked_remove(tgid);
	emit(IOT_EVENT_EXIT, tgid, 0, BPF_CORE_READ(task, exit_code), task);
	return 0;
}

/* A RENAME or DISCOVER record: a name and two ids (see enum iot_event_kind). */
static __always_inline void emit_name(__u32 kind, __u32 pid, __u32 other, const char *name)
{
	struct iot_proc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_lost_event();
		return;
	}
	e->kind = kind;
	e->pid = pid;
	e->ppid = other;
	e->exit_code = 0;
	e->ts_ns = bpf_ktime_get_ns();
	__builtin_memcpy(e->comm, name, IOT_COMM_LEN);
	e->ns_pid = 0;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
}

/* PyTorch names its DataLoader workers and pin-memory thread (prctl PR_SET_NAME). */
static __always_inline int handle_rename(struct task_struct *task, const char *comm)
{
	static const char worker[IOT_COMM_LEN] = "pt_data_worker";
	static const char elastic[IOT_COMM_LEN] = "pt_elastic";
	__u32 tgid = BPF_CORE_READ(task, tgid), pid = BPF_CORE_READ(task, pid);
	struct tracked_info *info = bpf_map_lookup_elem(&tracked, &tgid);
	char name[IOT_COMM_LEN] = {};
	bool is_worker, is_elastic;

	if (!info && !iot_config.auto_discover)
		return 0;
	bpf_probe_read_kernel_str(name, sizeof(name), comm);
	is_worker = comm_eq(name, worker);
	is_elastic = comm_eq(name, elastic);
	if (!info) {
		/* --auto: a training job shows itself by starting DataLoader workers or torchrun */
		if (!is_worker && !is_elastic)
			return 0;
		emit_name(IOT_EVENT_DISCOVER, tgid, BPF_CORE_READ(task, real_parent, tgid), name);
		return 0;
	}
	if (is_worker && pid == tgid)
		info->flags |= IOT_TRACKED_WORKER;
	struct thread_time *t = bpf_map_lookup_elem(&threads, &pid);
	if (t)
		__builtin_memcpy(t->comm, name, sizeof(name));
	emit_name(IOT_EVENT_RENAME, tgid, pid, name);
	return 0;
}

SEC("tp_btf/task_rename")
int BPF_PROG(rename_btf, struct task_struct *task, const char *comm)
{
	return handle_rename(task, comm);
}

SEC("raw_tp/task_rename")
int BPF_PROG(rename_raw, struct task_struct *task, const char *comm)
{
	return handle_rename(task, comm);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(fork_btf, struct task_struct *parent, struct task_struct *child)
{
	return handle_fork(parent, child);
}

SEC("raw_tp/sched_process_fork")
int BPF_PROG(fork_raw, struct task_struct *parent, struct task_struct *child)
{
	return handle_fork(parent, child);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(exec_btf, struct task_struct *task)
{
	return handle_exec(task);
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(exec_raw, struct task_struct *task)
{
	return handle_exec(task);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(exit_btf, struct task_struct *task)
{
	return handle_exit(task);
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(exit_raw, struct task_struct *task)
{
	return handle_exit(task);
}

/* Run by user space (BPF_PROG_TEST_RUN, tracer/kernel/loader.py Loader.track) to start tracing a
 * process: the `tracked` entry and its bit, set the way the kernel side sets them (struct
 * track_request, iotrace.h). */

SEC("syscall")
int track(struct track_request *req)
{
	struct tracked_info info = { .root = req->root, .flags = req->flags };

	return -tracked_add(req->tgid, &info);
}

/* Frees a slot of hist_slots (maps.bpf.h) for user space, if `tag` still holds it: the
 * counters are zeroed, then the tag, so the next key finds the slot free and empty. Returns 0
 * when freed, 1 when another key holds the slot (or none), -1 for a bad request. */
SEC("syscall")
int free_slot(struct free_slot_request *req)
{
	__u32 i = req->index;
	struct hist_slot *s;

	if (req->table != IOT_HIST_SLOTS)
		return -1;
	s = bpf_map_lookup_elem(&hist_slots, &i);
	if (!s)
		return -1;
	if (s->tag != req->tag)
		return 1;
	for (int j = 0; j < IOT_MAX_SLOTS; j++) {
		s->h.count[j] = 0;
		s->h.bytes[j] = 0;
	}
	__sync_lock_test_and_set(&s->tag, 0);
	return 0;
}
