/*
 * iowork - a test workload that does an exact, known amount of I/O.
 *
 * Build (must be static, so that no dynamic loader runs and no read() syscalls
 * happen after exec):
 *
 *     cc -O2 -static -Wall -Wextra -o tests/workloads/bin/iowork tests/workloads/iowork.c
 *
 * Usage:
 *     iowork FILE [--direct N] [--cached M] [--child-direct K] [--wait-signal]
 *                 [--ready-fd FD] [--write-pipe P] [--socket S] [--also-open OTHER]
 *
 * FILE must exist and be at least 64 MiB. Counts default to 0. What happens,
 * in order, and nothing else (no stdio reads, no other file I/O):
 *
 *   1. --wait-signal: SIGUSR1 is blocked.
 *   2. --ready-fd FD: one write() of the byte 'r' to FD, then close(FD).
 *   3. --wait-signal: sigwaitinfo() until SIGUSR1 arrives (no polling).
 *   4. --also-open OTHER: OTHER is opened O_RDONLY and closed, nothing read.
 *      FILE is opened twice: O_RDONLY|O_DIRECT and O_RDONLY (plus one fstat()).
 *   5. --direct N: N pread64() of 4096 bytes on the O_DIRECT fd into a
 *      4096-aligned buffer. Offsets are 4 KiB pages 256 + 1 + 3*k (k = 0..N-1):
 *      beyond the first 1 MiB (kept for cached reads), never repeated, never
 *      adjacent (two pages apart), so the block layer cannot merge requests.
 *   6. --cached M: M pread64() of 4096 bytes on the buffered fd, at page
 *      (i mod 256), i.e. all within the first 1 MiB of FILE.
 *   7. --write-pipe P: pipe(); P times: write() 100 bytes, read() 100 bytes.
 *   8. --socket S: socketpair(AF_UNIX, SOCK_STREAM); S times: write() 100 bytes
 *      into one end, read() 100 bytes from the other.
 *   9. --child-direct K (only if the option is given, even with K = 0): fork()
 *      one child that does K O_DIRECT 4 KiB pread64() at the slots following
 *      the parent's (k = N..N+K-1, same layout), then _exit(0); the parent
 *      waitpid()s it. All of the parent's own I/O is done before the fork.
 *
 * Every pread64 must return exactly 4096 bytes and every pipe/socket transfer
 * exactly 100 bytes, otherwise the program prints a message on stderr and
 * exits 1. Bad usage exits 2. Success exits 0 and prints nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096L
#define CACHED_PAGES 256L          /* first 1 MiB */
#define DIRECT_FIRST_PAGE (CACHED_PAGES + 1)
#define DIRECT_STRIDE 3L
#define MIN_FILE_SIZE (64L << 20)
#define XFER 100

static char buf[PAGE] __attribute__((aligned(4096)));

static void die(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("iowork: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	_exit(code);
}

static void usage(void)
{
	die(2, "usage: iowork FILE [--direct N] [--cached M] [--child-direct K] "
	       "[--wait-signal] [--ready-fd FD] [--write-pipe P] [--socket S] "
	       "[--also-open OTHER]");
}

static long parse_count(const char *opt, const char *s)
{
	char *end;
	long v;

	if (!s)
		die(2, "%s needs a value", opt);
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > INT_MAX)
		die(2, "%s: '%s' is not a non-negative integer", opt, s);
	return v;
}

/* Byte offset of direct-read slot k. */
static off_t direct_offset(long k)
{
	return (off_t)(DIRECT_FIRST_PAGE + DIRECT_STRIDE * k) * PAGE;
}

static int direct_reads(int fd, long first_slot, long count)
{
	for (long k = first_slot; k < first_slot + count; k++) {
		off_t off = direct_offset(k);
		ssize_t n = pread(fd, buf, PAGE, off);

		if (n != PAGE) {
			fprintf(stderr, "iowork: O_DIRECT pread at offset %lld returned %zd (%s)\n",
				(long long)off, n, n < 0 ? strerror(errno) : "short read");
			return -1;
		}
	}
	return 0;
}

static void transfer(int wfd, int rfd, long count, const char *what)
{
	static char out[XFER], in[XFER];

	memset(out, 'x', sizeof(out));
	for (long i = 0; i < count; i++) {
		ssize_t n = write(wfd, out, XFER);

		if (n != XFER)
			die(1, "%s write returned %zd (%s)", what, n,
			    n < 0 ? strerror(errno) : "short write");
		n = read(rfd, in, XFER);
		if (n != XFER)
			die(1, "%s read returned %zd (%s)", what, n,
			    n < 0 ? strerror(errno) : "short read");
	}
}

