// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Page cache: pages a process brings into the cache (misses: read(), mmap faults, readahead in
 * its context; each folio's owner is kept until its read starts, for reads that a kernel thread
 * starts on its behalf) and pages it dirties (so later writeback by flusher threads can be
 * charged to it).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "tracked.bpf.h"
#include "slots.bpf.h"
#include "core_fixes.bpf.h"
#define FILE_SCRATCH pagecache_file_scratch
#include "files.bpf.h"

#define S_IFMT 00170000
#define S_IFREG 0100000

/* The read that fills `folio` may be started by a kernel thread (a cgroup's held bios):
 * block.bpf.c then finds the process here. */
static __always_inline void remember_folio_owner(struct folio *folio, __u32 tgid)
{
	struct folio_owner o = {
		.mapping = (__u64)BPF_CORE_READ(folio, mapping),
		.index = BPF_CORE_READ(folio, index),
		.tgid = tgid,
	};
	__u64 key = (__u64)folio;

	bpf_map_update_elem(&folio_owners, &key, &o, BPF_ANY);
}

static __always_inline int handle_add(struct folio *folio)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct hist_key hk = {};
	struct file_stat *st;
	struct sys_start *sys;
	struct file_id id;
	__u64 pages, dir_ino;

	if (!is_tracked(tgid))
		return 0;
	sys = sys_start_of_current(false);
	if (sys && sys->ts_ns && sys->op == IOT_OP_WRITE)
		return 0; /* a buffered write allocating pages to fill: not a read miss */
	struct inode *host = BPF_CORE_READ(folio, mapping, host);

	if (!host)
		return 0;
	inode_id(host, &id);
	dir_ino = dir_ino_of(inode_dentry(host));
	inode_first_sight(host, &id, dir_ino, tgid);
	remember_folio_owner(folio, tgid);
	pages = folio_pages(folio);
	st = file_stat_near(tgid, &id, IOT_OP_READ, dir_ino, sys ? sys->counters_at : 0);
	if (st)
		__sync_fetch_and_add(&st->pages_missed, pages);
	hk.tgid = tgid;
	hk.layer = IOT_LAYER_PAGECACHE;
	hk.op = IOT_OP_READ;
	hist_add(&hk, 0, pages << iot_config.page_shift, pages);
	return 0;
}

static __always_inline int handle_dirty(struct folio *folio, struct address_space *mapping)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct sys_start *sys;
	struct inode *host;
	struct file_stat *st;
	struct file_id id;

	if (!mapping)
		return 0;
	host = BPF_CORE_READ(mapping, host);
	/* Only a regular file's pages are someone's data. A file system dirties its metadata in the
	 * block device's own page cache (bitmaps, inode tables) on behalf of whoever writes; that
	 * device's writeback (the journal's, the flusher's) would otherwise all go to the last
	 * traced process that did. */
	if ((BPF_CORE_READ(host, i_mode) & S_IFMT) != S_IFREG)
		return 0;
	inode_id(host, &id);
	if (!is_tracked(tgid)) {
		/* someone else dirties it now: later writeback is no longer ours alone */
		if (bpf_map_lookup_elem(&dirtier, &id))
			bpf_map_delete_elem(&dirtier, &id);
		return 0;
	}
	bpf_map_update_elem(&dirtier, &id, &tgid, BPF_ANY);
	sys = sys_start_of_current(false);
	st = file_stat_near(tgid, &id, IOT_OP_WRITE, dir_ino_of(inode_dentry(host)),
			    sys ? sys->counters_at : 0);
	if (st)
		__sync_fetch_and_add(&st->pages_dirtied, folio_pages(folio));
	return 0;
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(add_page_btf, struct folio *folio)
{
	return handle_add(folio);
}

SEC("raw_tp/mm_filemap_add_to_page_cache")
int BPF_PROG(add_page_raw, struct folio *folio)
{
	return handle_add(folio);
}

SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(dirty_folio_btf, struct folio *folio, struct address_space *mapping)
{
	return handle_dirty(folio, mapping);
}

SEC("raw_tp/writeback_dirty_folio")
int BPF_PROG(dirty_folio_raw, struct folio *folio, struct address_space *mapping)
{
	return handle_dirty(folio, mapping);
}
