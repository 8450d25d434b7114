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

/* Pages in a folio (folio_nr_pages). Linux 6.18 wrapped folio->flags in memdesc_flags_t, same
 * size and place, so it is read as raw bytes; the order of a large folio sits in the low byte
 * of _flags_1 (folio_large_order), large meaning PG_head is set. Before folios grew large for
 * page cache files every folio here was one page. */
static __always_inline __u64 folio_pages(struct folio *folio)
{
	unsigned long flags = 0, flags_1 = 0;

	if (!bpf_core_field_exists(folio->_flags_1))
		return 1;
	bpf_core_read(&flags, sizeof(flags), &folio->flags);
	if (!(flags & (1UL << bpf_core_enum_value(enum pageflags, PG_head))))
		return 1;
	bpf_core_read(&flags_1, sizeof(flags_1), &folio->_flags_1);
	return 1ULL << (flags_1 & 0xff);
}

#endif /* CORE_FIXES_BPF_H */
