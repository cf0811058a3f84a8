/*
 * bench/kernel_floor.c: what the kernel alone costs an 8-byte ping-pong over
 * loopback, for the socket calls the soft device makes and for the TCP baseline of
 * bench/compare.sh. No RDMA software runs here: the difference between a mode and
 * rverbs in the same run is what rverbs' own code adds to a hop.
 *
 *   kernel_floor MODE PORT [ITERS [POLICY]]   (built and run by bench/kernel_floor.sh)
 *
 * Two processes (fork). POLICY `spin` (the default): each busy-polls its socket with
 * MSG_DONTWAIT, as the spin policy of `rverbs perf ... --spin-us N` does; `sleep`:
 * each blocks in the receive call, as `--spin-us 0` (the default of `rverbs perf`)
 * sleeps in recvmsg. Prints "MODE p50_us" (half the round trip, median of ITERS round
 * trips after ITERS/10 of warm-up).
 *
 * MODE:
 *   tcp       TCP_NODELAY stream, send/recv of 8 bytes (`rverbs perf tcp lat -s 8`).
 *   udp       connected UDP sockets, send/recv of 24 bytes (a RoCE v2 SEND of 8 bytes:
 *             BTH 12 + payload 8 + ICRC 4): the cheapest UDP path.
 *   roce      the device's calls for that datagram: a socket bound to one address,
 *             unconnected (sendto names the peer), IP_PMTUDISC_DO, UDP_GRO on, and
 *             recvmsg with the source address and a control buffer.
 *   roce-ack  as roce, each message carrying the ACK of the previous one (20 bytes:
 *             BTH 12 + AETH 4 + ICRC 4) as a second UDP_SEGMENT segment of one
 *             sendmsg: what every hop of an RC SEND ping-pong with every SEND signaled
 *             was on the device before it sent through connected sockets.
 *   conn      as roce, but sent through a second socket connected to the peer (an
 *             ephemeral port; send without an address, the route kept): the device's
 *             calls now (crates/rverbs/src/conn_tx.rs). Received as in roce.
 *   conn-ack  as conn, with the ACK segment of roce-ack: every hop of the device's RC
 *             SEND ping-pong with every SEND signaled.
 *   conn-ack-mt  as conn-ack, from processes that have a second (idle) thread, as an
 *             rverbs process has (the device's driver thread): the kernel then takes a
 *             reference on the socket's file for every call (fdget: only a process
 *             whose file table no other thread shares skips it).
 *   shm       no network stack: the same 44 bytes (message and ACK) through memory
 *             both processes map, a sequence word per direction; the spin policy
 *             polls the word, the sleep policy waits on it in futex(2) and the sender
 *             wakes a waiting receiver. The floor of a same-host transport that would
 *             bypass the kernel's UDP path between two processes on one machine (not
 *             what the device does: it sends real RoCE v2 datagrams over loopback).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* CONN and every mode after it send through a connected socket (tx_sock). */
enum mode { TCP, UDP, ROCE, ROCE_ACK, CONN, CONN_ACK, CONN_ACK_MT, SHM, N_MODES };
/* The command-line names, by mode. */
static const char *const mode_names[N_MODES] = {
	"tcp", "udp", "roce", "roce-ack", "conn", "conn-ack", "conn-ack-mt", "shm",
};

/* A side that hears nothing for this long gives up (the other one has died). */
#define STALL_S 30

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* 127.0.0.200 + side: addresses of their own, away from the device's 127.0.0.x:4791. */
static struct sockaddr_in addr_of(int side, int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(0x7f0000c8 + side);
	return a;
}

static int tcp_socket(int me, int port)
{
	int one = 1, s;
	struct sockaddr_in srv = addr_of(0, port);
	if (me == 0) {
		struct timeval stall = { STALL_S, 0 };
		int l = socket(AF_INET, SOCK_STREAM, 0);
		if (l < 0)
			die("socket");
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		/* accept gives up (EAGAIN) if the connecting side died. */
		setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &stall, sizeof stall);
		if (bind(l, (void *)&srv, sizeof srv) || listen(l, 1))
			die("bind/listen");
		s = accept(l, NULL, NULL);
		if (s < 0)
			die("accept");
		close(l);
	} else {
		s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0)
			die("socket");
		for (int i = 0; connect(s, (void *)&srv, sizeof srv); i++) {
			if (i > 200)
				die("connect");
			usleep(10000);
		}
	}
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return s;
}

/* conn, conn-ack: the socket that sends, connected to the peer's receiving socket. */
static int tx_sock = -1;

/* shm: one channel per direction, each on its own cache line. */
struct chan {
	_Alignas(64) uint32_t seq; /* messages written so far */
	uint32_t waiting; /* the receiver is (about to be) asleep in futex */
	char msg[44];
};
static struct chan *chans; /* [0]: client -> echoing side, [1]: back */

