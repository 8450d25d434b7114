// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Block layer: per (process, disk, op) histograms of queue time (insert -> issue) and service
 * time (issue -> complete), and slow requests as events. A request is charged where it is
 * created (block_io_start, in the submitter's context; block_rq_insert or block_rq_issue on
 * kernels without it): to the submitter when it is traced (`direct`, or `readahead`). A request
 * that a kernel thread starts (blk-throttle's worker submits the bios it held for a cgroup over
 * its I/O limit) is charged to the process whose bio it is: iomap direct I/O through its
 * struct iomap_dio, page-cache reads through the folio's owner (pagecache.bpf.c). Else, for
 * writes (flusher threads, and a throttled fsync's bios), to the traced process that dirtied
 * the file (`writeback`).
 *
 * Every other request is recorded too, with the cgroup of its bio and the name of the task that
 * started it, so that `block_users` says who else used each disk: a job slowed by a neighbour
 * on its volume sees the neighbour's share of the requests, bytes and service time.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "tracked.bpf.h"
#include "slots.bpf.h"
#include "core_fixes.bpf.h"
#define FILE_SCRATCH block_file_scratch
#include "files.bpf.h"

/*
 * Requests in flight, found by the request's address. Most live in `rq_slots`, a table indexed
 * by a hash of the address: finding one is an array index and a compare, taking or freeing a
 * slot one compare-and-swap, with no lock and no allocation (a hash-map insert and delete per
 * request were most of the block programs' cost). A request whose slot is held by another one
 * in flight goes to `rq_starts`, a hash map, so none is lost.
 */
#define RQ_SLOTS 8192 /* a power of two; the loader passes log2 of the size in iot_config */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RQ_SLOTS);
	__type(key, __u32);
	__type(value, struct rq_slot);
} rq_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct request * */
	__type(value, struct rq_start);
} rq_starts SEC(".maps");

/* Entries in rq_starts: while none, a request without a slot needs no lookup there. */
__u64 rq_starts_used = 0;

/*
 * Traced requests that were issued and whose end no completion program saw: on 6.18 (KVM or
 * Firecracker, virtio disk) the kernel now and then runs neither block_rq_complete's nor
 * block_io_done's program for a run of requests, with no recursion miss counted (README, known
 * limits). Found here when the request's address starts a new request while the old record is
 * still held; user space adds the records left at the end (tracer/kernel/maps.py). [0]: requests,
 * [1]: bytes. Their latencies are unknown, so they are in no histogram.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} block_unseen SEC(".maps");

/*
 * Who used each disk (struct block_user_key): a key per (disk, op, cgroup, name), cumulative,
 * never deleted while tracing, so the map is bounded by the distinct users a host has. Named
 * keys take at most BLOCK_USERS_NAMED entries; past that a disk's requests go to its key
 * without a cgroup or name (`rest`), whose room is kept, so no request is lost while
 * fewer than BLOCK_USERS_MAX - BLOCK_USERS_NAMED disks are in use (a refused insert then is
 * counted in map_full).
 */
#define BLOCK_USERS_MAX 4096
#define BLOCK_USERS_NAMED (BLOCK_USERS_MAX - 256)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BLOCK_USERS_MAX);
	__type(key, struct block_user_key);
	__type(value, struct block_user);
} block_users SEC(".maps");

__u64 block_users_used = 0;

static __always_inline struct block_user *block_user_of(struct block_user_key *k)
{
	struct block_user zero = {};
	struct block_user *u = bpf_map_lookup_elem(&block_users, k);
	long err;

	if (u)
		return u;
	if (block_users_used >= BLOCK_USERS_NAMED) { /* the disk's rest key instead */
		__builtin_memset(k->comm, 0, sizeof(k->comm));
		k->cgroup = 0;
		k->kthread = 0;
		k->rest = 1;
		u = bpf_map_lookup_elem(&block_users, k);
		if (u)
			return u;
	}
	err = bpf_map_update_elem(&block_users, k, &zero, BPF_NOEXIST);
	if (!err)
		__sync_fetch_and_add(&block_users_used, 1);
	else
		count_map_full(IOT_MAP_BLOCK_USERS, err);
	return bpf_map_lookup_elem(&block_users, k); /* (EEXIST: another CPU made it) */
}

