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
#define MAX_FILES 65536

/* Load-time configuration, written by the loader (tracer/loader.py) before load. */
const volatile struct iot_config iot_config SEC(".rodata.config") = {};

/* TGIDs being traced. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TRACKED);
	__type(key, __u32);
	__type(value, struct tracked_info);
} tracked SEC(".maps");

/* The same set as a bitmap, a bit per possible PID (PID_MAX_LIMIT, 4M: 512 KiB): the check
 * that every context switch, wakeup and traced syscall number of the host makes is an array
 * index and a bit test instead of a hash lookup. Only tracked_add/tracked_remove change
 * either; user space adds through the `track` program (proc.bpf.c), so that every change of
 * a word is atomic. */
#define PID_LIMIT (4 * 1024 * 1024)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PID_LIMIT / 64);
	__type(key, __u32);
	__type(value, __u64);
} tracked_bits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_HISTS);
	__type(key, struct hist_key);
	__type(value, struct hist);
} hists SEC(".maps");

/* What the kernel keeps while user space is not reading (stopped, or starved at nice 10): about
 * 30 000 first sights of files at ~140 bytes each. The pages are kernel memory, and mapped
 * twice into the reader, who has them in its RSS from the start (+6 MiB against 1 MiB). */
#define EVENTS_BYTES (4 * 1024 * 1024)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, EVENTS_BYTES);
} events SEC(".maps");

/* Flags for submitting the frequent records (file paths, slow operations) to `events`: the
 * reader is woken only once a quarter of the buffer is in use. It drains the buffer every
 * 100 ms and at every interval anyway (tracer/session.py); a wakeup per record made a job that
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
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FILES);
	__type(key, struct file_id);
	__type(value, __u8);
} files_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FILES);
	__type(key, struct file_key);
	__type(value, struct file_stat);
} file_stats SEC(".maps");

/* Who last dirtied pages of a file: writeback by flusher threads is charged to it. */
struct {
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

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct folio * */
	__type(value, struct folio_owner);
} folio_owners SEC(".maps");

/* Ring-buffer reservations that failed, per CPU. Never silent: user space reports the sum. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} events_lost SEC(".maps");

/* Inserts refused because the map was full, per CPU, by enum iot_map. Never silent either:
 * user space reports the sums (a refused insert loses that operation's counts). */
struct {
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
 * submitted from inside that syscall belongs to. */
/* The in-flight syscall of each thread, in task-local storage: a pointer away from the task,
 * no hashing, freed with the thread. */
struct {
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
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct thread_time);
} threads SEC(".maps");

static const struct hist zero_hist;
static const struct file_stat zero_file_stat;

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

/*
 * Slot tables. Every traced syscall's exit adds to a histogram and to a file's counters, every
 * block request's end to a histogram: a hash-map lookup for each was a third of what iotrace
 * added to a page-cache pread (docs/benchmarks.md). So a key first tries one slot of an array,
 * chosen by a hash of the key: found with an index and two compares, taken when free with one
 * compare-and-swap of its tag; only a key whose slot another key holds goes to the hash map
 * (`hists`, `file_stats`). User space reads both, adds up a key found in both, and frees the
 * slots of processes gone and of files idle with the `free_slot` program (proc.bpf.c).
 * A key is claimed before it is written: another CPU that meets the tag before the key takes
 * the hash map for that one operation, which user space adds up all the same.
 */
#define HIST_SLOTS 2048 /* powers of two; the loader passes their log2 in iot_config */
#define FILE_SLOTS 16384

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); /* user space reads it in place */
	__uint(max_entries, HIST_SLOTS);
	__type(key, __u32);
	__type(value, struct hist_slot);
} hist_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, FILE_SLOTS);
	__type(key, __u32);
	__type(value, struct file_slot);
} file_slots SEC(".maps");

/* The value of `key` in hash map `map`, made from `zero` on first use; a refused insert is
 * counted as map `idx` (enum iot_map) full. */
static __always_inline void *lookup_or_make(void *map, const void *key, const void *zero,
					    __u32 idx)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	count_map_full(idx, bpf_map_update_elem(map, key, zero, BPF_NOEXIST));
	return bpf_map_lookup_elem(map, key);
}

static __always_inline __u32 slot_index(__u64 tag, __u32 bits)
{
	return bits ? tag >> (64 - bits) : 0;
}

