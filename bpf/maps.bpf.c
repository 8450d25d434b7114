// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/* The one definition of every shared map and setting: the stages declare them extern. */
#define IOT_DEFINE_SHARED
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "maps.bpf.h"
#include "tracked.bpf.h"
#include "slots.bpf.h"

/* The ABI's types, in the object's BTF for user space's layouts (struct iot_abi, iotrace.h). */
struct iot_abi iot_abi;

/* The linked object's one license: every stage's programs are GPL-compatible through it. */
char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Written by user space only, to wait for the programs that run: an update of a map of maps
 * returns once every program that started before it has finished (the kernel's
 * synchronize_rcu() for map-in-map updates). After it, no program adds to the buffer of
 * file_stats that the last interval used (maps.bpf.h). */
struct rcu_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rcu_inner SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct rcu_inner);
} rcu_sync SEC(".maps") = {
	.values = { &rcu_inner },
};
