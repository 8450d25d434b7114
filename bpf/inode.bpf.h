/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* A file's identity and its folder, read from the inode and the dentry with plain loads and no
 * map: what the stages (files.bpf.h) and the slot tables' fold (slots.bpf.h) name a file by. */
#ifndef INODE_BPF_H
#define INODE_BPF_H

#include "iotrace.h"
#include "core_fixes.bpf.h"

/* (s_dev, inode number, generation) of `inode`, read with plain loads (any inode pointer, NULL
 * included). */
static __always_inline void inode_id(struct inode *inode, struct file_id *id)
{
	struct inode *i = kernel_view(inode, struct inode);

	id->dev = i->i_sb->s_dev;
	id->gen = i->i_generation;
	id->ino = i->i_ino;
}

/* The inode number of the folder a dentry is in (its parent's), 0 when there is none. */
static __always_inline __u64 dir_ino_of(struct dentry *dentry)
{
	struct dentry *d = kernel_view(dentry, struct dentry);
	struct inode *dir;

	if (!d)
		return 0;
	dir = kernel_view(d->d_parent, struct dentry)->d_inode;
	return dir ? kernel_view(dir, struct inode)->i_ino : 0;
}

#endif /* INODE_BPF_H */