/* A request that ended after `service_ns` in service: its user's counts. */
static __always_inline void block_user_add(const struct rq_start *s, __u64 service_ns)
{
	struct block_user_key k = {
		.dev = s->dev, .op = s->op, .traced = s->tgid != 0, .kthread = s->kthread,
		.cgroup = s->cgroup,
	};
	struct block_user *u;

	if (!s->tgid)
		__builtin_memcpy(k.comm, s->comm, sizeof(k.comm));
	u = block_user_of(&k);
	if (!u)
		return;
	__sync_fetch_and_add(&u->requests, 1);
	__sync_fetch_and_add(&u->bytes, s->data_len);
	__sync_fetch_and_add(&u->service_ns, service_ns);
}

static __always_inline struct rq_slot *rq_slot_of(__u64 rq)
{
	__u32 bits = iot_config.rq_slot_bits;
	__u32 i = 0;

	if (bits) /* Fibonacci hashing of the address (requests are at least 64 bytes apart) */
		i = ((rq >> 6) * 0x9E3779B97F4A7C15ull) >> (64 - bits);
	return bpf_map_lookup_elem(&rq_slots, &i);
}

/* Where request `rq` keeps its record from now on: its slot when free (or already its own: a
 * requeued request inserted again, before 6.5; rq_drop_unseen has dropped any other record at
 * its address), else a new rq_starts entry. Fills it with `s`. */
static __always_inline void rq_record(__u64 rq, const struct rq_start *s)
{
	struct rq_slot *slot = rq_slot_of(rq);
	__u64 owner;
	long err;

	if (slot) {
		owner = __sync_val_compare_and_swap(&slot->rq, 0, rq);
		if (owner == 0 || owner == rq) {
			slot->s = *s;
			return;
		}
	}
	err = bpf_map_update_elem(&rq_starts, &rq, s, BPF_NOEXIST);
	if (!err)
		__sync_fetch_and_add(&rq_starts_used, 1);
	else if (err == -IOT_EEXIST) /* its own record: inserted again after a requeue */
		bpf_map_update_elem(&rq_starts, &rq, s, BPF_EXIST);
	else
		count_map_full(IOT_MAP_RQ_STARTS, err);
}

/* The record of request `rq`, NULL when it is not traced. */
static __always_inline struct rq_start *rq_find(__u64 rq)
{
	struct rq_slot *slot = rq_slot_of(rq);

	if (slot && slot->rq == rq)
		return &slot->s;
	if (!rq_starts_used)
		return NULL;
	return bpf_map_lookup_elem(&rq_starts, &rq);
}

/* Request `rq` ended (completed, or merged into another): its record goes. */
static __always_inline void rq_forget(__u64 rq)
{
	struct rq_slot *slot = rq_slot_of(rq);

	/* a compare-and-swap, not a store: it orders the reads of the record before the release */
	if (slot && __sync_val_compare_and_swap(&slot->rq, rq, 0) == rq)
		return;
	if (rq_starts_used && bpf_map_delete_elem(&rq_starts, &rq) == 0)
		__sync_fetch_and_sub(&rq_starts_used, 1);
}

/*
 * A request starts at an address that may still hold the record of an earlier request whose
 * end no program saw. With block_io_start (6.5+, once per request) any record there is such a
 * one. Without it a request starts at its insert (or issue), which a requeued request passes
 * again: its record then has no issue time (block_rq_requeue clears it), while one that was
 * issued and never ended does. Such a record is counted in `block_unseen` and dropped, so the
 * new request, traced or not, is never charged with the old one's start.
 */
