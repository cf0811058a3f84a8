/*
 * bench/copy_floor.c: what moving a 64 KiB message's bytes from one process of this
 * host to another costs, per way of copying, so that the same-host carrier's choice
 * (docs/benchmarks.md, "One copy per side") can be checked on any machine:
 *
 *   gcc -O2 -o /tmp/copy_floor bench/copy_floor.c && /tmp/copy_floor [MESSAGES]
 *
 * A forked child holds the source bytes (and sleeps); the parent copies them into its
 * own memory MESSAGES times (default 20000) and prints GB/s for:
 *   memcpy        a copy inside one process (what each side of the rings does: the
 *                 sender into the ring, the receiver from the ring into its region);
 *   cma-4k        process_vm_readv, one 4 KiB call per packet (a receiver that places
 *                 each packet straight from the sender's memory, as the engine places
 *                 one packet at a time);
 *   cma-64k-16iov process_vm_readv, one call per message with 16 4 KiB pieces (one
 *                 system call for a whole message's packets);
 *   cma-64k       process_vm_readv, one call of one 64 KiB piece.
 * Each in a 64 KiB buffer (hot in the caches) and across an 8 MiB window (each
 * message at the next offset: the caches miss as a stream's would). A way the system
 * refuses (a seccomp filter, a ptrace rule) prints "unavailable" and its error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MSG 65536
#define PKT 4096
#define WINDOW (8 << 20)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

enum way { MEMCPY, CMA_4K, CMA_16IOV, CMA_64K, WAYS };
static const char *names[WAYS] = { "memcpy", "cma-4k", "cma-64k-16iov", "cma-64k" };

static int copy(enum way w, pid_t child, char *dst, char *src)
{
	struct iovec l[MSG / PKT], r[MSG / PKT];
	switch (w) {
	case MEMCPY:
		memcpy(dst, src, MSG);
		__asm__ volatile("" : : "r"(dst) : "memory");
		return 0;
	case CMA_4K:
		for (int k = 0; k < MSG / PKT; k++) {
			l[0] = (struct iovec){ dst + k * PKT, PKT };
			r[0] = (struct iovec){ src + k * PKT, PKT };
			if (process_vm_readv(child, l, 1, r, 1, 0) != PKT)
				return -1;
		}
		return 0;
	case CMA_16IOV:
		for (int k = 0; k < MSG / PKT; k++) {
			l[k] = (struct iovec){ dst + k * PKT, PKT };
			r[k] = (struct iovec){ src + k * PKT, PKT };
		}
		return process_vm_readv(child, l, MSG / PKT, r, MSG / PKT, 0) == MSG ? 0 : -1;
	case CMA_64K:
		l[0] = (struct iovec){ dst, MSG };
		r[0] = (struct iovec){ src, MSG };
		return process_vm_readv(child, l, 1, r, 1, 0) == MSG ? 0 : -1;
	default:
		return -1;
	}
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	char *src = aligned_alloc(4096, WINDOW), *dst = aligned_alloc(4096, WINDOW);
	if (!src || !dst || n <= 0)
		return 2;
	memset(src, 1, WINDOW);
	memset(dst, 2, WINDOW);
	pid_t child = fork();
	if (child == 0) {
		pause();
		return 0;
	}
	for (int span = 0; span < 2; span++) {
		size_t window = span ? WINDOW : MSG;
		for (enum way w = 0; w < WAYS; w++) {
			size_t off = 0;
			int failed = 0;
			double t = now();
			for (long i = 0; i < n && !failed; i++) {
				failed = copy(w, child, dst + off, src + off);
				off = (off + MSG) % window;
			}
			double s = now() - t;
			if (failed) /* (a seccomp filter or ptrace rule may refuse it) */
				printf("%-14s %-6s unavailable (%s)\n", names[w],
				       span ? "8MiB" : "64KiB", strerror(errno));
			else
				printf("%-14s %-6s %6.2f GB/s\n", names[w], span ? "8MiB" : "64KiB",
				       (double)n * MSG / s / 1e9);
		}
	}
	kill(child, SIGKILL);
	return 0;
}
