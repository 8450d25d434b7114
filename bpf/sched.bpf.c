// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Scheduler: for every thread of a traced process, the time on CPU, runnable (waiting for a
 * CPU), sleeping (S) and blocked (D), and for sleeps who ended them (a DataLoader worker, the
 * pin-memory thread, its own process, or other). This is what tells a training loop that
 * waits for batches from one that computes or reads by itself.
 *
 * And for the time a traced thread waited runnable, who had the CPU (`cpu_waits`): when the
 * thread gets a CPU, the wait is charged to the task that CPU switches from, as long as it last
 * ran. That costs the switches into traced threads that waited two loads, a lookup and a few
 * adds; other switches nothing more.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "tracked.bpf.h"
#include "comm.bpf.h"

#define TASK_RUNNING 0x0
#define TASK_UNINTERRUPTIBLE 0x2
#define TASK_DEAD 0x80

/* Linux 5.14 (commit 2f064a59a11f, "sched: Change task_struct::state") renamed state. */
struct task_struct___old {
	long state;
} __attribute__((preserve_access_index));

static __always_inline unsigned int task_state(struct task_struct *t)
{
	struct task_struct___old *old = (void *)t;

	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ(old, state);
}

static __always_inline void add_state_time(struct thread_time *t, __u64 d)
{
	switch (t->state) {
	case IOT_THREAD_ONCPU: t->oncpu_ns += d; break;
	case IOT_THREAD_RUNNABLE: t->runnable_ns += d; break;
	case IOT_THREAD_SLEEP: t->sleep_ns += d; break;
	case IOT_THREAD_IOWAIT:
		t->iowait_ns += d;
		if (t->fault_sleep) {
			t->fault_wait_ns += d;
			t->fault_sleeps++;
			t->fault_sleep = 0;
		}
		break;
	default: break;
	}
}

/* Whether the thread switched from now, going to sleep in D, sleeps inside its last page fault
 * from user space (memory.bpf.c says how): the registers its last entry from user space saved
 * are those of that fault. A sleep in a reclaim the fault started is the reclaim's
 * (reclaim_blocked_ns), so the two times never overlap. sched_switch runs in the context of
 * the task switched from. */
static __always_inline bool sleeps_in_fault(struct thread_time *t)
{
	struct pt_regs *regs;

	if (!t->fault_ip || t->reclaim_since_ns)
		return false;
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	return PT_REGS_IP_CORE(regs) == t->fault_ip && PT_REGS_SP_CORE(regs) == t->fault_sp;
}

/*
 * Who had the CPUs while traced threads waited (struct cpu_wait_key), cumulative; the keys of a
 * process gone are deleted by user space an interval after its exit. Named keys take at most
 * CPU_WAITS_NAMED entries; past that a process's waits go to its key without a taker (`rest`),
 * whose room is kept.
 */
#define CPU_WAITS_MAX 4096
#define CPU_WAITS_NAMED (CPU_WAITS_MAX - 256)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CPU_WAITS_MAX);
	__type(key, struct cpu_wait_key);
	__type(value, struct cpu_wait);
} cpu_waits SEC(".maps");

__u64 cpu_waits_used = 0;

/* Keys of cpu_waits that user space deleted (processes gone: tracer.live.forget), so that the
 * keys in use are cpu_waits_used less these: a job that forks new DataLoader workers every
 * epoch would otherwise use up the named keys in minutes and lose its workers' waits. Only user
 * space writes it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cpu_waits_freed SEC(".maps");

/* A thread of traced process `tgid` waited `d` ns for the CPU that the current task (sched_switch
 * runs in the context of the task switched from; tgid `taker`) gives up now, having run `ran`
 * ns since it last got it (CFS keeps that count; a task of another class, whose count is
 * older, gets the whole wait). The taker is charged that much; the rest of the wait, behind
 * tasks before it, is counted apart (earlier_ns): a short task that ran last (rcu_preempt, a
 * kworker) is not charged with the wait behind the ones before it. */
