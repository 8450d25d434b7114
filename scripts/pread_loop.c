/*
 * pread_loop - a pread benchmark loop for measuring tracer overhead.
 *
 * Build (static, so that the runs compared differ only by tracing):
 *
 *     cc -O2 -static -Wall -Wextra -o scripts/bin/pread_loop scripts/pread_loop.c
 *
 * Usage:
 *     pread_loop FILE SECONDS [--direct | --other | --faults]
 *
 * Does 4 KiB pread64() calls for SECONDS seconds (a decimal number > 0):
 *   - default: buffered reads cycling over the 4 KiB pages of the first 1 MiB
 *     of FILE (page-cache hits after the first pass);
 *   - --direct: O_DIRECT reads at random 4 KiB-aligned offsets across FILE,
 *     into a 4096-aligned buffer;
 *   - --other: no I/O at all, getppid() calls instead: what a syscall that is not traced
 *     pays while a tracer is attached (FILE is opened all the same);
 *   - --faults: no syscall per op either, a write to a fresh anonymous page: a page fault
 *     from user space each (the pages of a 16 MiB mapping, given back with
 *     madvise(MADV_DONTNEED) after each pass): what a fault pays while a tracer is attached.
 * Then prints one line on stdout:
 *     ops=<count> seconds=<elapsed> ns_per_op=<elapsed ns / count> p10_ns_per_op=<...>
 *
 * The clock (CLOCK_MONOTONIC) is read only every 4096 operations in page-cache
 * mode, and every 64 in --direct mode (where one read costs tens of
 * microseconds, so 4096 of them could overshoot SECONDS by whole seconds);
 * either way the clock costs far less than 1 % of the loop. Those reads cut the
 * run into batches: p10_ns_per_op is the 10th percentile of the batches' ns/op.
 * A batch the loop was preempted or interrupted in is slower, never faster, so
 * on a loaded machine the fast batches say what a call costs better than the
 * whole run's mean does.
 * Exit status: 0 success, 1 I/O error, 2 bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096L
#define CACHED_PAGES 256L /* first 1 MiB */

static char buf[PAGE] __attribute__((aligned(4096)));

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* One batch's ns/op, kept for the percentile (batches past the array's end are dropped). */
static double batches[1 << 20];
static size_t nbatches;

static void batch_done(double *since, uint64_t ops_in_batch)
{
	double t = now();

	if (nbatches < sizeof(batches) / sizeof(batches[0]))
		batches[nbatches++] = (t - *since) * 1e9 / (double)ops_in_batch;
	*since = t;
}

static void usage(void)
{
	fprintf(stderr, "usage: pread_loop FILE SECONDS [--direct | --other | --faults]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *path = NULL, *secs_arg = NULL;
	int direct = 0, other = 0, faults = 0, fd;
	char *anon = NULL;
	double seconds, start, end, elapsed, batch_start, p10;
	struct stat st;
	uint64_t ops = 0, pages, rng;
	unsigned long check_mask;
	char *endp;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--direct"))
			direct = 1;
		else if (!strcmp(argv[i], "--other"))
			other = 1;
		else if (!strcmp(argv[i], "--faults"))
			faults = 1;
		else if (!strncmp(argv[i], "--", 2))
			usage(); /* unknown option */
		else if (!path)
			path = argv[i];
		else if (!secs_arg)
			secs_arg = argv[i];
		else
			usage();
	}
	if (!path || !secs_arg || direct + other + faults > 1)
		usage();
	errno = 0;
	seconds = strtod(secs_arg, &endp);
	if (errno || endp == secs_arg || *endp || !isfinite(seconds) || seconds <= 0) {
		fprintf(stderr, "pread_loop: SECONDS must be a number > 0, not '%s'\n", secs_arg);
		return 2;
	}

	fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
	if (fd < 0) {
		fprintf(stderr, "pread_loop: open %s%s: %s\n", path,
			direct ? " with O_DIRECT" : "", strerror(errno));
		return 1;
	}
	if (fstat(fd, &st)) {
		fprintf(stderr, "pread_loop: fstat %s: %s\n", path, strerror(errno));
		return 1;
	}
	/* a block device (O_DIRECT on a loop device, say) has no st_size: its end is its size */
	pages = (uint64_t)(S_ISBLK(st.st_mode) ? lseek(fd, 0, SEEK_END) : st.st_size) / PAGE;
	if (pages == 0) {
		fprintf(stderr, "pread_loop: %s is smaller than 4096 bytes\n", path);
		return 2;
	}
	if (!direct && pages > CACHED_PAGES)
		pages = CACHED_PAGES;
	check_mask = direct ? 64 - 1 : 4096 - 1;
	if (faults) { /* one pass over the mapping is one batch */
		anon = mmap(NULL, (check_mask + 1) * PAGE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (anon == MAP_FAILED) {
			fprintf(stderr, "pread_loop: mmap: %s\n", strerror(errno));
			return 1;
		}
	}
	rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();

	start = now();
	end = start + seconds;
	batch_start = start;
	for (;;) {
		uint64_t page;
		ssize_t n;

		if (direct) {
			/* xorshift64: cheap, good enough to defeat locality. */
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			page = rng % pages;
		} else {
			page = ops % pages;
		}
		if (faults) {
			anon[(ops & check_mask) * PAGE] = 1;
			ops++;
			if ((ops & check_mask) == 0) {
				madvise(anon, (check_mask + 1) * PAGE, MADV_DONTNEED);
				batch_done(&batch_start, check_mask + 1);
				if (batch_start >= end)
					break;
			}
			continue;
		}
		if (other) {
			getppid();
			ops++;
			if ((ops & check_mask) == 0) {
				batch_done(&batch_start, check_mask + 1);
				if (batch_start >= end)
					break;
			}
			continue;
		}
		n = pread(fd, buf, PAGE, (off_t)(page * PAGE));
		if (n != PAGE) {
			fprintf(stderr, "pread_loop: pread at offset %llu returned %zd (%s)\n",
				(unsigned long long)(page * PAGE), n,
				n < 0 ? strerror(errno) : "short read");
			return 1;
		}
		ops++;
		if ((ops & check_mask) == 0) {
			batch_done(&batch_start, check_mask + 1);
			if (batch_start >= end)
				break;
		}
	}
	elapsed = now() - start;
	qsort(batches, nbatches, sizeof(batches[0]), by_value);
	p10 = nbatches ? batches[nbatches / 10] : elapsed * 1e9 / (double)ops;
	printf("ops=%llu seconds=%.6f ns_per_op=%.1f p10_ns_per_op=%.1f\n", (unsigned long long)ops,
	       elapsed, elapsed * 1e9 / (double)ops, p10);
	return 0;
}
