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
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
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
