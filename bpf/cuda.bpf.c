// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * CUDA driver calls: uprobes on the driver library (libcuda.so.1) that the traced processes
 * map. Per thread, the time in the calls that wait for the GPU (stream, context and event
 * synchronisation, the synchronous copies) and the copies' bytes by direction: a training loop
 * whose thread sits in cuStreamSynchronize waits for the GPU; one that does not, the GPU waits
 * for it.
 *
 * User space attaches a pair of these programs to each exported name, once per library file
 * (tracer/kernel/uprobes.py), with the call's kind as the attach cookie. A uprobe fires for
 * every process that maps the file: the tracked set filters here, so the per-process part
 * costs a bit test. The kernel counts exact sums; user space reads them each interval, as it
 * reads the threads map.
 *
 * No depth is kept: a call's entry overwrites the thread's record, and its return adds it and
 * clears it. A return with nothing in flight (a call entered before the probes were attached,
 * a fork's child returning from its parent's call) adds nothing, and a record a lost return
 * left behind is overwritten by the thread's next call.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "tracked.bpf.h"

/* Threads with driver calls: a thread is inserted on its first call, so the map is allocated
 * as used (a preallocated one would hold its full size in kernel memory: 5 MiB). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct cuda_thread);
} cuda_threads SEC(".maps");

/* Threads whose calls were not counted because cuda_threads was full, per CPU (never silent). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cuda_full SEC(".maps");

static __always_inline struct cuda_thread *cuda_thread_of(__u32 tid, __u32 tgid)
{
	struct cuda_thread *t = bpf_map_lookup_elem(&cuda_threads, &tid);
	struct cuda_thread fresh = { .tgid = tgid };
	__u32 zero = 0;
	__u64 *full;

	if (t)
		return t;
	if (bpf_map_update_elem(&cuda_threads, &tid, &fresh, BPF_NOEXIST) == -IOT_E2BIG) {
		full = bpf_map_lookup_elem(&cuda_full, &zero);
		if (full)
			*full += 1;
		return NULL;
	}
	return bpf_map_lookup_elem(&cuda_threads, &tid);
}

SEC("uprobe")
int BPF_KPROBE(cuda_enter)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 call = bpf_get_attach_cookie(ctx);
	struct cuda_thread *t;

	if (call >= IOT_CUDA_CALLS || !is_tracked(id >> 32))
		return 0;
	t = cuda_thread_of((__u32)id, id >> 32);
	if (!t)
		return 0;
	if (call == IOT_CUDA_LAUNCH) { /* entry only: no uretprobe on the hottest call */
		t->calls[IOT_CUDA_LAUNCH] += 1;
		return 0;
	}
	if (call <= IOT_CUDA_EVENT_SYNC) { /* a wait: for the copies queued before it? */
		if (t->queued_bytes >= IOT_CUDA_COPY_WAIT_BYTES)
			call = IOT_CUDA_COPY_WAIT;
		t->queued_bytes = 0;
	}
	t->call = call;
	t->start_bytes = call >= IOT_CUDA_DTOH && call <= IOT_CUDA_COPY_ASYNC ? PT_REGS_PARM3(ctx) : 0;
	t->start_ns = bpf_ktime_get_ns(); /* last: the call's time starts after the probe's */
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(cuda_exit)
{
	__u64 now = bpf_ktime_get_ns(); /* first: the probe's own time is not the call's */
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cuda_thread *t = bpf_map_lookup_elem(&cuda_threads, &tid);
	__u32 call;

	if (!t || !t->start_ns)
		return 0;
	call = t->call;
	if (call < IOT_CUDA_CALLS) {
		t->calls[call] += 1;
		t->ns[call] += now - t->start_ns;
		t->bytes[call] += t->start_bytes;
		if (call == IOT_CUDA_DTOH_ASYNC)
			t->queued_bytes += t->start_bytes;
	}
	t->start_ns = 0;
	return 0;
}
