/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/*
 * Maps shared by every iotrace object. Each object declares them; the loader loads
 * proc.bpf.o first and makes the others reuse its map fds, so all objects see one
 * `tracked` set, one `hists` table and one `events` ring buffer.
 */
#ifndef MAPS_BPF_H
#define MAPS_BPF_H

#include "iotrace.h"
#include "bits.bpf.h"

#define MAX_TRACKED 16384
#define MAX_HISTS 16384

/* TGIDs being traced. Value: tgid of the traced ancestor it descends from (0 for a target). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TRACKED);
	__type(key, __u32);
	__type(value, __u32);
} tracked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_HISTS);
	__type(key, struct hist_key);
	__type(value, struct hist);
} hists SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* Ring-buffer reservations that failed, per CPU. Never silent: user space reports the sum. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} events_lost SEC(".maps");

static const struct hist zero_hist;

static __always_inline bool is_tracked(__u32 tgid)
{
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

/* Adds one operation of `latency_ns` that moved `bytes` to the histogram of `key`. */
static __always_inline void hist_add(const struct hist_key *key, __u64 latency_ns, __u64 bytes)
{
	struct hist *h = bpf_map_lookup_elem(&hists, key);
	__u32 slot;

	if (!h) {
		bpf_map_update_elem(&hists, key, &zero_hist, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&hists, key);
		if (!h)
			return;
	}
	slot = log2_u64(latency_ns);
	if (slot >= IOT_MAX_SLOTS)
		slot = IOT_MAX_SLOTS - 1;
	__sync_fetch_and_add(&h->count[slot], 1);
	if (bytes)
		__sync_fetch_and_add(&h->bytes[slot], bytes);
}

static __always_inline void count_lost_event(void)
{
	__u32 zero = 0;
	__u64 *lost = bpf_map_lookup_elem(&events_lost, &zero);

	if (lost)
		*lost += 1;
}

#endif /* MAPS_BPF_H */
