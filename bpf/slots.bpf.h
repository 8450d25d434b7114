/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* Histograms and per-file counters: slot tables in front of `hists` and `file_stats`. */
#ifndef SLOTS_BPF_H
#define SLOTS_BPF_H

#include "maps.bpf.h"
#include "bits.bpf.h"
#include "core_fixes.bpf.h"
#include "inode.bpf.h"

static const struct hist zero_hist;
static const struct file_stat zero_file_stat;

/*
 * Slot tables. Every traced syscall's exit adds to a histogram and to a file's counters, every
 * block request's end to a histogram: a hash-map lookup for each was a third of what iotrace
 * added to a page-cache pread (docs/benchmarks.md). So a key first tries one slot of an array,
 * chosen by a hash of the key: found with an index and two compares, taken when free with one
 * compare-and-swap of its tag; only a key whose slot another key holds goes to the hash map
 * (`hists`, `file_stats`); a file key tries a second slot first (slot_index2), so that a file
 * read again in an interval finds its counters again (the log below cannot be searched). User
 * space reads both and adds up a key found in both. It frees the histogram slots of processes
 * gone with the `free_slot` program (proc.bpf.c); the file slots are two tables of FILE_SLOTS,
 * one per interval buffer (file_key.buf): the one of the interval that ended is read and
 * zeroed whole (maps.bpf.h's file_stats says when).
 * A key is claimed before it is written: another CPU that meets the tag before the key takes
 * the hash map for that one operation, which user space adds up all the same.
 */
#define HIST_SLOTS 2048 /* powers of two; the loader passes their log2 in iot_config */
#define FILE_SLOTS 16384 /* per buffer: file_slots holds two */

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); /* user space reads it in place */
	__uint(max_entries, HIST_SLOTS);
	__type(key, __u32);
	__type(value, struct hist_slot);
} hist_slots SEC(".maps");

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2 * FILE_SLOTS);
	__type(key, __u32);
	__type(value, struct file_slot);
} file_slots SEC(".maps");

/*
 * The file log: where a key whose two slots other keys hold gets its counters, when a syscall
 * adds to them, rather than in file_stats. Each buffer's records are taken in order by one
 * atomic add on its count (file_log_used), so a new file costs no hash and no allocation;
 * user space reads and zeroes the buffer's records in use, then its count. The thread's
 * sys_start remembers where its last file's counters are (counters_at), so that the reads of
 * a file after its open go straight there, wherever that is: 0 none, else the index + 1 of a
 * slot of file_slots, or with AT_LOG of a record of file_log. The key is checked there each
 * time: the place may have been read and zeroed, or taken by another key, since. A key can
 * have counters in several places (a thread each, or opened again after its place was
 * forgotten): user space adds them up, as it does a slot's and file_stats'.
 */
#define AT_LOG 0x80000000u
#define FILE_LOG_ENTRIES 65536 /* per buffer: the loader passes the size in iot_config */

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2 * FILE_LOG_ENTRIES);
	__type(key, __u32);
	__type(value, struct file_slot);
} file_log SEC(".maps");

IOT_SHARED struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} file_log_used SEC(".maps");

/* The value of `key` in hash map `map`, made from `zero` on first use; NULL when the map
 * refused the insert (full), whose error `err` gets. */
static __always_inline void *lookup_or_insert(void *map, const void *key, const void *zero,
					      long *err)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	*err = bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

/* lookup_or_insert, a refused insert counted as map `idx` (enum iot_map) full. */
static __always_inline void *lookup_or_make(void *map, const void *key, const void *zero,
					    __u32 idx)
{
	long err = 0;
	void *v = lookup_or_insert(map, key, zero, &err);

	count_map_full(idx, err);
	return v;
}

static __always_inline __u32 slot_index(__u64 tag, __u32 bits)
{
	return bits ? tag >> (64 - bits) : 0;
}

