/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* The maps and settings every stage shares: defined once (maps.bpf.c), so linked once. */
#ifndef MAPS_BPF_H
#define MAPS_BPF_H

#include "iotrace.h"

/*
 * Each stage (proc, syscall, pagecache, block, sched .bpf.c) is compiled alone and declares
 * these extern; maps.bpf.c, built with IOT_DEFINE_SHARED, defines them. `bpftool gen object`
 * links the stages into tracer/bpf/iotrace.bpf.o, where each is one map (or variable) that
 * every program refers to: one `tracked` set, one `hists` table, one `events` ring buffer.
 */
#ifdef IOT_DEFINE_SHARED
#define IOT_SHARED
#else
#define IOT_SHARED extern
#endif

#define MAX_TRACKED 16384
#define MAX_HISTS 16384
#define MAX_FILES 65536
/* The (process, file, op) keys of one interval, and of the next one while it starts: 60 000 a
 * second for a job opening and reading 30 000 files a second. Past that, operations are
 * counted per folder (folder_stats). */
#define MAX_FILE_KEYS 131072

/* Load-time configuration, written by the loader (tracer/kernel/loader.py) before load. */
IOT_SHARED const volatile struct iot_config iot_config SEC(".rodata.config");

/* The interval number, advanced by user space once per interval (tracer/kernel/maps.py). */
IOT_SHARED volatile __u64 max_epoch SEC(".data.epoch");

/* TGIDs being traced (tracked.bpf.h keeps it and its bitmap equal). */
IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TRACKED);
	__type(key, __u32);
	__type(value, struct tracked_info);
} tracked SEC(".maps");

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_HISTS);
	__type(key, struct hist_key);
	__type(value, struct hist);
} hists SEC(".maps");

/* What the kernel keeps while user space is not reading (stopped, or starved at nice 10): about
 * 15 000 first sights at ~140 bytes each, where a folder's files send one between them, and
 * files open for writing or deleted one each (a DataLoader's batches: hundreds a second). The
 * pages are kernel memory, mapped twice into the reader and in its RSS: 4 MiB, twice this, cost
 * 4 MiB more of the tracer's 150 MiB. */
#define EVENTS_BYTES (2 * 1024 * 1024)

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, EVENTS_BYTES);
} events SEC(".maps");

/* Flags for submitting the frequent records (file paths, slow operations) to `events`: the
 * reader is woken only once a quarter of the buffer is in use. It drains the buffer every
 * 100 ms and at every interval anyway (tracer/live/session.py); a wakeup per record made a job that
 * creates files all the time (the shared-memory files of DataLoader batches) wake iotrace
 * hundreds of times a second. Process records (fork, exec, exit, rename) wake it at once, as
 * they did: user space reads /proc for them while the process is still there. */
static __always_inline __u64 events_wakeup(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= EVENTS_BYTES / 4 ?
		       BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* Files whose path was sent (or is being sent) to user space. The key has the inode's
 * generation: a new file under a reused inode number is not found, and sends its own path. */
IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FILES);
	__type(key, struct file_id);
	__type(value, __u8);
} files_seen SEC(".maps");

/* Per (process, file, op) counters, in two buffers, a map each (file_key.buf says which): an
 * operation adds to the interval's (max_epoch & 1); user space advances max_epoch, waits for
 * the programs still running on the old value (rcu_sync below), then takes the old buffer's
 * entries out in one pass (BPF_MAP_LOOKUP_AND_DELETE_BATCH: with both buffers in one map, a
 * read of every entry and a delete of half of them). A count is never added after it was read,
 * and a map holds one interval's keys.
 * The maps of files are preallocated (flags 0): a new file whose slot is taken (slots.bpf.h)
 * is inserted here, and allocating its element at the insert was much of sys_exit's time;
 * the price is their whole size in kernel memory, used or not (docs/benchmarks.md). The
 * folders' maps, written only once those are full, are allocated as used. */
#define FILE_COUNTERS(name, entries, flags)                                                     \
	IOT_SHARED struct {                                                                     \
		__uint(type, BPF_MAP_TYPE_HASH);                                                \
		__uint(map_flags, flags);                                                       \
		__uint(max_entries, entries);                                                   \
		__type(key, struct file_key);                                                   \
		__type(value, struct file_stat);                                                \
	} name SEC(".maps")

FILE_COUNTERS(file_stats0, MAX_FILE_KEYS, 0);
FILE_COUNTERS(file_stats1, MAX_FILE_KEYS, 0);