static __always_inline void rq_drop_unseen(__u64 rq)
{
	struct rq_start *old = rq_find(rq);
	__u32 i = 0;
	__u64 *n;

	if (!old || (!old->issue_ns && !iot_config.have_io_start))
		return;
	if (old->issue_ns) /* it ended: its user used the disk, for a service time unknown */
		block_user_add(old, 0);
	if (old->issue_ns && old->tgid) { /* the traced ones: others are no one's loss */
		n = bpf_map_lookup_elem(&block_unseen, &i);
		if (n)
			*n += 1;
		i = 1;
		n = bpf_map_lookup_elem(&block_unseen, &i);
		if (n)
			*n += old->data_len;
	}
	rq_forget(rq);
}

static __always_inline __u8 rq_op(__u32 cmd_flags)
{
	switch (cmd_flags & 0xff) { /* REQ_OP_MASK */
	case 0: return IOT_OP_READ;     /* REQ_OP_READ */
	case 1: return IOT_OP_WRITE;    /* REQ_OP_WRITE */
	case 2: return IOT_OP_FLUSH;    /* REQ_OP_FLUSH */
	case 3: return IOT_OP_DISCARD;  /* REQ_OP_DISCARD */
	default: return IOT_OP_OTHER;
	}
}

/* `rq` is a kernel_view() of the request. */
static __always_inline __u32 rq_dev(struct request *rq)
{
	struct request_queue *q = rq->q;
	struct gendisk *disk = q ? q->disk : NULL;

	if (!disk)
		return 0;
	return ((__u32)disk->major << 20) | (__u32)disk->first_minor;
}

/* The inode of the file that the request's first page caches, its id in `id`; NULL for
 * anonymous pages (O_DIRECT buffers) and requests without data. */
static __always_inline struct inode *rq_page_file(struct request *rq, struct file_id *id)
{
	struct page *page = BPF_CORE_READ(rq, bio, bi_io_vec, bv_page);
	struct address_space *mapping;
	struct inode *host;

	if (!page)
		return NULL;
	mapping = BPF_CORE_READ(page, mapping);
	if (!mapping || ((unsigned long)mapping & 3)) /* PAGE_MAPPING_ANON / _MOVABLE flag bits */
		return NULL;
	host = BPF_CORE_READ(mapping, host);
	if (host)
		inode_id(host, id);
	return host;
}

/* Completion callbacks of bios, by address (typeless ksyms, resolved from kallsyms at load; 0
 * where the kernel has no such function, and then no bio is taken for one of them). */
extern const void iomap_dio_bio_end_io __ksym __weak;
extern const void bio_chain_endio __ksym __weak;

#define IOT_PF_KTHREAD 0x00200000 /* task->flags of kernel threads */

/* A kernel thread started the request: its bios are someone else's (blk-throttle's dispatch
 * worker, a stacked driver's thread). A helper call and a load for untraced user tasks. */
static __always_inline bool current_is_kthread(void)
{
	return bpf_get_current_task_btf()->flags & IOT_PF_KTHREAD;
}

/* The traced process whose iomap direct I/O (ext4, xfs, ...) bio `bio` is. The bio's private
 * data is then its struct iomap_dio, whose submit.waiter is the task that submitted it, valid
 * until the last bio of the I/O ends (sync and async alike; the async completion reuses that
 * field only after). The front of a split bio points to the bio it was split from. */