static __always_inline void cpu_wait_add(__u32 tgid, __u32 taker, bool traced, __u64 d, __u64 ran)
{
	struct cpu_wait_key k = {.tgid = tgid, .taker = taker, .traced = traced};
	struct cpu_wait zero = {};
	struct cpu_wait *w;

	if (!taker || ran > d)
		ran = d;
	k.cgroup = bpf_get_current_cgroup_id();
	bpf_get_current_comm(k.comm, sizeof(k.comm));
	w = bpf_map_lookup_elem(&cpu_waits, &k);
	if (!w) {
		__u32 at = 0;
		__u64 *freed = bpf_map_lookup_elem(&cpu_waits_freed, &at);

		if (cpu_waits_used - (freed ? *freed : 0) >= CPU_WAITS_NAMED) { /* the rest key */
			__builtin_memset(&k, 0, sizeof(k));
			k.tgid = tgid;
			k.rest = 1;
		}
		if (!bpf_map_update_elem(&cpu_waits, &k, &zero, BPF_NOEXIST))
			__sync_fetch_and_add(&cpu_waits_used, 1);
		w = bpf_map_lookup_elem(&cpu_waits, &k); /* (EEXIST: another CPU made it) */
		if (!w)
			return;
	}
	__sync_fetch_and_add(&w->waits, 1);
	__sync_fetch_and_add(&w->wait_ns, ran);
	if (ran < d)
		__sync_fetch_and_add(&w->earlier_ns, d - ran);
}

/* How long `t` (switched from now) ran since CFS last gave it the CPU: plain loads in the
 * tp_btf program, CO-RE probe reads in the raw_tp one (`btf` is a constant there). */
static __always_inline __u64 ran_since_picked(bool btf, struct task_struct *t)
{
	if (btf)
		return t->se.sum_exec_runtime - t->se.prev_sum_exec_runtime;
	return BPF_CORE_READ(t, se.sum_exec_runtime) - BPF_CORE_READ(t, se.prev_sum_exec_runtime);
}

/* The thread's entry, created (in `state`, since now) on first sight. */
static __always_inline struct thread_time *thread_of(struct task_struct *task, __u32 tid, __u32 tgid,
						     __u8 state, __u64 now)
{
	struct thread_time *t = bpf_map_lookup_elem(&threads, &tid);
	struct thread_time fresh = {};

	if (t)
		return t;
	fresh.tgid = tgid;
	fresh.state = state;
	fresh.since_ns = now;
	BPF_CORE_READ_STR_INTO(&fresh.comm, task, comm);
	count_map_full(IOT_MAP_THREADS, bpf_map_update_elem(&threads, &tid, &fresh, BPF_NOEXIST));
	return NULL; /* nothing to account before first sight */
}

/* One context switch. The ids and the state of `prev` come from the caller: plain loads in the
 * tp_btf program, CO-RE probe reads in the raw_tp one. This runs on every switch of the host,
 * so untraced ones cost at most two bit tests (is_tracked) and nothing else. */
static __always_inline int handle_switch(bool btf, bool preempt, struct task_struct *prev,
					 __u32 prev_tgid, __u32 prev_tid, unsigned int state,
					 struct task_struct *next, __u32 next_tgid, __u32 next_tid)
{
	__u64 now;
	struct thread_time *t = NULL;
	__u8 new_state;
	/* tgid 0 is the idle task, on one side of most switches of a waiting thread */
	bool prev_tracked = prev_tgid && is_tracked(prev_tgid);
	bool next_tracked = next_tgid && is_tracked(next_tgid);

