/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* Each kernel difference behind one accessor, chosen by CO-RE at load time. */
#ifndef CORE_FIXES_BPF_H
#define CORE_FIXES_BPF_H

#include <bpf/bpf_core_read.h>

/* Linux 5.17 (commit f3fa33acca9f, "block: remove the ->rq_disk field in struct request")
 * moved the disk from rq->rq_disk to rq->q->disk. */
struct request___old {
	struct gendisk *rq_disk;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *rq_disk(struct request *rq)
{
	struct request___old *old = (void *)rq;

	if (bpf_core_field_exists(old->rq_disk))
		return BPF_CORE_READ(old, rq_disk);
	return BPF_CORE_READ(rq, q, disk);
}

/* The bit number of REQ_RAHEAD moved between releases; read it from the running kernel's BTF. */
static __always_inline bool rq_is_readahead(__u32 cmd_flags)
{
	if (!bpf_core_enum_value_exists(enum req_flag_bits, __REQ_RAHEAD))
		return false;
	return cmd_flags & (1U << bpf_core_enum_value(enum req_flag_bits, __REQ_RAHEAD));
}

#endif /* CORE_FIXES_BPF_H */
