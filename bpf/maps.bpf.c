// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/* The one definition of every shared map and setting: the stages declare them extern. */
#define IOT_DEFINE_SHARED
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "maps.bpf.h"
#include "tracked.bpf.h"
#include "slots.bpf.h"

/* The linked object's one license: every stage's programs are GPL-compatible through it. */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