static long futex(uint32_t *w, int op, uint32_t v, const struct timespec *t)
{
	return syscall(SYS_futex, w, op, v, t, NULL, 0);
}

/* POLICY sleep: the receive calls block (bounded by SO_RCVTIMEO, see stall_bound). */
static int sleeping;

/* A blocking receive gives up after STALL_S (EAGAIN), as the spin loop does. */
static void stall_bound(int s)
{
	struct timeval stall = { STALL_S, 0 };
	if (sleeping && setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &stall, sizeof stall))
		die("SO_RCVTIMEO");
}

static int udp_socket(enum mode m, int me, int port)
{
	int one = 1, pmtu = IP_PMTUDISC_DO;
	struct sockaddr_in mine = addr_of(me, port), peer = addr_of(!me, port);
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	if (s < 0)
		die("socket");
	if (bind(s, (void *)&mine, sizeof mine))
		die("bind");
	setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
	if (m == UDP) {
		if (connect(s, (void *)&peer, sizeof peer))
			die("connect");
	} else if (setsockopt(s, SOL_UDP, UDP_GRO, &one, sizeof one)) {
		die("UDP_GRO");
	}
	if (m >= CONN) { /* (see enum mode) */
		struct sockaddr_in any = mine;
		any.sin_port = 0;
		tx_sock = socket(AF_INET, SOCK_DGRAM, 0);
		if (tx_sock < 0)
			die("socket");
		setsockopt(tx_sock, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
		if (bind(tx_sock, (void *)&any, sizeof any) ||
		    connect(tx_sock, (void *)&peer, sizeof peer))
			die("bind/connect (tx)");
	}
	return s;
}

/* conn-ack-mt: a thread that only exists (blocked for good), as a driver thread. */
static void *idle_thread(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static void send_one(enum mode m, int s, const struct sockaddr_in *peer)
{
	static char msg[64];
	ssize_t r;
	if (m == SHM) {
		struct chan *c = &chans[!s]; /* (`s`: the channel this side receives on) */
		memcpy(c->msg, msg, sizeof c->msg);
		/* The store and the load of `waiting` pair with the receiver's (seq_cst):
		 * either it sees the new sequence or we see it waiting. */
		__atomic_add_fetch(&c->seq, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&c->waiting, __ATOMIC_SEQ_CST))
			futex(&c->seq, FUTEX_WAKE, 1, NULL);
		return;
	}
	if (m == TCP) {
		r = send(s, msg, 8, 0);
	} else if (m == UDP) {
		r = send(s, msg, 24, 0);
	} else if (m == ROCE) {
		r = sendto(s, msg, 24, 0, (const void *)peer, sizeof *peer);
	} else if (m == CONN) {
		r = send(tx_sock, msg, 24, 0);
	} else {
		/* The message and the ACK behind it: 24 + 20 bytes, segments of 24. */
		struct iovec io = { msg, 44 };
		union {
			char buf[CMSG_SPACE(sizeof(uint16_t))];
			struct cmsghdr align;
		} c;
		struct msghdr h;
		memset(&h, 0, sizeof h);
		memset(&c, 0, sizeof c);
		if (m == ROCE_ACK) {
			h.msg_name = (void *)peer;
			h.msg_namelen = sizeof *peer;
		}
		h.msg_iov = &io;
		h.msg_iovlen = 1;
		h.msg_control = c.buf;
		h.msg_controllen = sizeof c.buf;
		struct cmsghdr *cm = CMSG_FIRSTHDR(&h);
		cm->cmsg_level = SOL_UDP;
		cm->cmsg_type = UDP_SEGMENT;
		cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
		uint16_t seg = 24;
		memcpy(CMSG_DATA(cm), &seg, sizeof seg);
		r = sendmsg(m == ROCE_ACK ? s : tx_sock, &h, 0);
	}
	if (r < 0)
		die("send");
}

static void recv_one(enum mode m, int s)
{
	static char buf[2048], ctl[256];
	double since = 0;
	int flags = sleeping ? 0 : MSG_DONTWAIT;
	if (m == SHM) {
		static uint32_t seen[2];
		struct chan *c = &chans[s];
		for (unsigned long spins = 1;; spins++) {
			uint32_t now = __atomic_load_n(&c->seq, __ATOMIC_SEQ_CST);
			if (now != seen[s]) {
				memcpy(buf, c->msg, sizeof c->msg);
				seen[s] = now;
				return;
			}
			if (sleeping) {
				struct timespec stall = { STALL_S, 0 };
				__atomic_store_n(&c->waiting, 1, __ATOMIC_SEQ_CST);
				if (__atomic_load_n(&c->seq, __ATOMIC_SEQ_CST) == seen[s] &&
				    futex(&c->seq, FUTEX_WAIT, seen[s], &stall) && errno == ETIMEDOUT) {
					fprintf(stderr, "no message for %d s: the other side is gone\n", STALL_S);
					exit(1);
				}
				__atomic_store_n(&c->waiting, 0, __ATOMIC_SEQ_CST);
			} else if (spins % 65536 == 0) {
				if (since == 0) {
					since = now_ns();
				} else if (now_ns() - since > STALL_S * 1e9) {
					fprintf(stderr, "no message for %d s: the other side is gone\n", STALL_S);
					exit(1);
				}
			}
		}
	}
	for (unsigned long spins = 1;; spins++) {
		ssize_t r;
		if (m == TCP || m == UDP) {
			r = recv(s, buf, m == TCP ? 8 : sizeof buf, flags);
		} else {
			struct sockaddr_in from;
			struct iovec io = { buf, sizeof buf };
			struct msghdr h;
			memset(&h, 0, sizeof h);
			h.msg_name = &from;
			h.msg_namelen = sizeof from;
			h.msg_iov = &io;
			h.msg_iovlen = 1;
			h.msg_control = ctl;
			h.msg_controllen = sizeof ctl;
			r = recvmsg(s, &h, flags);
		}
		if (r > 0)
			return;
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			die("recv");
		if (sleeping && errno == EAGAIN) {
			fprintf(stderr, "no message for %d s: the other side is gone\n", STALL_S);
			exit(1);
		}
		/* Now and then, whether the peer has gone quiet for good (a UDP peer that
		 * died leaves no error on an unconnected socket). */
		if (spins % 65536 == 0) {
			if (since == 0) {
				since = now_ns();
			} else if (now_ns() - since > STALL_S * 1e9) {
				fprintf(stderr, "no message for %d s: the other side is gone\n", STALL_S);
				exit(1);
			}
		}
	}
}

int main(int argc, char **argv)
{
	int m = -1;
	for (int k = 0; argc >= 3 && k < N_MODES; k++)
		if (!strcmp(argv[1], mode_names[k]))
			m = k;
	if (m < 0) {
		fprintf(stderr, "usage: %s MODE PORT [ITERS [spin|sleep]]; MODE:", argv[0]);
		for (int k = 0; k < N_MODES; k++)
			fprintf(stderr, " %s", mode_names[k]);
		fprintf(stderr, "\n");
		return 2;
	}
	int port = atoi(argv[2]);
	long iters = argc > 3 ? atol(argv[3]) : 200000;
	if (port <= 0 || port > 65535 || iters <= 0) {
		fprintf(stderr, "bad PORT or ITERS\n");
		return 2;
	}
	if (argc > 4 && strcmp(argv[4], "spin") && strcmp(argv[4], "sleep")) {
		fprintf(stderr, "POLICY is spin or sleep\n");
		return 2;
	}
	sleeping = argc > 4 && !strcmp(argv[4], "sleep");
	int ready[2];
	if (pipe(ready))
		die("pipe");
	if (m == SHM) {
		chans = mmap(NULL, 2 * sizeof *chans, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (chans == MAP_FAILED)
			die("mmap");
	}
	pid_t parent = getpid(), child = fork();
	if (child < 0)
		die("fork");
	int me = child == 0; /* 0: the client, which measures; 1: the echoing side */
	if (me) {
		/* The echoing side never outlives the measuring one. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			die("prctl / parent gone");
		close(ready[0]);
	} else {
		/* A child that dies before it is ready closes the pipe: EOF, not a hang. */
		close(ready[1]);
	}
	if (m == CONN_ACK_MT) {
		pthread_t t;
		if (pthread_create(&t, NULL, idle_thread, NULL))
			die("pthread_create");
	}
	/* shm: `s` is the channel this side receives on (the other one it sends on). */
	int s = m == SHM ? !me : m == TCP ? tcp_socket(me, port) : udp_socket(m, me, port);
	if (m != SHM)
		stall_bound(s);
	/* The echoing side's socket exists before the first datagram (UDP has no
	 * handshake to wait for). */
	char b = 0;
	if (me ? write(ready[1], &b, 1) != 1 : read(ready[0], &b, 1) != 1) {
		fprintf(stderr, "the echoing side exited before it was ready\n");
		exit(1);
	}
	struct sockaddr_in peer = addr_of(!me, port);
	double *lat = me ? NULL : malloc(iters * sizeof *lat);
	if (!me && !lat)
		die("malloc");
	long warm = iters / 10;
	for (long i = 0; i < warm + iters; i++) {
		double t0 = me ? 0 : now_ns();
		if (me) {
			recv_one(m, s);
			send_one(m, s, &peer);
		} else {
			send_one(m, s, &peer);
			recv_one(m, s);
			if (i >= warm)
				lat[i - warm] = (now_ns() - t0) / 2;
		}
	}
	if (me)
		return 0;
	int st = 0;
	waitpid(child, &st, 0);
	qsort(lat, iters, sizeof *lat, cmp_double);
	printf("%s %.3f\n", argv[1], lat[iters / 2] / 1000);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
