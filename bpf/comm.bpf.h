/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* Task names compared as two words: proc.bpf.c and sched.bpf.c match worker names with it. */
#ifndef COMM_BPF_H
#define COMM_BPF_H

#include "iotrace.h"

/* Two 16-byte task names (zero-padded) are equal: two 8-byte compares, no per-byte branches
 * (a byte loop multiplies the verifier's paths). */
static __always_inline bool comm_eq(const char a[IOT_COMM_LEN], const char b[IOT_COMM_LEN])
{
	__u64 a0, a1, b0, b1;

	__builtin_memcpy(&a0, a, 8);
	__builtin_memcpy(&a1, a + 8, 8);
	__builtin_memcpy(&b0, b, 8);
	__builtin_memcpy(&b1, b + 8, 8);
	return a0 == b0 && a1 == b1;
}

#endif /* COMM_BPF_H */
