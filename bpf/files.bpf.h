/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* Files: the full path sent once, on first sight (their identity: inode.bpf.h). */
#ifndef FILES_BPF_H
#define FILES_BPF_H

#include "maps.bpf.h"
#include "core_fixes.bpf.h"
#include "inode.bpf.h"

#define FMODE_WRITE 0x2

/* Whether user space has the path of folder `dir_ino` on `dev`, so that a file of it needs no
 * record of its own: it is named from the folder's listing when a row needs it. A file open for
 * writing still sends one (a checkpoint or a temporary file may be gone from the listing by
 * then), as does a deleted file. */
static __always_inline bool folder_known(__u32 dev, __u64 dir_ino, struct inode *inode,
					 unsigned int f_mode)
{
	struct folder_id f = { .dev = dev, .ino = dir_ino };

	return dir_ino && !(f_mode & FMODE_WRITE) && bpf_map_lookup_elem(&dirs_seen, &f) &&
	       BPF_CORE_READ(inode, i_nlink);
}

/* First-sight events are built here (2 KiB, too big for the stack), then copied out. One per
 * stage that includes this header (it names it FILE_SCRATCH): a block completion's interrupt
 * or a preempted syscall program must not find another stage's record half built on its CPU,
 * as it could not when each stage was an object of its own. */
#ifndef FILE_SCRATCH
#error "define FILE_SCRATCH, this stage's name for its scratch map, before including files.bpf.h"
#endif
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct iot_file_event);
} FILE_SCRATCH SEC(".maps");

/* State of the dentry walk, one bpf_loop() step per dentry or mount crossing. Kernel pointers
 * are plain numbers here: they are only ever passed to CO-RE reads. */
struct path_walk {
	struct dentry *dentry;
	struct vfsmount *vfsmnt;
	struct mount *mnt;
	struct dentry *root_dentry;
	struct vfsmount *root_mnt;
	__u32 depth;
	__u32 len; /* bytes of names filled */
	__u32 done;
};

static long path_walk_step(__u32 i, void *ctx)
{
	struct path_walk *w = ctx;
	/* locals: CO-RE reads must start from kernel types, not from fields of struct path_walk */
	struct dentry *dentry = w->dentry, *parent, *mnt_root;
	struct vfsmount *vfsmnt = w->vfsmnt;
	struct mount *mnt = w->mnt, *up;
	struct iot_file_event *e;
	__u32 zero = 0, len;
	long n;

	if (vfsmnt && dentry == w->root_dentry && vfsmnt == w->root_mnt) {
		w->done = 1;
		return 1;
	}
	parent = BPF_CORE_READ(dentry, d_parent);
	if (!vfsmnt && dentry == parent) { /* the file system's root (walk without a mount) */
		w->done = 1;
		return 1;
	}
	mnt_root = vfsmnt ? BPF_CORE_READ(vfsmnt, mnt_root) : NULL;
	if (vfsmnt && (dentry == mnt_root || dentry == parent)) {
		up = BPF_CORE_READ(mnt, mnt_parent);
		if (up == mnt || !up) { /* the root mount of this namespace */
			w->done = 1;
			return 1;
		}
		w->dentry = BPF_CORE_READ(mnt, mnt_mountpoint);
		w->mnt = up;
		w->vfsmnt = (void *)up + bpf_core_field_offset(struct mount, mnt);
		return 0;
	}
	e = bpf_map_lookup_elem(&FILE_SCRATCH, &zero);
	/* room for one more name of the longest kind: the walk stops (truncated) otherwise */
	len = w->len;
	if (!e || w->depth >= IOT_PATH_DEPTH || len > IOT_PATH_BYTES - IOT_NAME_LEN)
		return 1;
	n = bpf_probe_read_kernel_str(e->names + len, IOT_NAME_LEN,
				      BPF_CORE_READ(dentry, d_name.name));
	if (n <= 0)
		return 1;
	if (n >= IOT_NAME_LEN)
		e->flags |= IOT_FILE_TRUNCATED; /* maybe cut: user space checks /proc/PID/fd */
	w->len += n;
	w->depth++;
	w->dentry = parent;
	return 0;
}

/* Claims (s_dev, inode, generation) in files_seen and sends its path to user space: the names met by the
 * walk `w`, which the caller has pointed at the file's dentry. False when the record could not
 * be sent (the ring buffer full): the claim is given up, so that a later sight sends it. */
