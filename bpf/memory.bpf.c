// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Memory reclaim: for every thread of a traced process, the time it spent reclaiming memory
 * itself before its allocation could go on (struct thread_time's reclaim_*). Two pairs of
 * tracepoints, one pair per way in:
 *
 *   mm_vmscan_direct_reclaim_begin/end  the host (or a NUMA node) is short of free memory
 *   mm_vmscan_memcg_reclaim_begin/end   the thread's memory cgroup is at its limit (v1
 *                                       memory.limit_in_bytes, v2 memory.max or memory.high)
 *
 * Reclaim does not nest (the reclaiming task has PF_MEMALLOC set, so its own allocations do not
 * reclaim again): one start per thread is enough. The part of it spent blocked (D: waiting for
 * pages under writeback, for a read) is the thread's iowait_ns at the end less at the start:
 * sched.bpf.c closes each D sleep when the thread is woken, before it can run the end, so the
 * scheduler's path pays nothing for it. kswapd's reclaim runs in its own thread and is
 * not the job's time. The programs run only when a thread reclaims, a slow path: their cost
 * is nothing while memory is plentiful.
 *
 * And the wait of page faults: no tracepoint ends a fault, but one starts it
 * (exceptions:page_fault_user, x86), and a thread that entered the kernel by a fault is in it
 * until it returns to user space. The program keeps the user registers the fault saved (ip
 * and sp); when the thread then sleeps in D, sched.bpf.c compares them with those its kernel
 * stack holds now (bpf_task_pt_regs: the last entry from user space). Equal, the sleep is in
 * that fault: a syscall since would have saved its own, at another ip (a fault cannot be on
 * a syscall instruction's next byte, where a syscall saves its ip). That sleep's time is the
 * thread's fault_wait_ns: pages read back from a file or from swap, a page lock, mmap_lock;
 * not a sleep in a reclaim the fault started, which is reclaim time.
 * The fault program runs for every fault of the host from user space, and returns after
 * is_tracked for those of untraced processes.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "maps.bpf.h"
#include "tracked.bpf.h"

static __always_inline int reclaim_begin(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct thread_time *t;

	if (!is_tracked(id >> 32))
		return 0;
	t = bpf_map_lookup_elem(&threads, &tid); /* (not yet switched since tracking began: missed) */
	if (t) {
		t->reclaim_since_ns = bpf_ktime_get_ns();
		t->reclaim_iowait_at = t->iowait_ns;
	}
	return 0;
}

static __always_inline int reclaim_end(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct thread_time *t;
	__u64 now;

	if (!is_tracked(id >> 32))
		return 0;
	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t || !t->reclaim_since_ns)
		return 0;
	now = bpf_ktime_get_ns();
	if (now > t->reclaim_since_ns)
		t->reclaim_ns += now - t->reclaim_since_ns;
	if (t->iowait_ns > t->reclaim_iowait_at)
		t->reclaim_blocked_ns += t->iowait_ns - t->reclaim_iowait_at;
	t->reclaims++;
	t->reclaim_since_ns = 0;
	return 0;
}

/* Only the current task is read, so the tp_btf and raw_tp twins are the same code; both exist
 * for the loader's choice (tracer/kernel/loader.py). */
SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(direct_reclaim_begin_btf) { return reclaim_begin(); }

SEC("raw_tp/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(direct_reclaim_begin_raw) { return reclaim_begin(); }

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(direct_reclaim_end_btf) { return reclaim_end(); }

SEC("raw_tp/mm_vmscan_direct_reclaim_end")
int BPF_PROG(direct_reclaim_end_raw) { return reclaim_end(); }

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(memcg_reclaim_begin_btf) { return reclaim_begin(); }

SEC("raw_tp/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(memcg_reclaim_begin_raw) { return reclaim_begin(); }

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(memcg_reclaim_end_btf) { return reclaim_end(); }

SEC("raw_tp/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(memcg_reclaim_end_raw) { return reclaim_end(); }

/* The thread's last fault from user space: where, for sched.bpf.c's D sleeps. `btf`: plain
 * loads of the registers in the tp_btf program, CO-RE probe reads in the raw_tp one (a
 * constant: each program keeps its own). */
static __always_inline int fault_user(bool btf, struct pt_regs *regs)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct thread_time *t;

	if (!is_tracked(id >> 32))
		return 0;
	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t)
		return 0;
	if (btf) {
		t->fault_ip = PT_REGS_IP(regs);
		t->fault_sp = PT_REGS_SP(regs);
	} else {
		t->fault_ip = PT_REGS_IP_CORE(regs);
		t->fault_sp = PT_REGS_SP_CORE(regs);
	}
	return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(page_fault_user_btf, unsigned long address, struct pt_regs *regs,
	     unsigned long error_code)
{
	return fault_user(true, regs);
}

SEC("raw_tp/page_fault_user")
int BPF_PROG(page_fault_user_raw, unsigned long address, struct pt_regs *regs,
	     unsigned long error_code)
{
	return fault_user(false, regs);
}
