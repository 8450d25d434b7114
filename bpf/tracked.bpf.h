/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* Which processes are traced: the `tracked` set, and its PID bitmap that the hot paths test. */
#ifndef TRACKED_BPF_H
#define TRACKED_BPF_H

#include "maps.bpf.h"

/* The same set as a bitmap, a bit per possible PID (PID_MAX_LIMIT, 4M: 512 KiB): the check
 * that every context switch, wakeup and traced syscall number of the host makes is an array
 * index and a bit test instead of a hash lookup. Only tracked_add/tracked_remove change
 * either; user space adds through the `track` program (proc.bpf.c), so that every change of
 * a word is atomic. */
#define PID_LIMIT (4 * 1024 * 1024)

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PID_LIMIT / 64);
	__type(key, __u32);
	__type(value, __u64);
} tracked_bits SEC(".maps");

/* The word of `tracked_bits` that holds `tgid`'s bit (1ull << tgid % 64). */
static __always_inline __u64 *tracked_word(__u32 tgid)
{
	__u32 word = tgid / 64;

	return bpf_map_lookup_elem(&tracked_bits, &word);
}

static __always_inline bool is_tracked(__u32 tgid)
{
	__u64 *bits = tracked_word(tgid);

	return bits && (*bits & (1ull << (tgid % 64)));
}

/* Starts tracing process `tgid`; the error of the `tracked` insert (counted when full). */
static __always_inline long tracked_add(__u32 tgid, const struct tracked_info *info)
{
	__u64 *bits = tracked_word(tgid);
	long err = bpf_map_update_elem(&tracked, &tgid, info, BPF_ANY);

	count_map_full(IOT_MAP_TRACKED, err);
	if (!err && bits)
		__sync_fetch_and_or(bits, 1ull << (tgid % 64));
	return err;
}

static __always_inline void tracked_remove(__u32 tgid)
{
	__u64 *bits = tracked_word(tgid);

	if (bits)
		__sync_fetch_and_and(bits, ~(1ull << (tgid % 64)));
	bpf_map_delete_elem(&tracked, &tgid);
}

#endif /* TRACKED_BPF_H */
