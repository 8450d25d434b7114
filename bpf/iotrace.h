/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/*
 * The one ABI header shared by the BPF programs (the bpf/ folder) and user space. User space
 * does not copy it: `make build` generates tracer/core/abi_layout.py (scripts/abi_layout.py)
 * from the linked object's BTF, where struct iot_abi (at the end) puts every type below, and
 * tracer/core/abi.py takes its formats and names from there. tests/test_abi.py checks that
 * module against the object's BTF and this header, field by field.
 */
#ifndef IOTRACE_H
#define IOTRACE_H

/* Sizes, as an enum rather than #defines so that they reach the object's BTF (see struct iot_abi). */
enum iot_limits {
	IOT_MAX_SLOTS = 40, /* log2 ns slots: slot i holds [2^i, 2^(i+1)) ns, the last one everything above */
	IOT_COMM_LEN = 16,
	IOT_PATH_DEPTH = 32, /* path components sent per file; deeper paths are marked truncated */
	IOT_NAME_LEN = 64,   /* most bytes per component, NUL included */
	IOT_PATH_BYTES = 2048, /* the components of a file event, packed */
	IOT_FSTYPE_LEN = 16,
};

enum iot_layer {
	IOT_LAYER_SYSCALL = 1,     /* sys_enter -> sys_exit of read/write/fsync syscalls */
	IOT_LAYER_BLOCK = 2,       /* block_rq_issue -> block_rq_complete (device service time) */
	IOT_LAYER_BLOCK_QUEUE = 3, /* block_rq_insert -> block_rq_issue (time in the I/O scheduler) */
	IOT_LAYER_PAGECACHE = 4,   /* pages added to the page cache (misses); no latency: slot 0 */
};

enum iot_op {
	IOT_OP_READ = 0,
	IOT_OP_WRITE = 1,
	IOT_OP_FSYNC = 2,
	IOT_OP_FLUSH = 3,
	IOT_OP_DISCARD = 4,
	IOT_OP_OTHER = 5,
	IOT_OP_OPEN = 6, /* files only: openat (user space's rows; the kernel's keys say read/write) */
};