static __always_inline bool bio_dio_owner(struct bio *bio, struct rq_start *s)
{
	struct iomap_dio *dio;
	struct inode *inode;
	void *end_io;
	__u32 tgid;

	if (!bpf_core_type_exists(struct iomap_dio) || !&iomap_dio_bio_end_io || !bio)
		return false;
	end_io = BPF_CORE_READ(bio, bi_end_io);
	if (&bio_chain_endio && end_io == &bio_chain_endio) {
		bio = BPF_CORE_READ(bio, bi_private);
		end_io = BPF_CORE_READ(bio, bi_end_io);
	}
	if (end_io != &iomap_dio_bio_end_io)
		return false;
	dio = BPF_CORE_READ(bio, bi_private);
	tgid = BPF_CORE_READ(dio, submit.waiter, tgid);
	if (!tgid || !is_tracked(tgid))
		return false;
	s->tgid = tgid;
	s->attribution = IOT_ATTR_DIRECT;
	inode = BPF_CORE_READ(dio, iocb, ki_filp, f_inode);
	if (inode) {
		inode_id(inode, &s->file);
		s->dir_ino = dir_ino_of(inode_dentry(inode));
	}
	return true;
}

/* The folio of the first byte of `bio`. Where a bio was split, the part after the split shares
 * the bio_vec array and starts at its bi_iter; a bio_vec may span several pages, even several
 * folios (physically contiguous ones are merged), so the page is found from the offset. */
static __always_inline struct folio *bio_first_folio(struct bio *bio)
{
	struct bio_vec *bv = BPF_CORE_READ(bio, bi_io_vec);
	__u32 idx = BPF_CORE_READ(bio, bi_iter.bi_idx);
	__u32 done = BPF_CORE_READ(bio, bi_iter.bi_bvec_done);
	struct page *page;
	unsigned long head;
	__u32 offset;

	if (!bv || idx >= 4096)
		return NULL;
	bv = (void *)bv + idx * bpf_core_type_size(struct bio_vec);
	page = BPF_CORE_READ(bv, bv_page);
	offset = BPF_CORE_READ(bv, bv_offset) + done;
	if (!page)
		return NULL;
	page = (void *)page + (offset >> iot_config.page_shift) * bpf_core_type_size(struct page);
	head = BPF_CORE_READ(page, compound_head);
	return (struct folio *)(head & 1 ? head - 1 : (unsigned long)page); /* a tail page's head */
}

/* The traced process that brought the request's first folio into the page cache
 * (folio_owners, maps.bpf.h), for a read; its entry is used up. */
static __always_inline bool rq_folio_owner(struct request *rq, struct rq_start *s)
{
	struct folio *folio = bio_first_folio(BPF_CORE_READ(rq, bio));
	struct address_space *mapping;
	struct folio_owner *o;
	struct inode *host;
	bool owned;
	__u32 tgid;
	__u64 key;

	if (!folio)
		return false;
	key = (__u64)folio;
	o = bpf_map_lookup_elem(&folio_owners, &key);
	if (!o)
		return false;
	mapping = BPF_CORE_READ(folio, mapping);
	/* the folio was freed and reused since, or its owner is gone: not this request's */
	owned = o->mapping == (__u64)mapping && o->index == BPF_CORE_READ(folio, index) &&
		is_tracked(o->tgid);
	tgid = o->tgid; /* read before the delete frees the entry */
	bpf_map_delete_elem(&folio_owners, &key); /* used up either way */
	if (!owned)
		return false;
	host = BPF_CORE_READ(mapping, host);
	s->tgid = tgid;
	inode_id(host, &s->file);
	s->dir_ino = dir_ino_of(inode_dentry(host));
	return true;
}

/* The bio's cgroup (its blkcg's cgroup: the kernfs id, which is its directory's inode
 * number), 0 when the kernel has no blk-cgroup or the request no bio. */
static __always_inline __u64 rq_cgroup(struct request *rq)
{
	if (!bpf_core_field_exists(struct bio, bi_blkg))
		return 0;
	return BPF_CORE_READ(rq, bio, bi_blkg, blkcg, css.cgroup, kn, id);
}

/* A write of pages that a traced process dirtied (flusher threads, a throttled fsync). */
static __always_inline bool rq_writeback_owner(struct request *rq, __u32 flags,
					       struct rq_start *s)
{
	struct inode *host;
	__u32 *owner;

