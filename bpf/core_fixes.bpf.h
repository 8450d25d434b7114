/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* Each kernel difference behind one accessor, chosen by CO-RE at load time. */
#ifndef CORE_FIXES_BPF_H
#define CORE_FIXES_BPF_H

#include <bpf/bpf_core_read.h>

/* A kernel pointer seen through its BTF type, read-only: its fields are then plain loads (which
 * the verifier guards against faults) instead of bpf_probe_read_kernel() calls, about 30 ns
 * each on the machines of docs/benchmarks.md. A kfunc of Linux 6.2+, which iotrace needs. */
#ifdef IOT_KFUNCS_HERE
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;
#else
/* A kfunc (__ksym) only in syscall.bpf.c, the first stage linked that calls it: libbpf before
 * 1.5 fails to link two objects that both declare one ("failed to resolve size of underlying
 * type"), and its linker resolves a plain extern to that declaration. */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id);
#endif

#define kernel_view(ptr, type) ((type *)bpf_rdonly_cast((void *)(ptr), bpf_core_type_id_kernel(type)))

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