/* A file key's second slot, from the tag's next bits: taken only when its first is another's */
static __always_inline __u32 slot_index2(__u64 tag, __u32 bits)
{
	return bits ? (__u32)(tag >> (64 - 2 * bits)) & ((1u << bits) - 1) : 0;
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

/* The entry of `key` in per-file map `map`, made on first use; NULL with *err the refusal
 * where it could not be made. */
static __always_inline struct file_stat *file_entry(void *map, const struct file_key *key,
						    long *err)
{
	struct file_stat *st = bpf_map_lookup_elem(map, key);

	if (st)
		return st;
	*err = bpf_map_update_elem(map, key, &zero_file_stat, BPF_NOEXIST);
	if (*err == -IOT_E2BIG)
		return NULL;
	return bpf_map_lookup_elem(map, key);
}

/* The slot or log record that counters_at `at` (not 0) names. */
static __always_inline struct file_slot *file_slot_at(__u32 at)
{
	__u32 i = (at & ~AT_LOG) - 1;

	return at & AT_LOG ? bpf_map_lookup_elem(&file_log, &i) : bpf_map_lookup_elem(&file_slots, &i);
}

/*
 * Draining on pressure. A buffer holds one interval's keys, and an interval can bring more
 * keys than the slots, the log and file_stats hold (a fast job, a long interval): past them,
 * operations are only counted per folder. So when a buffer's log passes its mark, the one
 * program that took the mark's record tells user space, which advances the epoch and takes the
 * buffer out at once, as at an interval's end, and adds it to the interval's (tracer/live/
 * session.py). The rest of the log and file_stats are the room left while it does.
 */
static __always_inline void ask_drain(__u32 buf, __u64 used)
{
	struct iot_drain_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_lost_event();
		return;
	}
	e->kind = IOT_EVENT_DRAIN;
	e->buf = buf;
	e->used = used;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

/* A new record of file_log for `key`, in its buffer; NULL when the buffer's are all taken.
 * Its place goes to *at. */
static __always_inline struct file_stat *file_log_add(const struct file_key *key, __u64 tag,
						      __u32 *at)
{
	__u32 buf = key->buf, i;
	__u64 *used = bpf_map_lookup_elem(&file_log_used, &buf), n;
	struct file_slot *s;

	if (!used)
		return NULL;
	n = __sync_fetch_and_add(used, 1);
	if (n + 1 == iot_config.file_log_mark) /* one program takes it */
		ask_drain(buf, n + 1);
	if (n >= iot_config.file_log_entries)
		return NULL;
	i = buf * iot_config.file_log_entries + (__u32)n;
	s = bpf_map_lookup_elem(&file_log, &i);
	if (!s)
		return NULL;
	s->key = *key;
	s->tag = tag;
	*at = (i + 1) | AT_LOG;
	return &s->st;
}

static __always_inline __u64 file_tag(const struct file_key *key)
{
	return slot_tag(key->tgid | (__u64)key->dev << 32, key->ino,
			key->gen | (__u64)key->op << 32);
}

/* The counters of `key` (tagged `tag`) at `at` (a thread's counters_at), if they are there. */
static __always_inline struct file_stat *file_stat_at(__u32 at, const struct file_key *key,
						      __u64 tag)
{
	struct file_slot *s = at ? file_slot_at(at) : NULL;

	if (s && s->tag == tag && s->key.buf == key->buf && file_key_eq(&s->key, key))
		return &s->st;
	return NULL;
}

/* Slot `i` when it holds `key` (tagged `tag`), or was free and now does; else NULL. */
static __always_inline struct file_slot *file_slot_take(__u32 i, const struct file_key *key,
							__u64 tag)
{
	struct file_slot *s = bpf_map_lookup_elem(&file_slots, &i);

	if (s && s->tag == tag && file_key_eq(&s->key, key))
		return s;
	if (s && !s->tag && __sync_val_compare_and_swap(&s->tag, 0, tag) == 0) {
		s->key = *key;
		return s;
	}
	return NULL;
}

/* The counters of `key` (its buf set): where `at` (a thread's counters_at, NULL for callers
 * outside a syscall) says, else one of its two slots, else a new record of file_log (syscalls
 * only), else its entry in its buffer's `file_stats` map (made on first use), else, that map
 * full, its folder's entry in `folder_stats`. Each buffer's map is named in its own branch,
 * so that every map call has one map. */
static __always_inline struct file_stat *file_stat_of(const struct file_key *key, __u64 dir_ino,
						      __u32 *at)
{
	__u64 tag = file_tag(key);
	__u32 bits = iot_config.file_slot_bits;
	__u32 i = slot_index(tag, bits) | (__u32)key->buf << bits;
	struct file_slot *s;
	struct file_key folder;
	struct file_stat *st;
	long err = 0;

	if (at && (st = file_stat_at(*at, key, tag)))
		return st;
	if ((s = file_slot_take(i, key, tag)))
		goto found;
	i = slot_index2(tag, bits) | (__u32)key->buf << bits;
	if ((s = file_slot_take(i, key, tag)))
		goto found;
	if (at && (st = file_log_add(key, tag, at)))
		return st;
	st = key->buf ? file_entry(&file_stats1, key, &err) : file_entry(&file_stats0, key, &err);
	if (st || err != -IOT_E2BIG)
		return st;
	count_map_full(IOT_MAP_FILE_STATS, err); /* not lost: counted per folder */
	folder = *key;
	folder.ino = dir_ino;
	folder.gen = 0;
	if (key->buf)
		return lookup_or_make(&folder_stats1, &folder, &zero_file_stat, IOT_MAP_FOLDER_STATS);
	return lookup_or_make(&folder_stats0, &folder, &zero_file_stat, IOT_MAP_FOLDER_STATS);
found:
	if (at)
		*at = i + 1;
	return &s->st;
}

static __always_inline struct file_key file_key_of(__u32 tgid, const struct file_id *id, __u8 op)
{
	struct file_key key = {};

	key.tgid = tgid;
	key.dev = id->dev;
	key.ino = id->ino;
	key.gen = id->gen;
	key.op = op;
	key.buf = max_epoch & 1;
	return key;
}

/* The counters of (process, file, op) in this interval's buffer, made on first use. */
static __always_inline struct file_stat *file_stat_for(__u32 tgid, const struct file_id *id,
						       __u8 op, __u64 dir_ino, __u32 *at)
{
	struct file_key key = file_key_of(tgid, id, op);
	struct file_stat *st = file_stat_of(&key, dir_ino, at);

	if (st)
		st->dir_ino = dir_ino;
	return st;
}

/* file_stat_for for the page cache, outside the syscalls' accounting: first where the thread's
 * last file's counters are (`at`, its counters_at, read only), so that a file whose slots
 * others hold keeps its counters in its one log record, the one its close folds (a write's
 * dirtied page counted in file_stats instead was left behind as a row of its own). */
static __always_inline struct file_stat *file_stat_near(__u32 tgid, const struct file_id *id,
							__u8 op, __u64 dir_ino, __u32 at)
{
	struct file_key key = file_key_of(tgid, id, op);
	struct file_stat *st = file_stat_at(at, &key, file_tag(&key));

	if (!st)
		st = file_stat_of(&key, dir_ino, NULL);
	if (st)
		st->dir_ino = dir_ino;
	return st;
}

/* Per-file accounting of one completed operation. */
static __always_inline void file_op_add(__u32 tgid, const struct file_id *id, __u64 dir_ino,
					__u8 op, __u64 latency_ns, __u64 bytes, __u32 *at)
{
	struct file_stat *st = file_stat_for(tgid, id, op, dir_ino, at);

	if (!st)
		return;
	__sync_fetch_and_add(&st->ops, 1);
	__sync_fetch_and_add(&st->bytes, bytes);
	__sync_fetch_and_add(&st->latency_sum_ns, latency_ns);
	if (latency_ns > st->latency_max_ns) /* racy by design: a maximum, not a count */
		st->latency_max_ns = latency_ns;
}

/* Per-file accounting of one open, in the key of `op` (read, or write for a file opened for
 * writing): struct file_stat says why. `size`: the file's then, which tells user space where
 * a pass over it ends (tracer/live/rereads.py) without a syscall of its own. */
static __always_inline void file_open_add(__u32 tgid, const struct file_id *id, __u64 dir_ino,
					  __u8 op, __u64 latency_ns, __u64 size, __u32 *at)
{
	struct file_stat *st = file_stat_for(tgid, id, op, dir_ino, at);

	if (!st)
		return;
	st->size = size;
	__sync_fetch_and_add(&st->opens, 1);
	__sync_fetch_and_add(&st->open_latency_sum_ns, latency_ns);
	if (latency_ns > st->open_latency_max_ns)
		st->open_latency_max_ns = latency_ns;
}

/*
 * Folding at close. An ImageNet job reads thousands of files alike in every interval, and
 * user space keeps a row for the few that stand out (tracer/core/rollup.py, _kept) and adds up
 * the others per folder: every file's counters crossed into user space to be added up there.
 * So when a thread closes the file whose counters it holds in a slot or a log record, read
 * whole since its open in this buffer, the kernel weighs it against its process's other files
 * closed in the buffer so far (fold_groups): once more than fold_keep have been weighed, a file
 * with less than fold_share_pct of their time, bytes and pages is one the rule would not keep,
 * as those totals only grow until the drain, and it is added to its folder's row of
 * fold_stats instead, its record's counters taken (zero: user space skips it). User space
 * weighs the files it keeps against the totals with the folded ones in. A file read whole is
 * one whose later reads are re-reads (tracer/live/rereads.py): the fold sets its bit in
 * read_files and counts its bytes as re-read when the bit was set already.
 * A file with no name left at its close (unlinked while open: a DataLoader worker's batch in
 * /dev/shm, 50 a second each) has nothing a row of its own could name: it is folded whatever
 * its share, read or written, and user space's rule weighs it as it does the others.
 * Folders are bounded as files are: a process's reads past fold_keep folders in the buffer
 * (a shuffled image folder touches every class in every interval) are added up in the row of
 * their folder's parent (user space's roll-up adds up the folders past as many in their
 * parents: rollup.fold_folders), so that the rows crossing into user space are a few hundred
 * rather than one per worker and class.
 */
static const struct fold_stat zero_fold_stat;
static const struct fold_group zero_fold_group;

/* A record's key.pad[0] once a close weighed it: kept, or folded (its counters moved; a file
 * read whole again in the same buffer, as a small data set's are, is folded again into the
 * same row, where it is already one of the files) */
#define FOLD_KEPT 1
#define FOLD_FOLDED 2

static __always_inline bool mark_read_whole(const struct file_key *k)
{
	__u64 x = (__u64)k->dev * 0x9E3779B97F4A7C15ull + k->ino * 0xC2B2AE3D27D4EB4Full +
		  (__u64)k->gen * 0x165667B19E3779F9ull;
	__u32 i, w;
	__u64 bit, *word;

	x ^= x >> 29;
	i = x >> (64 - READ_FILES_BITS);
	w = i >> 6;
	bit = 1ull << (i & 63);
	word = bpf_map_lookup_elem(&read_files, &w);
	return word && (__sync_fetch_and_or(word, bit) & bit);
}

/* Below `share` percent of `total` (which holds `v`): the rule would not keep it for this. */
static __always_inline bool below_share(__u64 v, __u64 total, __u32 share)
{
	return !total || v * 100 < total * share;
}

static __always_inline struct fold_stat *fold_stat_of(__u32 buf, const struct file_key *k,
						      long *err)
{
	return buf ? lookup_or_insert(&fold_stats1, k, &zero_fold_stat, err)
		   : lookup_or_insert(&fold_stats0, k, &zero_fold_stat, err);
}

/* `dentry`: the file's, whose folder's parent takes it when its folder is new to the process
 * past fold_keep folders. */
static __always_inline void fold_on_close(__u32 tgid, const struct file_id *id, __u32 at,
					  bool gone, struct dentry *dentry)
{
	struct file_slot *s = at ? file_slot_at(at) : NULL;
	__u64 e = max_epoch, gkey, lat, pages, n, bytes, missed, total_lat, total_bytes, total_pages;
	struct fold_group *g = NULL;
	struct fold_stat *f;
	struct file_key fk;
	__u32 buf = e & 1;
	long err = 0;
	bool whole, again;

	if (!s || !s->tag || s->key.buf != buf || s->key.tgid != tgid || s->key.ino != id->ino ||
	    s->key.dev != id->dev || s->key.gen != id->gen || s->key.pad[0] == FOLD_KEPT)
		return; /* not the file closed, or kept at an earlier close */
	whole = s->key.op == IOT_OP_READ && s->st.opens && s->st.size && s->st.bytes >= s->st.size;
	if (!whole && !gone)
		return;
	again = s->key.pad[0] == FOLD_FOLDED;
	if (!again)
		s->key.pad[0] = FOLD_KEPT;
	if (s->key.op != IOT_OP_READ)
		goto fold; /* fold_groups weighs reads */
	gkey = tgid | (__u64)buf << 32;
	if (again) { /* weighed once: its row is found as at its first fold */
		g = bpf_map_lookup_elem(&fold_groups, &gkey);
		goto fold;
	}
	g = lookup_or_insert(&fold_groups, &gkey, &zero_fold_group, &err);
	if (!g)
		return;
	lat = s->st.latency_sum_ns + s->st.open_latency_sum_ns;
	pages = s->st.pages_missed + s->st.pages_dirtied;
	bytes = s->st.bytes;
	/* every file weighed counts in the totals, folded or not */
	n = __sync_fetch_and_add(&g->files, 1) + 1;
	total_lat = __sync_fetch_and_add(&g->latency_ns, lat) + lat;
	total_bytes = __sync_fetch_and_add(&g->bytes, bytes) + bytes;
	total_pages = __sync_fetch_and_add(&g->pages, pages) + pages;
	if (!gone && (n <= iot_config.fold_keep ||
		      !below_share(lat, total_lat, iot_config.fold_share_pct) ||
		      !below_share(bytes, total_bytes, iot_config.fold_share_pct) ||
		      !below_share(pages, total_pages, iot_config.fold_share_pct)))
		return;
fold:
	fk = s->key;
	fk.ino = s->st.dir_ino;
	fk.gen = 0;
	fk.pad[0] = 0;
	f = buf ? bpf_map_lookup_elem(&fold_stats1, &fk) : bpf_map_lookup_elem(&fold_stats0, &fk);
	if (!f && g && g->folders >= iot_config.fold_keep) {
		/* a folder past the process's fold_keep: its parent's row (none where the folder
		 * is its file system's root) */
		n = dir_ino_of(kernel_view(dentry, struct dentry)->d_parent);
		if (n)
			fk.ino = n;
		f = fold_stat_of(buf, &fk, &err);
	} else if (!f) {
		f = fold_stat_of(buf, &fk, &err);
		if (f && g)
			__sync_fetch_and_add(&g->folders, 1);
	}
	if (!f)
		return; /* full: the file keeps its record */
	s->key.pad[0] = FOLD_FOLDED;
	bytes = __sync_lock_test_and_set(&s->st.bytes, 0);
	missed = __sync_lock_test_and_set(&s->st.pages_missed, 0);
	__sync_fetch_and_add(&f->st.ops, __sync_lock_test_and_set(&s->st.ops, 0));
	__sync_fetch_and_add(&f->st.bytes, bytes);
	__sync_fetch_and_add(&f->st.latency_sum_ns, __sync_lock_test_and_set(&s->st.latency_sum_ns, 0));
	__sync_fetch_and_add(&f->st.pages_missed, missed);
	__sync_fetch_and_add(&f->st.pages_dirtied, __sync_lock_test_and_set(&s->st.pages_dirtied, 0));
	__sync_fetch_and_add(&f->st.opens, __sync_lock_test_and_set(&s->st.opens, 0));
	__sync_fetch_and_add(&f->st.open_latency_sum_ns,
			     __sync_lock_test_and_set(&s->st.open_latency_sum_ns, 0));
	n = __sync_lock_test_and_set(&s->st.latency_max_ns, 0);
	if (n > f->st.latency_max_ns) /* racy by design, as file_op_add's */
		f->st.latency_max_ns = n;
	n = __sync_lock_test_and_set(&s->st.open_latency_max_ns, 0);
	if (n > f->st.open_latency_max_ns)
		f->st.open_latency_max_ns = n;
	if (s->st.size > f->st.size) /* as user space's roll-up keeps a folder's largest */
		f->st.size = s->st.size;
	f->st.dir_ino = fk.ino;
	if (!again)
		__sync_fetch_and_add(&f->files, 1);
	if (whole && mark_read_whole(&s->key)) {
		__sync_fetch_and_add(&f->reread_bytes, bytes);
		__sync_fetch_and_add(&f->reread_pages, missed);
	}
}

#endif /* SLOTS_BPF_H */
