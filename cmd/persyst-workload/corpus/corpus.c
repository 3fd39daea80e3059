/*
 * persyst-corpus: the workload corpus's programs, in C like the codes persyst watches
 * (a Go program's runtime threads wake and switch on their own, which would blur the
 * scheduling behaviour a workload is meant to show). Each runs one behaviour for a
 * number of seconds (or bytes) and writes nothing but what it is asked to.
 *
 *   spin     SECONDS THREADS       THREADS busy threads for SECONDS of wall time
 *   mutex    SECONDS THREADS       THREADS threads take turns on one pthread mutex
 *   read     FILE BYTES SIZE [SECONDS]
 *                                  read FILE in SIZE-byte read(2) calls until BYTES were read
 *                                  (from its start again at its end); with SECONDS, go on
 *                                  until SECONDS of wall time passed too
 *   write    FILE BYTES SIZE [SECONDS]
 *                                  write BYTES to FILE in SIZE-byte write(2) calls; with
 *                                  SECONDS, go on until SECONDS of wall time passed too,
 *                                  from the file's start again after every BYTES (a run
 *                                  long enough to be judged on any machine, a bounded file)
 *   open     SECONDS FILE [legacy] open(2)/close(2) FILE (openat(2); open(2) with legacy)
 *   stat     SECONDS               stat(2) in a loop: time in the kernel, no I/O
 *   forkexec SECONDS PROG          fork and exec PROG, wait, again
 *   mapread  SECONDS FILE MIB      read the pages of a mapped MIB MiB file in random order,
 *                                  dropping them from the page cache after each pass
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int die(const char *what)
{
	fprintf(stderr, "persyst-corpus: %s: %s\n", what, strerror(errno));
	return 1;
}

static double until;
static volatile uint64_t sink;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t shared;

static void *spinner(void *arg)
{
	uint64_t x = (uintptr_t)arg;
	while (now() < until)
		for (int k = 0; k < 100000; k++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	sink += x;
	return NULL;
}

static void *locker(void *arg)
{
	(void)arg;
	while (now() < until) {
		pthread_mutex_lock(&mu);
		for (int k = 0; k < 50; k++)
			shared = shared * 6364136223846793005ULL + 1;
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

static int threads(void *(*fn)(void *), double seconds, int n)
{
	pthread_t t[1024];
	if (n < 1 || n > 1024)
		n = 1;
	until = now() + seconds;
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, fn, (void *)(uintptr_t)(i + 1)))
			return die("pthread_create");
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}

static int rw(int writing, const char *file, long long total, long size, double seconds)
{
	double end = now() + seconds;
	char *buf = calloc(1, size);
	int fd;
	if (!buf)
		return die("calloc");
	if (!writing && access(file, R_OK) != 0) {
		int w = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		char block[65536] = {1};
		if (w < 0)
			return die(file);
		for (int i = 0; i < 16; i++)
			if (write(w, block, sizeof block) < 0)
				return die(file);
		close(w);
	}
	fd = writing ? open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644) : open(file, O_RDONLY);
	if (fd < 0)
		return die(file);
	for (long long done = 0, here = 0; done < total || now() < end;) {
		if (writing && here >= total) {
			lseek(fd, 0, SEEK_SET);
			here = 0;
		}
		ssize_t n = writing ? write(fd, buf, size) : read(fd, buf, size);
		if (n < 0)
			return die(file);
		if (n == 0) {
			lseek(fd, 0, SEEK_SET);
			continue;
		}
		done += n;
		here += n;
	}
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: persyst-corpus spin|mutex|read|write|syncwrite|open|stat|forkexec|mapread ARGS...\n");
		return 2;
	}
	const char *w = argv[1];
	if (!strcmp(w, "spin") && argc == 4)
		return threads(spinner, atof(argv[2]), atoi(argv[3]));
	if (!strcmp(w, "mutex") && argc == 4)
		return threads(locker, atof(argv[2]), atoi(argv[3]));
	if ((!strcmp(w, "read") || !strcmp(w, "write")) && (argc == 5 || argc == 6))
		return rw(w[0] == 'w', argv[2], atoll(argv[3]), atol(argv[4]), argc == 6 ? atof(argv[5]) : 0);
	if (!strcmp(w, "open") && (argc == 4 || argc == 5)) {
		int legacy = argc == 5 && !strcmp(argv[4], "legacy");
		int fd = open(argv[3], O_WRONLY | O_CREAT, 0644);
		if (fd < 0)
			return die(argv[3]);
		close(fd);
		for (double end = now() + atof(argv[2]); now() < end;)
			for (int i = 0; i < 1000; i++) {
#ifdef SYS_open
				fd = legacy ? syscall(SYS_open, argv[3], O_RDONLY) : open(argv[3], O_RDONLY);
#else
				fd = open(argv[3], O_RDONLY);
#endif
				if (fd < 0)
					return die(argv[3]);
				close(fd);
			}
		return 0;
	}
	if (!strcmp(w, "syncwrite") && argc == 4) {
		/* 4 KiB written and flushed to storage (fdatasync) at a time, like a log that
		 * syncs every record. */
		char block[4096] = {1};
		int fd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			return die(argv[3]);
		for (double end = now() + atof(argv[2]); now() < end;)
			if (write(fd, block, sizeof block) != sizeof block || fdatasync(fd) != 0)
				return die(argv[3]);
		close(fd);
		return 0;
	}
	if (!strcmp(w, "stat") && argc == 3) {
		struct stat st;
		for (double end = now() + atof(argv[2]); now() < end;)
			for (int i = 0; i < 1000; i++)
				stat("/proc/self/status", &st);
		return 0;
	}
	if (!strcmp(w, "forkexec") && argc == 4) {
		for (double end = now() + atof(argv[2]); now() < end;) {
			pid_t p = fork();
			if (p < 0)
				return die("fork");
			if (p == 0) {
				execl(argv[3], argv[3], (char *)NULL);
				_exit(127);
			}
			waitpid(p, NULL, 0);
		}
		return 0;
	}
	if (!strcmp(w, "mapread") && argc == 5) {
		long page = sysconf(_SC_PAGESIZE);
		size_t size = (size_t)atol(argv[4]) << 20, pages = size / page;
		struct stat st;
		if (stat(argv[3], &st) != 0 || (size_t)st.st_size != size)
			if (rw(1, argv[3], size, 1 << 20, 0))
				return 1;
		int fd = open(argv[3], O_RDONLY);
		if (fd < 0)
			return die(argv[3]);
		size_t *order = malloc(pages * sizeof *order);
		uint64_t x = 1;
		for (size_t i = 0; i < pages; i++)
			order[i] = i;
		for (size_t i = pages - 1; i > 0; i--) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			size_t j = (x >> 33) % (i + 1), t = order[i];
			order[i] = order[j], order[j] = t;
		}
		double end = now() + atof(argv[2]);
		while (now() < end) {
			posix_fadvise(fd, 0, size, POSIX_FADV_DONTNEED);
			unsigned char *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
			if (m == MAP_FAILED)
				return die("mmap");
			madvise(m, size, MADV_RANDOM);
			for (size_t i = 0; i < pages && (i % 256 || now() < end); i++)
				sink += m[order[i] * page];
			munmap(m, size);
		}
		return 0;
	}
	fprintf(stderr, "persyst-corpus: bad arguments for %s\n", w);
	return 2;
}
