// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Block layer: per (process, disk, op) histograms of queue time (insert -> issue) and service
 * time (issue -> complete). The submitting process is taken where the request is created
 * (block_io_start, in the submitter's context; block_rq_insert on kernels without it).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "core_fixes.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct iot_config iot_config SEC(".rodata.config") = {};

struct rq_start {
	__u64 insert_ns;
	__u64 issue_ns;
	__u32 tgid;
	__u32 data_len;
	__u8 attribution;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct request * */
	__type(value, struct rq_start);
} rq_starts SEC(".maps");

static __always_inline __u8 rq_op(__u32 cmd_flags)
{
	switch (cmd_flags & 0xff) { /* REQ_OP_MASK */
	case 0: return IOT_OP_READ;     /* REQ_OP_READ */
	case 1: return IOT_OP_WRITE;    /* REQ_OP_WRITE */
	case 2: return IOT_OP_FLUSH;    /* REQ_OP_FLUSH */
	case 3: return IOT_OP_DISCARD;  /* REQ_OP_DISCARD */
	default: return IOT_OP_OTHER;
	}
}

static __always_inline __u32 rq_dev(struct request *rq)
{
	struct gendisk *disk = rq_disk(rq);

	if (!disk)
		return 0;
	return ((__u32)BPF_CORE_READ(disk, major) << 20) | (__u32)BPF_CORE_READ(disk, first_minor);
}

/* A tracked process created the request: remember who, to charge it at completion. */
static __always_inline int start_request(struct request *rq)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 key = (__u64)rq;
	struct rq_start s = {};

	if (!is_tracked(tgid))
		return 0;
	s.tgid = tgid;
	s.attribution = rq_is_readahead(BPF_CORE_READ(rq, cmd_flags)) ? IOT_ATTR_READAHEAD
								       : IOT_ATTR_DIRECT;
	bpf_map_update_elem(&rq_starts, &key, &s, BPF_ANY);
	return 0;
}

static __always_inline int handle_insert(struct request *rq)
{
	__u64 key = (__u64)rq;
	struct rq_start *s;

	if (!iot_config.have_io_start)
		start_request(rq);
	s = bpf_map_lookup_elem(&rq_starts, &key);
	if (s)
		s->insert_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int handle_issue(struct request *rq)
{
	__u64 key = (__u64)rq;
	struct rq_start *s = bpf_map_lookup_elem(&rq_starts, &key);
	__u32 flags;

	if (!s && !iot_config.have_io_start) {
		/* Without block_io_start, a request issued directly (no scheduler, so no insert)
		 * is first seen here, still in the submitter's context. */
		start_request(rq);
		s = bpf_map_lookup_elem(&rq_starts, &key);
	}
	if (!s)
		return 0;
	s->issue_ns = bpf_ktime_get_ns();
	s->data_len = BPF_CORE_READ(rq, __data_len);
	if (s->insert_ns) {
		flags = BPF_CORE_READ(rq, cmd_flags);
		struct hist_key k = {
			.tgid = s->tgid, .dev = rq_dev(rq), .layer = IOT_LAYER_BLOCK_QUEUE,
			.op = rq_op(flags), .attribution = s->attribution,
		};
		hist_add(&k, s->issue_ns - s->insert_ns, s->data_len);
		s->insert_ns = 0; /* a requeued request is counted once in the queue */
	}
	return 0;
}

static __always_inline int handle_complete(struct request *rq)
{
	__u64 key = (__u64)rq;
	struct rq_start *s = bpf_map_lookup_elem(&rq_starts, &key);

	if (!s)
		return 0;
	if (s->issue_ns) {
		struct hist_key k = {
			.tgid = s->tgid, .dev = rq_dev(rq), .layer = IOT_LAYER_BLOCK,
			.op = rq_op(BPF_CORE_READ(rq, cmd_flags)), .attribution = s->attribution,
		};
		hist_add(&k, bpf_ktime_get_ns() - s->issue_ns, s->data_len);
	}
	bpf_map_delete_elem(&rq_starts, &key);
	return 0;
}

SEC("tp_btf/block_io_start")
int BPF_PROG(io_start_btf, struct request *rq)
{
	return start_request(rq);
}

SEC("raw_tp/block_io_start")
int BPF_PROG(io_start_raw, struct request *rq)
{
	return start_request(rq);
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(rq_insert_btf, struct request *rq)
{
	return handle_insert(rq);
}

SEC("raw_tp/block_rq_insert")
int BPF_PROG(rq_insert_raw, struct request *rq)
{
	return handle_insert(rq);
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(rq_issue_btf, struct request *rq)
{
	return handle_issue(rq);
}

SEC("raw_tp/block_rq_issue")
int BPF_PROG(rq_issue_raw, struct request *rq)
{
	return handle_issue(rq);
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(rq_complete_btf, struct request *rq)
{
	return handle_complete(rq);
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(rq_complete_raw, struct request *rq)
{
	return handle_complete(rq);
}
