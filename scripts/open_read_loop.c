/*
 * open_read_loop - opens, reads whole and closes each file of a list, round after round: the
 * syscalls an image-folder data set makes per sample, for measuring what tracing them costs.
 *
 * Build:
 *
 *     cc -O2 -static -Wall -Wextra -o scripts/bin/open_read_loop scripts/open_read_loop.c
 *
 * Usage:
 *     open_read_loop LIST ROUNDS [FILES_PER_S]
 *
 * LIST holds one path per line. Each round reads every file of it in turn (open, read in
 * 8 KiB calls up to the end, close) and prints one line on stdout: the nanoseconds spent per
 * file in those calls. With FILES_PER_S the round is paced to that rate (a sleep every 1 000
 * files; the time asleep is not counted), as a job that reads no faster would be, so that a
 * tracer's per-interval tables see that many new files a second.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	char line[4096], buf[8192];
	char **paths = NULL;
	size_t n = 0, cap = 0;
	double rate;
	int rounds;
	FILE *list;

	if (argc < 3 || argc > 4 || (rounds = atoi(argv[2])) <= 0) {
		fprintf(stderr, "usage: open_read_loop LIST ROUNDS [FILES_PER_S]\n");
		return 2;
	}
	rate = argc == 4 ? atof(argv[3]) : 0;
	list = fopen(argv[1], "r");
	if (!list) {
		perror(argv[1]);
		return 2;
	}
	while (fgets(line, sizeof(line), list)) {
		line[strcspn(line, "\n")] = 0;
		if (!*line)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 4096;
			paths = realloc(paths, cap * sizeof(*paths));
			if (!paths) {
				perror("realloc");
				return 1;
			}
		}
		paths[n++] = strdup(line);
	}
	fclose(list);
	if (!n) {
		fprintf(stderr, "open_read_loop: %s lists no file\n", argv[1]);
		return 2;
	}
	for (int r = 0; r < rounds; r++) {
		double start = now_s(), busy = 0;

		for (size_t i = 0; i < n; i++) {
			double t0;
			int fd;

			if (rate > 0 && i % 1000 == 0) {
				double due = start + i / rate, t = now_s();

				if (due > t)
					usleep((useconds_t)((due - t) * 1e6));
			}
			t0 = now_s();
			fd = open(paths[i], O_RDONLY);
			if (fd < 0) {
				perror(paths[i]);
				return 1;
			}
			while (read(fd, buf, sizeof(buf)) > 0)
				;
			close(fd);
			busy += now_s() - t0;
		}
		printf("%.0f\n", busy / n * 1e9);
		fflush(stdout);
	}
	return 0;
}