	/* A dying thread's process has already left `tracked` (sched_process_exit comes first):
	 * its entry still gets its last switch, which marks it dead. */
	if (!prev_tracked && !preempt && (state & TASK_DEAD))
		t = bpf_map_lookup_elem(&threads, &prev_tid);
	if (!prev_tracked && !t && !next_tracked)
		return 0;
	now = bpf_ktime_get_ns();
	if (prev_tracked || t) {
		if (preempt)
			state = TASK_RUNNING;
		new_state = state == TASK_RUNNING ? IOT_THREAD_RUNNABLE
			    : (state & TASK_DEAD) ? IOT_THREAD_DEAD
			    : (state & TASK_UNINTERRUPTIBLE) ? IOT_THREAD_IOWAIT : IOT_THREAD_SLEEP;
		if (!t)
			t = thread_of(prev, prev_tid, prev_tgid, new_state, now);
		if (t) {
			add_state_time(t, now - t->since_ns);
			t->state = new_state;
			t->since_ns = now;
			if (new_state == IOT_THREAD_IOWAIT)
				t->fault_sleep = sleeps_in_fault(t);
		}
	}
	if (next_tracked) {
		t = thread_of(next, next_tid, next_tgid, IOT_THREAD_ONCPU, now);
		if (t) {
			if (t->state == IOT_THREAD_RUNNABLE && now > t->since_ns)
				cpu_wait_add(next_tgid, prev_tgid, prev_tracked, now - t->since_ns,
					     ran_since_picked(btf, prev));
			add_state_time(t, now - t->since_ns); /* runnable (or a wakeup we missed) */
			t->state = IOT_THREAD_ONCPU;
			t->since_ns = now;
		}
	}
	return 0;
}

static __always_inline __u8 waker_of(__u32 woken_tgid)
{
	static const char pin[IOT_COMM_LEN] = "pt_data_pin";
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct tracked_info *info;
	char comm[IOT_COMM_LEN] = {};

	if (tgid == woken_tgid) {
		bpf_get_current_comm(comm, sizeof(comm));
		return comm_eq(comm, pin) ? IOT_WAKER_PIN : IOT_WAKER_OWN;
	}
	if (!is_tracked(tgid)) /* an interrupt, a kernel thread, another job: no hash lookup */
		return IOT_WAKER_OTHER;
	info = bpf_map_lookup_elem(&tracked, &tgid);
	if (info && (info->flags & IOT_TRACKED_WORKER))
		return IOT_WAKER_WORKER;
	return IOT_WAKER_OTHER;
}

/* sched_waking runs in the waker's context (sched_wakeup may run later on the target CPU). */
static __always_inline int handle_waking(__u32 tgid, __u32 tid)
{
	struct thread_time *t;
	__u64 now, d;
	__u8 waker;

	if (!is_tracked(tgid))
		return 0;
	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t || (t->state != IOT_THREAD_SLEEP && t->state != IOT_THREAD_IOWAIT))
		return 0;
	now = bpf_ktime_get_ns();
	d = now - t->since_ns;
	add_state_time(t, d);
	waker = waker_of(tgid);
	t->woken_ns[waker & (IOT_WAKERS - 1)] += d;
	t->state = IOT_THREAD_RUNNABLE;
	t->since_ns = now;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct task_struct___old *old = (void *)prev;
	unsigned int state = bpf_core_field_exists(prev->__state) ? prev->__state : old->state;

	return handle_switch(true, preempt, prev, prev->tgid, prev->pid, state, next, next->tgid,
			     next->pid);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return handle_switch(false, preempt, prev, BPF_CORE_READ(prev, tgid), BPF_CORE_READ(prev, pid),
			     task_state(prev), next, BPF_CORE_READ(next, tgid),
			     BPF_CORE_READ(next, pid));
}

SEC("tp_btf/sched_waking")
int BPF_PROG(waking_btf, struct task_struct *p)
{
	return handle_waking(p->tgid, p->pid);
}

SEC("raw_tp/sched_waking")
int BPF_PROG(waking_raw, struct task_struct *p)
{
	return handle_waking(BPF_CORE_READ(p, tgid), BPF_CORE_READ(p, pid));
}
