/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
#ifndef BITS_BPF_H
#define BITS_BPF_H

/* Index of the highest set bit (floor(log2(v))), 0 for v == 0. Branch-free steps, verifier friendly. */
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;

	shift = (v > 0xFFFFFFFFULL) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

#endif /* BITS_BPF_H */