	if (rq_op(flags) != IOT_OP_WRITE || !(host = rq_page_file(rq, &s->file)))
		return false;
	owner = bpf_map_lookup_elem(&dirtier, &s->file);
	if (!owner || !is_tracked(*owner))
		return false;
	s->dir_ino = dir_ino_of(inode_dentry(host));
	s->tgid = *owner;
	s->attribution = IOT_ATTR_WRITEBACK;
	return true;
}

/* A request that a kernel thread started for a traced process (see current_is_kthread). */
static __always_inline bool rq_owner_for_kthread(struct request *rq, __u32 flags,
						 struct rq_start *s)
{
	if (bio_dio_owner(BPF_CORE_READ(rq, bio), s))
		return true;
	if (rq_op(flags) != IOT_OP_READ || !rq_folio_owner(rq, s))
		return false;
	s->attribution = rq_is_readahead(flags) ? IOT_ATTR_READAHEAD : IOT_ATTR_DIRECT;
	return true;
}

static __always_inline int start_request(struct request *rq)
{
	struct request *r = kernel_view(rq, struct request);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 flags = r->cmd_flags;
	struct rq_start s = {};
	struct sys_start *sys;
	struct inode *host;
	bool kthread = false;

	rq_drop_unseen((__u64)rq);
	/* a thread with an in-flight-syscall record is traced (see sys_enter): no lookup then */
	sys = sys_start_of_current(false);
	if (sys || is_tracked(tgid)) {
		s.tgid = tgid;
		s.attribution = rq_is_readahead(flags) ? IOT_ATTR_READAHEAD : IOT_ATTR_DIRECT;
		if (sys && sys->ts_ns && sys->file.dev) {
			s.file = sys->file; /* submitted from inside a read/write/fsync of this file */
			s.dir_ino = sys->dir_ino;
		} else if ((host = rq_page_file(rq, &s.file))) { /* page faults, readahead */
			s.dir_ino = dir_ino_of(inode_dentry(host));
		}
	} else if ((kthread = current_is_kthread()) && rq_owner_for_kthread(rq, flags, &s)) {
		/* charged to the process whose bio it is */
	} else if (!rq_writeback_owner(rq, flags, &s)) {
		/* someone else's: counted in block_users only (tgid 0), under its cgroup and the
		 * name of the task that started it (none for kernel threads) */
		__builtin_memset(&s, 0, sizeof(s));
		s.kthread = kthread;
		if (!kthread)
			bpf_get_current_comm(s.comm, sizeof(s.comm));
	}
	s.cgroup = rq_cgroup(r);
	s.dev = rq_dev(r);
	s.op = rq_op(flags);
	rq_record((__u64)rq, &s);
	return 0;
}