/* What file_stats had no room for, counted per (process, folder, op): no count is dropped
 * while a folder has room here. Drained with file_stats. */
FILE_COUNTERS(folder_stats0, 16384, BPF_F_NO_PREALLOC);
FILE_COUNTERS(folder_stats1, 16384, BPF_F_NO_PREALLOC);

/* The files folded at their close, per (process, folder, op) and buffer (slots.bpf.h,
 * fold_on_close): a folder per class and worker of an ImageNet job fits twice over. */
#define FOLDS(name)                                                                             \
	IOT_SHARED struct {                                                                     \
		__uint(type, BPF_MAP_TYPE_HASH);                                                \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                           \
		__uint(max_entries, 32768);                                                     \
		__type(key, struct file_key);                                                   \
		__type(value, struct fold_stat);                                                \
	} name SEC(".maps")

FOLDS(fold_stats0);
FOLDS(fold_stats1);

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 2 * MAX_TRACKED);
	__type(key, __u64);
	__type(value, struct fold_group);
} fold_groups SEC(".maps");

/* The files read whole before: a bit each, by a hash of (dev, ino, gen), set at the end of a
 * pass over the file, by fold_on_close or by user space (tracer/live/rereads.py, whose BITS
 * and file_hash() are these). */
#define READ_FILES_BITS 26
IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1 << (READ_FILES_BITS - 6));
	__type(key, __u32);
	__type(value, __u64);
} read_files SEC(".maps");

/* Folders whose path user space has (a record of one of their files came through): their
 * other files send no record of their own; user space names them from the folder's listing.
 * A data set of a million files in a thousand folders sends a thousand records. */
struct folder_id {
	__u32 dev;
	__u32 pad;
	__u64 ino;
};

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FILES);
	__type(key, struct folder_id);
	__type(value, __u8);
} dirs_seen SEC(".maps");

/* Who last dirtied pages of a file: writeback by flusher threads is charged to it. */
IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FILES);
	__type(key, struct file_id);
	__type(value, __u32);
} dirtier SEC(".maps");

/* Page-cache folios a traced process brought in (pagecache.bpf.c), by address, until the
 * read that fills them starts (block.bpf.c): a read that a kernel thread starts for the
 * process (blk-throttle holds the bios of a cgroup over its I/O limit and dispatches them
 * from a worker) is charged to it through its first folio. The folio's mapping and index tell
 * an entry left by a folio since reused for another page. */
struct folio_owner {
	__u64 mapping;
	__u64 index;
	__u32 tgid;
	__u32 pad;
};

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct folio * */
	__type(value, struct folio_owner);
} folio_owners SEC(".maps");

/* Ring-buffer reservations that failed, per CPU. Never silent: user space reports the sum. */
IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} events_lost SEC(".maps");

/* Inserts refused because the map was full, per CPU, by enum iot_map. Never silent either:
 * user space reports the sums (a refused insert loses that operation's counts). */
IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOT_MAPS);
	__type(key, __u32);
	__type(value, __u64);
} map_full SEC(".maps");

#define IOT_E2BIG 7 /* bpf_map_update_elem() returns -E2BIG when a hash map is full */
#define IOT_EEXIST 17 /* ... and -EEXIST for BPF_NOEXIST on a key that is there */

/* Counts a refused insert into map `idx` (enum iot_map) when `err` says the map was full. */
static __always_inline void count_map_full(__u32 idx, long err)
{
	__u64 *n;

	if (err != -IOT_E2BIG)
		return;
	n = bpf_map_lookup_elem(&map_full, &idx);
	if (n)
		*n += 1;
}

/* A syscall in flight (syscall.bpf.c); the block layer reads it to learn which file a request
 * submitted from inside that syscall belongs to. The in-flight syscall of each thread, in
 * task-local storage: a pointer away from the task, no hashing, freed with the thread. */
IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sys_start);
} sys_starts SEC(".maps");

/* The current task's in-flight syscall record, NULL when none (create: make one). */
static __always_inline struct sys_start *sys_start_of_current(bool create)
{
	return bpf_task_storage_get(&sys_starts, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* Where each traced thread's time goes (sched.bpf.c), by thread id. */
IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct thread_time);
} threads SEC(".maps");

static __always_inline void count_lost_event(void)
{
	__u32 zero = 0;
	__u64 *lost = bpf_map_lookup_elem(&events_lost, &zero);

	if (lost)
		*lost += 1;
}

#endif /* MAPS_BPF_H */
