/* SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause */
/* The syscalls iotrace times, by number, and where a raw sys_enter/sys_exit program finds a
 * syscall's number and arguments: syscall.bpf.c and the floors of scripts/bench_floor.bpf.c
 * share them, so that a floor times exactly the calls iotrace does. */
#ifndef SYSCALLS_BPF_H
#define SYSCALLS_BPF_H

#include "iotrace.h"
#include "core_fixes.bpf.h"

/* Syscall numbers of the native ABI (a raw tracepoint sees numbers, not names). */
#if defined(__TARGET_ARCH_x86)
enum {
	NR_read = 0, NR_write = 1, NR_close = 3, NR_pread64 = 17, NR_pwrite64 = 18, NR_readv = 19, NR_writev = 20,
	NR_recvfrom = 45, NR_recvmsg = 47, NR_fsync = 74, NR_fdatasync = 75, NR_openat = 257, NR_preadv = 295, NR_pwritev = 296,
	NR_preadv2 = 327, NR_pwritev2 = 328,
};
#define TS_COMPAT 0x0002 /* thread_info.status: a 32-bit syscall, numbered differently */
#elif defined(__TARGET_ARCH_arm64)
enum {
	NR_openat = 56, NR_close = 57, NR_read = 63, NR_write = 64, NR_readv = 65, NR_writev = 66, NR_pread64 = 67,
	NR_pwrite64 = 68, NR_preadv = 69, NR_pwritev = 70, NR_fsync = 82, NR_fdatasync = 83,
	NR_recvfrom = 207, NR_recvmsg = 212, NR_preadv2 = 286, NR_pwritev2 = 287,
};
#else
#error "syscall numbers: only x86 and arm64 are known"
#endif

#define POSITIONAL 0x80 /* flag on an op: the offset is the 4th argument, not the file position */

/* The op of syscall `nr`, with POSITIONAL where it applies; 0xff for syscalls not traced. */
static __always_inline __u8 op_of_syscall(long nr)
{
	switch (nr) {
	case NR_read: case NR_readv:
	case NR_recvfrom: case NR_recvmsg: /* recv() and friends: the socket reads of HTTP clients */
		return IOT_OP_READ;
	case NR_pread64: case NR_preadv: case NR_preadv2:
		return IOT_OP_READ | POSITIONAL;
	case NR_write: case NR_writev:
		return IOT_OP_WRITE;
	case NR_pwrite64: case NR_pwritev: case NR_pwritev2:
		return IOT_OP_WRITE | POSITIONAL;
	case NR_fsync: case NR_fdatasync:
		return IOT_OP_FSYNC;
	case NR_openat:
		return IOT_OP_OPEN;
	default:
		return 0xff;
	}
}

/* A 32-bit process on a 64-bit kernel numbers its syscalls differently: not traced here
 * (the classic syscall tracepoints skip those calls as well). */
static __always_inline bool compat_syscall(struct task_struct *task)
{
#ifdef TS_COMPAT
	return task->thread_info.status & TS_COMPAT;
#else
	return false;
#endif
}

/* Argument `n` (0-based) of the syscall being entered. `regs` is the task's user registers,
 * cast read-only so fields are plain loads. */
static __always_inline unsigned long syscall_arg(struct pt_regs *regs, int n)
{
#if defined(__TARGET_ARCH_x86)
	switch (n) {
	case 0: return regs->di;
	case 3: return regs->r10;
	default: return 0;
	}
#else
	return n < 6 ? regs->regs[n] : 0;
#endif
}

/* The number of the syscall returning: sys_exit passes its return value, not its number. */
static __always_inline long syscall_nr(struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_x86)
	return regs->orig_ax;
#else
	return regs->syscallno;
#endif
}

static __always_inline struct pt_regs *user_regs(struct bpf_raw_tracepoint_args *ctx)
{
	return kernel_view(ctx->args[0], struct pt_regs);
}

#endif /* SYSCALLS_BPF_H */