static __always_inline int handle_insert(struct request *rq)
{
	struct rq_start *s;

	if (!iot_config.have_io_start)
		start_request(rq);
	s = rq_find((__u64)rq);
	if (s)
		s->insert_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int handle_issue(struct request *rq)
{
	struct request *r = kernel_view(rq, struct request);
	struct rq_start *s = rq_find((__u64)rq);

	if (!iot_config.have_io_start && !r->q->elevator && (!s || s->issue_ns)) {
		/* Without block_io_start, a request issued directly (no I/O scheduler, so maybe no
		 * insert) is first seen here, in the submitter's context (a record with an issue
		 * time is an earlier request's that ended unseen). With a scheduler every request
		 * is inserted first, and issue may run in anyone's context: no guess then. */
		start_request(rq);
		s = rq_find((__u64)rq);
	}
	if (!s)
		return 0;
	s->issue_ns = bpf_ktime_get_ns();
	s->data_len = r->__data_len;
	if (s->insert_ns && s->tgid) {
		struct hist_key k = {
			.tgid = s->tgid, .dev = s->dev, .layer = IOT_LAYER_BLOCK_QUEUE,
			.op = s->op, .attribution = s->attribution,
		};
		hist_add(&k, s->issue_ns - s->insert_ns, s->data_len, 1);
		s->insert_ns = 0; /* a requeued request is counted once in the queue */
	}
	return 0;
}

static __always_inline void emit_slow(struct request *rq, const struct rq_start *s,
				      const struct hist_key *k, __u64 latency_ns)
{
	struct iot_slow_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_lost_event();
		return;
	}
	e->kind = IOT_EVENT_SLOW;
	e->pid = s->tgid;
	e->tid = 0;
	e->dev = k->dev;
	e->ino = s->file.ino;
	e->file_dev = s->file.dev;
	e->file_gen = s->file.gen;
	e->layer = IOT_LAYER_BLOCK;
	e->op = k->op;
	e->ts_ns = s->issue_ns;
	e->offset = BPF_CORE_READ(rq, __sector) << 9;
	e->bytes = s->data_len;
	e->latency_ns = latency_ns;
	__builtin_memset(e->comm, 0, sizeof(e->comm));
	e->dir_ino = s->dir_ino;
	bpf_ringbuf_submit(e, events_wakeup());
}

static __always_inline int handle_complete(struct request *rq)
{
	struct rq_start *s = rq_find((__u64)rq);
	__u64 latency_ns;

	if (!s)
		return 0;
	if (s->issue_ns) {
		struct hist_key k = {
			.tgid = s->tgid, .dev = s->dev, .layer = IOT_LAYER_BLOCK,
			.op = s->op, .attribution = s->attribution,
		};
		latency_ns = bpf_ktime_get_ns() - s->issue_ns;
		block_user_add(s, latency_ns);
		if (!s->tgid)
			goto done;
		hist_add(&k, latency_ns, s->data_len, 1);
		if (iot_config.slow_ns && latency_ns >= iot_config.slow_ns)
			emit_slow(rq, s, &k, latency_ns);
	}
done:
	rq_forget((__u64)rq);
	return 0;
}

/* A request sent back to the queue (the driver was busy): it is issued again later, and until
 * then it is not in service. */
static __always_inline int handle_requeue(struct request *rq)
{
	struct rq_start *s = rq_find((__u64)rq);

	if (s)
		s->issue_ns = 0;
	return 0;
}

/* A request merged into another (the I/O scheduler joined two adjacent ones) never completes:
 * the one it joined carries its bytes from now on. */
static __always_inline int handle_merge(struct request *rq)
{
	rq_forget((__u64)rq);
	return 0;
}

SEC("raw_tp/block_io_start")
int BPF_PROG(io_start_raw, struct request *rq)
{
	return start_request(rq);
}

SEC("raw_tp/block_rq_insert")
int BPF_PROG(rq_insert_raw, struct request *rq)
{
	return handle_insert(rq);
}

SEC("raw_tp/block_rq_issue")
int BPF_PROG(rq_issue_raw, struct request *rq)
{
	return handle_issue(rq);
}

SEC("raw_tp/block_rq_requeue")
int BPF_PROG(rq_requeue_raw, struct request *rq)
{
	return handle_requeue(rq);
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(rq_complete_raw, struct request *rq)
{
	return handle_complete(rq);
}

/* The end of a request again, later on the same path (6.5+, where block_io_start exists too):
 * a request whose block_rq_complete did not reach this program is counted here, and one that
 * was counted is no longer found. When neither runs, the request ends unseen (`block_unseen`
 * above; README, known limits). */
SEC("raw_tp/block_io_done")
int BPF_PROG(io_done_raw, struct request *rq)
{
	return handle_complete(rq);
}

SEC("raw_tp/block_rq_merge")
int BPF_PROG(rq_merge_raw, struct request *rq)
{
	return handle_merge(rq);
}