enum iot_target { /* kind of file descriptor, syscall layer only */
	IOT_TARGET_NONE = 0,
	IOT_TARGET_FILE = 1, /* regular file or block device */
	IOT_TARGET_PIPE = 2,
	IOT_TARGET_SOCKET = 3, /* a network socket (any family but AF_UNIX) */
	IOT_TARGET_OTHER = 4,
	IOT_TARGET_UNIX_SOCKET = 5, /* AF_UNIX: local, e.g. the fds DataLoader workers pass */
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
	__u8 page_shift;    /* log2 of the page size */
	__u8 auto_discover; /* report untracked processes that start DataLoader workers/torchrun */
	__u8 rq_slot_bits;  /* log2 of the entries of block.bpf.c's rq_slots */
	__u8 hist_slot_bits; /* log2 of the entries of hist_slots (maps.bpf.h) */
	__u8 file_slot_bits; /* log2 of the entries of file_slots (maps.bpf.h) */
	__u8 pad[2];
	__u64 slow_ns; /* operations at least this slow are sent as events (0: none) */
	__u32 file_log_entries; /* records of file_log per buffer (slots.bpf.h); 0: none */
	__u32 file_log_mark; /* records of a buffer's log in use at which user space is told to
			      * drain it (struct iot_drain_event); 0: never */
	__u32 fold_keep; /* user space's rule of the files that keep a row (tracer/core/rollup.py,
			  * KEEP_FILES and KEEP_SHARE_PCT): the kernel folds only files it would
			  * not keep (slots.bpf.h, fold_on_close); 0: no folding */
	__u32 fold_share_pct;
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

/* A file, as the kernel keys it: the file system's device, the inode number, and the inode's
 * generation. A freed inode number is handed out again (ext4 at once, to the next file created
 * in the group); the file system gives the new inode another i_generation (ext4, tmpfs, xfs,
 * btrfs), so a new file under a reused number is a new file here, with its own path. */
struct file_id {
	__u32 dev; /* kernel dev_t of the superblock (inode->i_sb->s_dev) */
	__u32 gen; /* inode->i_generation (0 on file systems that do not set it) */
	__u64 ino;
};

/* Key of the `file_stats` map. */
struct file_key {
	__u32 tgid;
	__u32 dev;
	__u64 ino;
	__u32 gen; /* struct file_id's; 0 in folder_stats */
	__u8 op; /* enum iot_op: read, write, fsync (an open counts under read or write) */
	__u8 buf; /* the interval's buffer (max_epoch & 1): user space drains the other */
	__u8 pad[2];
};

/* Value of `file_stats`: the counts of one interval (pages under op read/write respectively).
 * A file's opens count in its read key (its write key when opened for writing): a file opened
 * and read, as a data set's are, makes one new key, not two (a new key is most of what counting
 * a file costs); user space gives them rows of op open (tracer/core/rollup.py).
 * In `folder_stats`, where the operations on files that found `file_stats` full are counted,
 * the key's ino is the folder's (dir_ino) and gen is 0. */
struct file_stat {
	__u64 ops;
	__u64 bytes;
	__u64 latency_sum_ns;
	__u64 pages_missed;  /* pages this process brought into the page cache (reads, mmap faults) */
	__u64 pages_dirtied; /* pages this process dirtied (buffered writes, shared mmap) */
	__u64 latency_max_ns; /* the slowest operation */
	__u64 dir_ino; /* the inode number of the file's folder (its dentry's parent), 0: unknown */
	__u64 opens;
	__u64 open_latency_sum_ns;
	__u64 open_latency_max_ns;
	__u64 size; /* the file's size (i_size) at its last open counted here; 0: not opened */
};

/* Value of `fold_stats`: the files of a folder that the kernel folded at their close
 * (slots.bpf.h, fold_on_close), their counters added up; key: struct file_key with the folder's
 * inode as ino and gen 0. `files`: how many; the re-read counters as tracer/live/rereads.py's. */
struct fold_stat {
	struct file_stat st;
	__u64 files;
	__u64 reread_bytes;
	__u64 reread_pages;
};

/* Value of `fold_groups`, key tgid | buf << 32: a process's files read in a buffer whose
 * counters were weighed at their close, and what they add up to. */
struct fold_group {
	__u64 files;
	__u64 latency_ns; /* of the reads and the opens */
	__u64 bytes;
	__u64 pages; /* missed and dirtied */
	__u64 folders; /* its folders' rows in fold_stats (past fold_keep: their parents') */
};

/* A block request in flight (block.bpf.c), from its start to its end; user space reads the
 * records left at the end (tracer/kernel/maps.py). */
struct rq_start {
	__u64 insert_ns;
	__u64 issue_ns;
	struct file_id file; /* dev 0: unknown */
	__u32 tgid;
	__u32 data_len;
	__u32 dev; /* the disk, read once when the request starts */
	__u8 op;
	__u8 attribution;
	__u8 kthread; /* untraced: a kernel thread started it (struct block_user_key's) */
	__u8 pad;
	__u64 cgroup; /* the bio's cgroup (struct block_user_key's) */
	char comm[IOT_COMM_LEN]; /* untraced: who started it (struct block_user_key's) */
	__u64 dir_ino; /* the file's folder, 0 when unknown (a slow event names the file by it) */
};

/* Key of the `block_users` map (block.bpf.c): who used a disk. Every request is counted there
 * once it completes: the traced processes' under traced 1, per cgroup, every other process's
 * under its name, so that user space knows the share of a disk that others took. */
struct block_user_key {
	__u32 dev;     /* the disk (kernel dev_t) */
	__u8 op;       /* enum iot_op */
	__u8 traced;   /* 1: a traced process's request (comm empty: the hists say whose) */
	__u8 kthread;  /* 1: a kernel thread started it for the cgroup (blk-throttle's dispatch,
			* writeback): comm is empty, user space names the cgroup's processes */
	__u8 rest;     /* 1: the disk's requests past the named keys (no cgroup, no name) */
	__u64 cgroup;  /* the bio's blkcg: its cgroup's kernfs id (the directory's inode number),
			* 0 when the bio has none */
	char comm[IOT_COMM_LEN]; /* the task that started the request */
};

/* Value of `block_users`: cumulative since load. */
struct block_user {
	__u64 requests;
	__u64 bytes;
	__u64 service_ns; /* issue -> complete, summed */
};

/* Key of the `cpu_waits` map (sched.bpf.c): who had the CPU while a traced thread waited for
 * it. When a traced thread that was runnable gets a CPU, its wait is charged to the task that
 * the CPU switches from, for as long as that task last ran (its time on the CPU since it last
 * got it), the rest of the wait to earlier_ns. Per traced process that waited, per taker
 * (process, cgroup, name), so that user space tells the job's own threads from others. */
struct cpu_wait_key {
	__u32 tgid;   /* the traced process whose thread waited */
	__u32 taker;  /* the tgid of the task that had the CPU (0: the CPU was idle) */
	__u64 cgroup; /* the taker's cgroup v2 id (the kernfs inode number of its directory) */
	__u8 traced;  /* 1: the taker is a traced process */
	__u8 rest;    /* 1: the process's waits past the named keys (no taker, cgroup or name) */
	__u8 pad[6];
	char comm[IOT_COMM_LEN]; /* the taker's thread name */
};

/* Value of `cpu_waits`: cumulative since load. */
struct cpu_wait {
	__u64 waits;      /* times a waiting thread got the CPU from this taker */
	__u64 wait_ns;    /* the part of those waits while this taker last ran, summed */
	__u64 earlier_ns; /* the rest of them, before it ran (behind tasks not known) */
};

/* The syscall in flight of a thread (syscall.bpf.c, task storage `sys_starts`): user space
 * reads the training loop's through a pidfd each interval, so that a read or fsync lasting
 * seconds counts in the intervals it spans, not only in the one where it returns. */
struct sys_start {
	__u64 ts_ns; /* 0: no syscall in flight */
	__u64 offset;
	struct file_id file; /* regular files only */
	__u8 op;
	__u8 target;
	__u8 pad[2];
	__u32 counters_at; /* where the counters of this thread's last file are (slots.bpf.h) */
	struct file_id last_sent; /* the last file this thread checked for a first sight */
	__u64 dir_ino; /* the file's folder (struct file_stat's) */
};

/* A thread's file open for writing (syscall.bpf.c, task storage `write_spans`): a save is the
 * time from opening its file for writing to closing it, whatever the thread does in between
 * (pickling, copying tensors off the device, writing, fsyncing). User space reads the training
 * loop's through a pidfd each interval: the span open now, and the last one closed. */
struct write_span {
	__u64 since_ns; /* the open returned; 0: no span open */
	struct file_id file;
	__s32 fd;
	__u32 pad;
	__u64 ended_since_ns; /* the last span closed: its start, its end, its file */
	__u64 ended_ns;
	struct file_id ended_file;
};

/* A slot of block.bpf.c's `rq_slots`: the request holding it, and its record. */
struct rq_slot {
	__u64 rq; /* the request holding the slot, 0 when free */
	struct rq_start s;
};

/* A slot of `hist_slots` (maps.bpf.h): the histogram of the key holding it. */
struct hist_slot {
	__u64 tag; /* slot_tag() of `key`; 0: the slot is free */
	struct hist_key key;
	__u32 pad;
	struct hist h;
};

/* A slot of `file_slots` (maps.bpf.h): the counters of the key holding it. */
struct file_slot {
	__u64 tag; /* slot_tag() of `key`; 0: the slot is free */
	struct file_key key;
	struct file_stat st;
};

/* A key's tag in a slot table, never 0, from the key's words: its top bits choose the key's
 * slot (maps.bpf.h). tracer/core/abi.py's slot_tag() is the same function. */
static inline __attribute__((always_inline)) __u64 slot_tag(__u64 a, __u64 b, __u64 c)
{
	__u64 x = a * 0x9E3779B97F4A7C15ull + b * 0xC2B2AE3D27D4EB4Full + c * 0x165667B19E3779F9ull;

	return (x ^ (x >> 32)) | 1;
}

enum iot_slot_table {
	IOT_HIST_SLOTS = 0,
	IOT_FILE_SLOTS = 1,
};

/* Argument of proc.bpf.c's `free_slot` program (run by user space with BPF_PROG_TEST_RUN):
 * histogram slots only (file slots are drained whole, one interval's buffer at a time). */
struct free_slot_request {
	__u32 table; /* enum iot_slot_table */
	__u32 index;
	__u64 tag;   /* the holder user space read: a slot held by another key is left alone */
};

/* Argument of proc.bpf.c's `track` program (run by user space with BPF_PROG_TEST_RUN) to start
 * tracing a process. `flags` carries what the kernel would have seen had it watched the process
 * start: a DataLoader worker that named itself before iotrace attached is a worker all the
 * same. */
struct track_request {
	__u32 tgid;
	__u32 root;
	__u32 flags; /* enum iot_tracked_flags */
};

enum iot_event_kind {
	IOT_EVENT_FORK = 1, /* a tracked process forked a new process */
	IOT_EVENT_EXEC = 2, /* a tracked process called execve */
	IOT_EVENT_EXIT = 3, /* the last thread of a tracked process exited */
	IOT_EVENT_FILE = 4, /* first sight of a file: its path (struct iot_file_event) */
	IOT_EVENT_SLOW = 5, /* one operation slower than slow_ns (struct iot_slow_event) */
	IOT_EVENT_RENAME = 6, /* a thread of a tracked process renamed itself (iot_proc_event,
			       * ppid holds the thread id) */
	IOT_EVENT_DISCOVER = 7, /* auto_discover: an untracked process named itself pt_data_worker
				 * or pt_elastic (iot_proc_event: pid, ppid = its parent) */
	IOT_EVENT_DRAIN = 8, /* the interval's per-file buffer passed its mark: drain it now
			      * (struct iot_drain_event) */
};

/* Value of the `tracked` map. */
struct tracked_info {
	__u32 root;  /* tgid of the traced ancestor it descends from, 0 for a target itself */
	__u32 flags; /* enum iot_tracked_flags */
};

enum iot_tracked_flags {
	IOT_TRACKED_WORKER = 1, /* named itself pt_data_worker: a DataLoader worker */
};

enum iot_thread_state {
	IOT_THREAD_ONCPU = 0,
	IOT_THREAD_RUNNABLE = 1, /* waiting for a CPU */
	IOT_THREAD_SLEEP = 2,    /* interruptible sleep (S) */
	IOT_THREAD_IOWAIT = 3,   /* uninterruptible sleep (D): disk I/O, page faults */
	IOT_THREAD_DEAD = 4,     /* exited: no more time accrues */
};

enum iot_waker { /* who ended a sleep */
	IOT_WAKER_OWN = 0,    /* another thread of the same process */
	IOT_WAKER_WORKER = 1, /* a DataLoader worker process */
	IOT_WAKER_PIN = 2,    /* the pin-memory thread (pt_data_pin) */
	IOT_WAKER_OTHER = 3,  /* anything else: other processes, interrupts, timers */
	IOT_WAKERS = 4,
};

/* Value of the `threads` map, by thread id: where the thread's time went, cumulative. The
 * current state started at since_ns and is not in the sums yet. */
struct thread_time {
	__u32 tgid;
	__u8 state; /* enum iot_thread_state */
	__u8 fault_sleep; /* the open D sleep is inside a page fault from user space */
	__u8 pad[2];
	__u64 since_ns;
	__u64 oncpu_ns;
	__u64 runnable_ns;
	__u64 sleep_ns;
	__u64 iowait_ns;
	__u64 woken_ns[IOT_WAKERS]; /* sleep (S and D) time by who ended it */
	/* Memory reclaim done by the thread itself (memory.bpf.c): direct reclaim when the host
	 * is short of memory, memcg reclaim when its memory cgroup is at its limit. That time is
	 * also counted in the states above (on CPU scanning, in D writing back, ...). */
	__u64 reclaim_since_ns; /* in reclaim since then; 0: not in reclaim */
	__u64 reclaim_iowait_at; /* iowait_ns when the reclaim began */
	__u64 reclaim_ns;
	__u64 reclaim_blocked_ns; /* of reclaim_ns, blocked (D): waiting for writeback, I/O */
	__u64 reclaims;
	/* Page faults from user space (memory.bpf.c): the user registers of the thread's last
	 * one, by which sched.bpf.c knows a D sleep to be inside it, and the time slept in D
	 * inside faults (a page read back from a file or swap, a page lock) outside reclaim, part
	 * of iowait_ns, in that many sleeps. */
	__u64 fault_ip;
	__u64 fault_sp;
	__u64 fault_wait_ns;
	__u64 fault_sleeps;
	char comm[IOT_COMM_LEN];
};

enum iot_file_flags {
	IOT_FILE_TRUNCATED = 1, /* the walk stopped early (too deep, or a name filled its slot) */
	IOT_FILE_DELETED = 2,   /* the inode has no links left */
	IOT_FILE_FS_ROOT = 4,   /* seen without a file (page cache): the path is from the file
				 * system's root; user space prefixes its mount point */
};

/* First sight of a file. Path components from the file up, packed, each ended by a NUL: the
 * first is the base name. Only the head and the `len` bytes of names used are sent: a record is
 * a few hundred bytes instead of 2 KiB, so the ring buffer holds that many more first sights. */
struct iot_file_event {
	__u32 kind;
	__u32 pid;
	__u32 dev;
	__s32 fd; /* the fd it was seen through (for a /proc/PID/fd fallback), -1 if none */
	__u64 ino;
	__u32 depth; /* components filled */
	__u32 flags; /* enum iot_file_flags */
	__u32 gen; /* the inode's generation: (dev, ino, gen) is the file */
	__u32 len; /* bytes of names used, NULs included */
	__u64 dir_ino; /* its folder: later files of this folder send no record (dirs_seen) */
	char fstype[IOT_FSTYPE_LEN];
	char names[IOT_PATH_BYTES];
};

/* One slow operation (like fsslower / biosnoop). */
struct iot_slow_event {
	__u32 kind;
	__u32 pid;
	__u32 tid; /* 0 for block requests (completed in interrupt context) */
	__u32 dev; /* syscall: the file's s_dev; block: the disk */
	__u64 ino; /* 0 when unknown */
	__u32 file_dev; /* block: s_dev of the file the first page belongs to, 0 when unknown */
	__u32 file_gen; /* the file's inode generation (struct file_id) */
	__u8 layer;
	__u8 op;
	__u8 pad[6];
	__u64 ts_ns;
	__u64 offset; /* bytes: file offset (syscall) or disk offset (block) */
	__u64 bytes;
	__u64 latency_ns;
	char comm[IOT_COMM_LEN];
	__u64 dir_ino; /* the file's folder (struct file_stat's), 0 when unknown */
};

/* Record of the `events` ring buffer for process life cycle. */
struct iot_proc_event {
	__u32 kind;
	__u32 pid;  /* tgid of the process */
	__u32 ppid; /* tgid of its parent (fork) */
	__s32 exit_code;
	__u64 ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	char comm[IOT_COMM_LEN];
	__u32 ns_pid; /* fork/exec: the PID in the process's own PID namespace (containers) */
	__u32 pad;
};

/* Record of the `events` ring buffer that asks user space to take the per-file buffer out
 * before the interval ends (slots.bpf.h, file_log_add): sent once per filling of a buffer. */
struct iot_drain_event {
	__u32 kind;
	__u32 buf;  /* the buffer (file_key.buf) that passed its mark */
	__u64 used; /* its log's records in use then */
};

/* Index of the `map_full` counters: inserts refused because a hash map was full (-E2BIG).
 * files_seen and dirtier are LRU maps: they evict their oldest entry instead of refusing. */
enum iot_map {
	IOT_MAP_TRACKED = 0,
	IOT_MAP_HISTS = 1,
	IOT_MAP_FILE_STATS = 2,
	IOT_MAP_THREADS = 3,
	IOT_MAP_RQ_STARTS = 4, /* block.bpf.c: requests in flight */
	IOT_MAP_FOLDER_STATS = 5, /* where file_stats' refused inserts go: full too, a count is lost */
	IOT_MAP_BLOCK_USERS = 6, /* block.bpf.c: who used a disk (a key per disk keeps the rest) */
	IOT_MAPS = 7,
};

/* CUDA driver calls (cuda.bpf.c): the kind of call each uprobe on the driver library counts,
 * given to it as its attach cookie (tracer/kernel/uprobes.py attaches one per exported name).
 * The copies' byte count is their third argument, in all of them. */
enum iot_cuda_call {
	IOT_CUDA_STREAM_SYNC = 0, /* cuStreamSynchronize */
	IOT_CUDA_CTX_SYNC = 1,    /* cuCtxSynchronize */
	IOT_CUDA_EVENT_SYNC = 2,  /* cuEventSynchronize */
	IOT_CUDA_DTOH = 3,        /* cuMemcpyDtoH_v2: a synchronous copy, device to host */
	IOT_CUDA_HTOD = 4,        /* cuMemcpyHtoD_v2 */
	IOT_CUDA_DTOD = 5,        /* cuMemcpyDtoD_v2 */
	IOT_CUDA_COPY = 6,        /* cuMemcpy: unified addresses, the direction is not known */
	IOT_CUDA_DTOH_ASYNC = 7,  /* cuMemcpyDtoHAsync_v2: the time is the call's, not the copy's */
	IOT_CUDA_HTOD_ASYNC = 8,  /* cuMemcpyHtoDAsync_v2 */
	IOT_CUDA_DTOD_ASYNC = 9,  /* cuMemcpyDtoDAsync_v2 */
	IOT_CUDA_COPY_ASYNC = 10, /* cuMemcpyAsync */
	IOT_CUDA_LAUNCH = 11,     /* cuLaunchKernel: counted at entry only, no time (opt-in) */
	/* Not a name of its own: a synchronisation (any of the three above) that followed async
	 * device-to-host copies of at least IOT_CUDA_COPY_WAIT_BYTES on its thread since the
	 * thread's last one. PyTorch copies with the async calls and then waits in
	 * cuStreamSynchronize, so a .cpu()'s time is in that wait; a wait after a few bytes
	 * (.item()) waits for the kernels queued before it and stays a synchronisation, and so
	 * does one after host-to-device copies (a batch sent up is queued before the step's
	 * kernels, which the wait is for). */
	IOT_CUDA_COPY_WAIT = 12,
	IOT_CUDA_CALLS = 13,
	IOT_CUDA_COPY_WAIT_BYTES = 1048576,
};

/* Value of cuda.bpf.c's `cuda_threads` map, by thread id: the thread's driver calls by enum
 * iot_cuda_call, cumulative, and the call it is in now (user space reads it as it reads the
 * syscall in flight: a synchronisation lasting seconds counts in the intervals it spans). */
struct cuda_thread {
	__u32 tgid;
	__u32 call; /* the call in flight (when start_ns is not 0) */
	__u64 start_ns; /* when it began (bpf_ktime_get_ns), 0: none in flight */
	__u64 start_bytes; /* its byte count (copies) */
	__u64 queued_bytes; /* async DtoH copies' bytes since the thread's last synchronisation */
	__u64 calls[IOT_CUDA_CALLS];
	__u64 ns[IOT_CUDA_CALLS];
	__u64 bytes[IOT_CUDA_CALLS];
};

/* Every type of this ABI: maps.bpf.c defines one of these, read by no program. The compiler
 * puts in an object's BTF only the types of its variables and functions, and of a struct that
 * is only pointed to only its name, so records that programs fill through a pointer (ring-buffer
 * events) and the enums would be missing; this variable brings them all in (the records by
 * value, in a union: as large as the largest only), and scripts/abi_layout.py generates user
 * space's layouts from the types it holds (cilium's bpf2go asks for the same). A new type of the
 * ABI gets a member here. */
struct iot_abi {
	union {
		struct iot_config config;
		struct hist_key hist_key;
		struct hist hist;
		struct file_id file_id;
		struct file_key file_key;
		struct file_stat file_stat;
		struct rq_start rq_start;
		struct block_user_key block_user_key;
		struct block_user block_user;
		struct cpu_wait_key cpu_wait_key;
		struct cpu_wait cpu_wait;
		struct sys_start sys_start;
		struct write_span write_span;
		struct rq_slot rq_slot;
		struct hist_slot hist_slot;
		struct file_slot file_slot;
		struct fold_stat fold_stat;
		struct fold_group fold_group;
		struct free_slot_request free_slot_request;
		struct track_request track_request;
		struct tracked_info tracked_info;
		struct thread_time thread_time;
		struct iot_file_event file_event;
		struct iot_slow_event slow_event;
		struct iot_proc_event proc_event;
		struct iot_drain_event drain_event;
		struct cuda_thread cuda_thread;
	} records;
	enum iot_limits *limits;
	enum iot_layer *layer;
	enum iot_op *op;
	enum iot_target *target;
	enum iot_attribution *attribution;
	enum iot_slot_table *slot_table;
	enum iot_event_kind *event_kind;
	enum iot_tracked_flags *tracked_flags;
	enum iot_thread_state *thread_state;
	enum iot_waker *waker;
	enum iot_file_flags *file_flags;
	enum iot_map *map;
	enum iot_cuda_call *cuda_call;
};

#endif /* IOTRACE_H */