int main(int argc, char **argv)
{
	const char *path = NULL, *other = NULL;
	long n_direct = 0, n_cached = 0, n_child = 0, n_pipe = 0, n_sock = 0;
	long ready_fd = -1;
	int want_child = 0, wait_signal = 0;
	sigset_t set;
	struct stat st;
	int dfd, cfd;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--direct"))
			n_direct = parse_count(a, argv[++i]);
		else if (!strcmp(a, "--cached"))
			n_cached = parse_count(a, argv[++i]);
		else if (!strcmp(a, "--child-direct")) {
			n_child = parse_count(a, argv[++i]);
			want_child = 1;
		} else if (!strcmp(a, "--wait-signal"))
			wait_signal = 1;
		else if (!strcmp(a, "--ready-fd"))
			ready_fd = parse_count(a, argv[++i]);
		else if (!strcmp(a, "--write-pipe"))
			n_pipe = parse_count(a, argv[++i]);
		else if (!strcmp(a, "--socket"))
			n_sock = parse_count(a, argv[++i]);
		else if (!strcmp(a, "--also-open")) {
			other = argv[++i];
			if (!other)
				die(2, "--also-open needs a file");
		}
		else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			usage();
		else if (a[0] == '-' && a[1])
			die(2, "unknown option '%s'", a);
		else if (!path)
			path = a;
		else
			usage();
	}
	if (!path)
		usage();

	if (wait_signal) {
		sigemptyset(&set);
		sigaddset(&set, SIGUSR1);
		if (sigprocmask(SIG_BLOCK, &set, NULL))
			die(1, "sigprocmask: %s", strerror(errno));
	}
	if (ready_fd >= 0) {
		if (write((int)ready_fd, "r", 1) != 1)
			die(1, "write to --ready-fd %ld: %s", ready_fd, strerror(errno));
		close((int)ready_fd);
	}
	if (wait_signal) {
		while (sigwaitinfo(&set, NULL) < 0) {
			if (errno != EINTR)
				die(1, "sigwaitinfo: %s", strerror(errno));
		}
	}

	if (other) {
		int ofd = open(other, O_RDONLY);

		if (ofd < 0)
			die(1, "open %s: %s", other, strerror(errno));
		close(ofd);
	}
	dfd = open(path, O_RDONLY | O_DIRECT);
	if (dfd < 0)
		die(1, "open %s with O_DIRECT: %s", path, strerror(errno));
	cfd = open(path, O_RDONLY);
	if (cfd < 0)
		die(1, "open %s: %s", path, strerror(errno));
	if (fstat(cfd, &st))
		die(1, "fstat %s: %s", path, strerror(errno));
	if (st.st_size < MIN_FILE_SIZE)
		die(2, "%s is %lld bytes; it must be at least 64 MiB", path,
		    (long long)st.st_size);
	/* Every direct slot, parent's and child's, must lie inside the file. */
	if (n_direct + n_child > 0 &&
	    direct_offset(n_direct + n_child - 1) + PAGE > st.st_size)
		die(2, "--direct %ld plus --child-direct %ld need %lld bytes of %s, "
		       "which has %lld", n_direct, n_child,
		    (long long)(direct_offset(n_direct + n_child - 1) + PAGE), path,
		    (long long)st.st_size);

	if (direct_reads(dfd, 0, n_direct))
		return 1;

	for (long i = 0; i < n_cached; i++) {
		off_t off = (off_t)(i % CACHED_PAGES) * PAGE;
		ssize_t n = pread(cfd, buf, PAGE, off);

		if (n != PAGE)
			die(1, "cached pread at offset %lld returned %zd (%s)", (long long)off,
			    n, n < 0 ? strerror(errno) : "short read");
	}

	if (n_pipe > 0) {
		int p[2];

		if (pipe(p))
			die(1, "pipe: %s", strerror(errno));
		transfer(p[1], p[0], n_pipe, "pipe");
		close(p[0]);
		close(p[1]);
	}

	if (n_sock > 0) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			die(1, "socketpair: %s", strerror(errno));
		transfer(sv[0], sv[1], n_sock, "socket");
		close(sv[0]);
		close(sv[1]);
	}

	if (want_child) {
		int status;
		pid_t pid = fork();

		if (pid < 0)
			die(1, "fork: %s", strerror(errno));
		if (pid == 0)
			_exit(direct_reads(dfd, n_direct, n_child) ? 1 : 0);
		while (waitpid(pid, &status, 0) < 0) {
			if (errno != EINTR)
				die(1, "waitpid: %s", strerror(errno));
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			die(1, "child %d failed (status 0x%x)", (int)pid, status);
	}

	close(dfd);
	close(cfd);
	return 0;
}
