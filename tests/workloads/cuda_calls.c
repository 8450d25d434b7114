// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * Calls a CUDA driver library (tests/workloads/fake_libcuda.c's stand-in) on a known schedule
 * and prints what it measured of each call with its own clock, for tests/test_kernel_cuda.py
 * and scripts/bench_uprobes.py to compare with what the uprobes counted.
 *
 *   cuda_calls LIB STEP...
 *
 * Steps, in order:
 *   open                       dlopen(LIB) (the calls need it; "open" may come late)
 *   wait                       print "waiting", then read a line from stdin
 *   CALL:N:BYTES:US[:T[:spin]] N calls of CALL (stream_sync, ctx_sync, event_sync, dtoh, htod,
 *                              dtod, dtoh_async, htod_async, launch), copies of BYTES, each
 *                              waiting US microseconds (sleeping, or spinning), on each of T
 *                              threads (default 1: this one)
 *   fork/CALL:...              the same in a forked child, waited for
 * Each thread of a step prints "CALL tid=TID n=N ns=NS bytes=BYTES", NS the sum over its calls
 * of the time from just before each call to just after it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef unsigned long long u64;

static void *lib;

struct step {
	char call[32];
	long n, bytes, us, threads;
	int spin;
};

static u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void *sym(const char *name)
{
	void *f = lib ? dlsym(lib, name) : NULL;

	if (!f) {
		fprintf(stderr, "cuda_calls: no %s (%s)\n", name, lib ? dlerror() : "not open");
		exit(2);
	}
	return f;
}

/* One call of `s`, by its name. */
static void call_once(const struct step *s, char *buf)
{
	const char *c = s->call;

	if (!strcmp(c, "stream_sync"))
		((int (*)(void *))sym("cuStreamSynchronize"))(NULL);
	else if (!strcmp(c, "ctx_sync"))
		((int (*)(void))sym("cuCtxSynchronize"))();
	else if (!strcmp(c, "event_sync"))
		((int (*)(void *))sym("cuEventSynchronize"))(NULL);
	else if (!strcmp(c, "dtoh"))
		((int (*)(void *, u64, size_t))sym("cuMemcpyDtoH_v2"))(buf, 0x1000, s->bytes);
	else if (!strcmp(c, "htod"))
		((int (*)(u64, const void *, size_t))sym("cuMemcpyHtoD_v2"))(0x1000, buf, s->bytes);
	else if (!strcmp(c, "dtod"))
		((int (*)(u64, u64, size_t))sym("cuMemcpyDtoD_v2"))(0x1000, 0x2000, s->bytes);
	else if (!strcmp(c, "dtoh_async"))
		((int (*)(void *, u64, size_t, void *))sym("cuMemcpyDtoHAsync_v2"))(buf, 0x1000,
										   s->bytes, NULL);
	else if (!strcmp(c, "htod_async"))
		((int (*)(u64, const void *, size_t, void *))sym("cuMemcpyHtoDAsync_v2"))(
			0x1000, buf, s->bytes, NULL);
	else if (!strcmp(c, "launch"))
		((int (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			  unsigned, void *, void **, void **))sym("cuLaunchKernel"))(
			NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
	else {
		fprintf(stderr, "cuda_calls: unknown call %s\n", c);
		exit(2);
	}
}

static void *run_step(void *arg)
{
	const struct step *s = arg;
	char buf[64];
	u64 total = 0, t0;

	((void (*)(long, int))sym("fakeCudaSetWait"))(s->us * 1000, s->spin);
	for (long i = 0; i < s->n; i++) {
		t0 = now_ns();
		call_once(s, buf);
		total += now_ns() - t0;
	}
	printf("%s tid=%d n=%ld ns=%llu bytes=%ld\n", s->call, gettid(), s->n, total,
	       s->n * s->bytes);
	fflush(stdout);
	return NULL;
}

static void run_threads(struct step *s)
{
	pthread_t th[64];

	if (s->threads <= 1) {
		run_step(s);
		return;
	}
	if (s->threads > 64)
		s->threads = 64;
	for (long i = 0; i < s->threads; i++)
		pthread_create(&th[i], NULL, run_step, s);
	for (long i = 0; i < s->threads; i++)
		pthread_join(th[i], NULL);
}

static void parse(const char *text, struct step *s)
{
	char spin[8] = "";

	memset(s, 0, sizeof(*s));
	s->threads = 1;
	if (sscanf(text, "%31[^:]:%ld:%ld:%ld:%ld:%7s", s->call, &s->n, &s->bytes, &s->us,
		   &s->threads, spin) < 4) {
		fprintf(stderr, "cuda_calls: bad step %s\n", text);
		exit(2);
	}
	s->spin = !strcmp(spin, "spin");
}

int main(int argc, char **argv)
{
	struct step s;
	char line[64];

	if (argc < 2) {
		fprintf(stderr, "usage: cuda_calls LIB STEP...\n");
		return 2;
	}
	printf("pid %d\n", getpid());
	fflush(stdout);
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "open")) {
			lib = dlopen(argv[1], RTLD_NOW);
			if (!lib) {
				fprintf(stderr, "cuda_calls: %s\n", dlerror());
				return 2;
			}
		} else if (!strcmp(argv[i], "wait")) {
			printf("waiting\n");
			fflush(stdout);
			if (!fgets(line, sizeof(line), stdin))
				return 1;
		} else if (!strncmp(argv[i], "fork/", 5)) {
			parse(argv[i] + 5, &s);
			pid_t child = fork();
			if (child == 0) {
				run_threads(&s);
				_exit(0);
			}
			waitpid(child, NULL, 0);
		} else {
			parse(argv[i], &s);
			run_threads(&s);
		}
	}
	return 0;
}