static __always_inline bool hist_key_eq(const struct hist_key *a, const struct hist_key *b)
{
	return a->tgid == b->tgid && a->dev == b->dev && a->layer == b->layer && a->op == b->op &&
	       a->target == b->target && a->attribution == b->attribution;
}

/* The histogram of `key`: its slot, else its entry in `hists` (made on first use). */
static __always_inline struct hist *hist_of(const struct hist_key *key)
{
	__u64 tag = slot_tag(key->tgid | (__u64)key->dev << 32,
			     key->layer | key->op << 8 | key->target << 16 |
				     (__u64)key->attribution << 24, 0);
	__u32 i = slot_index(tag, iot_config.hist_slot_bits);
	struct hist_slot *s = bpf_map_lookup_elem(&hist_slots, &i);

	if (s && s->tag == tag && hist_key_eq(&s->key, key))
		return &s->h;
	if (s && !s->tag && __sync_val_compare_and_swap(&s->tag, 0, tag) == 0) {
		s->key = *key;
		return &s->h;
	}
	return lookup_or_make(&hists, key, &zero_hist, IOT_MAP_HISTS);
}

/* Adds `n` operations of `latency_ns` that moved `bytes` to the histogram of `key`. */
static __always_inline void hist_add(const struct hist_key *key, __u64 latency_ns, __u64 bytes,
				     __u64 n)
{
	struct hist *h = hist_of(key);
	__u32 slot;

	if (!h)
		return;
	slot = log2_u64(latency_ns);
	if (slot >= IOT_MAX_SLOTS)
		slot = IOT_MAX_SLOTS - 1;
	__sync_fetch_and_add(&h->count[slot], n);
	if (bytes)
		__sync_fetch_and_add(&h->bytes[slot], bytes);
}

static __always_inline bool file_key_eq(const struct file_key *a, const struct file_key *b)
{
	return a->ino == b->ino && a->tgid == b->tgid && a->dev == b->dev && a->gen == b->gen &&
	       a->op == b->op;
}

/* The counters of `key`: its slot, else its entry in `file_stats` (made on first use). */
static __always_inline struct file_stat *file_stat_of(const struct file_key *key)
{
	__u64 tag = slot_tag(key->tgid | (__u64)key->dev << 32, key->ino,
			     key->gen | (__u64)key->op << 32);
	__u32 i = slot_index(tag, iot_config.file_slot_bits);
	struct file_slot *s = bpf_map_lookup_elem(&file_slots, &i);

	if (s && s->tag == tag && file_key_eq(&s->key, key))
		return &s->st;
	if (s && !s->tag && __sync_val_compare_and_swap(&s->tag, 0, tag) == 0) {
		s->key = *key;
		return &s->st;
	}
	return lookup_or_make(&file_stats, key, &zero_file_stat, IOT_MAP_FILE_STATS);
}

/* The interval number, advanced by user space once per interval (tracer/loader.py). */
volatile __u64 max_epoch SEC(".data.epoch") = 0;

/* The counters of (process, file, op), made on first use. */
static __always_inline struct file_stat *file_stat_for(__u32 tgid, const struct file_id *id,
						       __u8 op)
{
	struct file_key key = {};

	key.tgid = tgid;
	key.dev = id->dev;
	key.ino = id->ino;
	key.gen = id->gen;
	key.op = op;
	return file_stat_of(&key);
}

/* Per-file accounting of one completed operation. */
static __always_inline void file_op_add(__u32 tgid, const struct file_id *id, __u8 op,
					__u64 latency_ns, __u64 bytes)
{
	struct file_stat *st = file_stat_for(tgid, id, op);
	__u64 epoch = max_epoch;

	if (!st)
		return;
	__sync_fetch_and_add(&st->ops, 1);
	__sync_fetch_and_add(&st->bytes, bytes);
	__sync_fetch_and_add(&st->latency_sum_ns, latency_ns);
	/* racy by design (a max, not a count): the first op of an interval restarts it */
	if (st->max_epoch != epoch) {
		st->max_epoch = epoch;
		st->latency_max_ns = latency_ns;
	} else if (latency_ns > st->latency_max_ns) {
		st->latency_max_ns = latency_ns;
	}
}

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

static __always_inline void count_lost_event(void)
{
	__u32 zero = 0;
	__u64 *lost = bpf_map_lookup_elem(&events_lost, &zero);

	if (lost)
		*lost += 1;
}

#endif /* MAPS_BPF_H */