static __always_inline bool send_path(const struct file_id *id, struct inode *inode, int fd,
				      __u32 tgid, __u32 flags, __u64 dir_ino, struct path_walk *w)
{
	struct folder_id folder = { .dev = id->dev, .ino = dir_ino };
	struct iot_file_event *e;
	__u32 zero = 0, len;
	__u8 one = 1;

	if (bpf_map_update_elem(&files_seen, id, &one, BPF_NOEXIST))
		return true; /* another CPU is sending it */
	e = bpf_map_lookup_elem(&FILE_SCRATCH, &zero);
	if (!e)
		return true;
	e->kind = IOT_EVENT_FILE;
	e->pid = tgid;
	e->dev = id->dev;
	e->fd = fd;
	e->ino = id->ino;
	e->gen = id->gen;
	e->dir_ino = dir_ino;
	e->flags = flags | (BPF_CORE_READ(inode, i_nlink) == 0 ? IOT_FILE_DELETED : 0);
	bpf_probe_read_kernel_str(e->fstype, sizeof(e->fstype),
				  BPF_CORE_READ(inode, i_sb, s_type, name));
	bpf_loop(IOT_PATH_DEPTH + 16, path_walk_step, w, 0);
	e->depth = w->depth;
	e->len = w->len;
	if (!w->done)
		e->flags |= IOT_FILE_TRUNCATED;
	len = w->len;
	if (len > IOT_PATH_BYTES) /* never: for the verifier */
		len = IOT_PATH_BYTES;
	/* a cut path is completed from /proc/PID/fd: wake user space while the fd is open */
	if (bpf_ringbuf_output(&events, e, __builtin_offsetof(struct iot_file_event, names) + len,
			       e->flags & IOT_FILE_TRUNCATED ? BPF_RB_FORCE_WAKEUP : events_wakeup())) {
		count_lost_event();
		bpf_map_delete_elem(&files_seen, id); /* try again next time */
		return false;
	} else if (dir_ino && !(e->flags & (IOT_FILE_TRUNCATED | IOT_FILE_DELETED))) {
		bpf_map_update_elem(&dirs_seen, &folder, &one, BPF_ANY);
	}
	return true;
}

/* Page-cache misses show files that no syscall touched (mmap, executables): their path from
 * the inode's first dentry up to the file system's root, sent once. */
/* The dentry of `inode` (its first, for a file of several names), NULL when none. */
static __always_inline struct dentry *inode_dentry(struct inode *inode)
{
	struct hlist_node *alias = BPF_CORE_READ(inode, i_dentry.first);

	return alias ? (void *)alias - bpf_core_field_offset(struct dentry, d_u.d_alias) : NULL;
}

static __always_inline void inode_first_sight(struct inode *inode, const struct file_id *id,
					      __u64 dir_ino, __u32 tgid)
{
	struct path_walk w = {};

	if (folder_known(id->dev, dir_ino, inode, 0) || bpf_map_lookup_elem(&files_seen, id))
		return;
	w.dentry = inode_dentry(inode);
	if (!w.dentry)
		return;
	send_path(id, inode, -1, tgid, IOT_FILE_FS_ROOT, dir_ino, &w);
}

/* Sends the path of `file` to user space the first time this (s_dev, inode, generation) is
 * seen, unless its folder's path was sent already (folder_known); false when a record was due
 * and could not be sent. The names
 * from the file up to the task's root (so paths are as seen inside a container's mount
 * namespace or chroot), crossing mount points. */
static __always_inline bool file_first_sight(struct file *file, const struct file_id *id, int fd,
					     __u64 dir_ino, __u32 tgid)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct path_walk w = {};

	/* the folder first: a data set's thousand folders stay in the cache, its files do not */
	if (folder_known(id->dev, dir_ino, BPF_CORE_READ(file, f_inode), BPF_CORE_READ(file, f_mode)) ||
	    bpf_map_lookup_elem(&files_seen, id))
		return true;
	w.dentry = BPF_CORE_READ(file, f_path.dentry);
	w.vfsmnt = BPF_CORE_READ(file, f_path.mnt);
	w.mnt = (void *)w.vfsmnt - bpf_core_field_offset(struct mount, mnt);
	w.root_dentry = BPF_CORE_READ(task, fs, root.dentry);
	w.root_mnt = BPF_CORE_READ(task, fs, root.mnt);
	return send_path(id, BPF_CORE_READ(file, f_inode), fd, tgid, 0, dir_ino, &w);
}

#endif /* FILES_BPF_H */
