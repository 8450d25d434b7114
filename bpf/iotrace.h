/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/*
 * The one ABI header shared by the BPF programs (the bpf/ folder) and user space.
 * Python mirrors it in tracer/abi.py; tests/test_abi.py compiles this header
 * and checks every size and offset against that mirror.
 */
#ifndef IOTRACE_H
#define IOTRACE_H

#define IOT_MAX_SLOTS 40 /* log2 ns slots: slot i holds [2^i, 2^(i+1)) ns, the last one everything above */
#define IOT_COMM_LEN 16

enum iot_layer {
	IOT_LAYER_SYSCALL = 1,     /* sys_enter -> sys_exit of read/write/fsync syscalls */
	IOT_LAYER_BLOCK = 2,       /* block_rq_issue -> block_rq_complete (device service time) */
	IOT_LAYER_BLOCK_QUEUE = 3, /* block_rq_insert -> block_rq_issue (time in the I/O scheduler) */
};

enum iot_op {
	IOT_OP_READ = 0,
	IOT_OP_WRITE = 1,
	IOT_OP_FSYNC = 2,
	IOT_OP_FLUSH = 3,
	IOT_OP_DISCARD = 4,
	IOT_OP_OTHER = 5,
};

enum iot_target { /* kind of file descriptor, syscall layer only */
	IOT_TARGET_NONE = 0,
	IOT_TARGET_FILE = 1, /* regular file or block device */
	IOT_TARGET_PIPE = 2,
	IOT_TARGET_SOCKET = 3,
	IOT_TARGET_OTHER = 4,
};

enum iot_attribution { /* who a block request is charged to, block layers only */
	IOT_ATTR_NONE = 0,
	IOT_ATTR_DIRECT = 1,    /* submitted by the process itself */
	IOT_ATTR_WRITEBACK = 2, /* charged through the process that dirtied the pages */
	IOT_ATTR_READAHEAD = 3, /* REQ_RAHEAD */
	IOT_ATTR_UNKNOWN = 4,
};

/* Load-time configuration: `const volatile` in section .rodata.config of each object, written
 * by the loader before load, so the verifier prunes what is switched off. */
struct iot_config {
	__u8 have_io_start; /* the kernel has the block_io_start tracepoint (6.5+) */
	__u8 pad[7];
};

/* Key of the `hists` map: one histogram per (process, layer, op, target/device). */
struct hist_key {
	__u32 tgid;
	__u32 dev; /* kernel dev_t (major << 20 | minor) of the disk, block layers only */
	__u8 layer;
	__u8 op;
	__u8 target;
	__u8 attribution;
};

/* Value of the `hists` map: cumulative since load; user space computes deltas. */
struct hist {
	__u64 count[IOT_MAX_SLOTS];
	__u64 bytes[IOT_MAX_SLOTS];
};

enum iot_event_kind {
	IOT_EVENT_FORK = 1, /* a tracked process forked a new process */
	IOT_EVENT_EXEC = 2, /* a tracked process called execve */
	IOT_EVENT_EXIT = 3, /* the last thread of a tracked process exited */
};

/* Record of the `events` ring buffer for process life cycle. */
struct iot_proc_event {
	__u32 kind;
	__u32 pid;  /* tgid of the process */
	__u32 ppid; /* tgid of its parent (fork) */
	__s32 exit_code;
	__u64 ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	char comm[IOT_COMM_LEN];
};

#endif /* IOTRACE_H */
