/*
 * rdma_ops: the guest side of the rverbs interop test of RDMA WRITE, READ (one packet
 * and multi-packet responses), SEND and WRITE with immediate, FETCH_ADD and CMP_SWAP
 * against the kernel's rxe. Written for rverbs; plain libibverbs, built on the host
 * against the same rdma-core (44) that the rxe-peer guests carry, and run in a guest
 * from /mnt/host. Its Rust counterpart is `rverbs interop-peer` (crates/cli/src/interop.rs);
 * both implement the same exchange and schedule, described there and here:
 *
 *   rdma_ops [-d DEV] [-g GIDX] [-p PORT] [-n ITERS] [SERVER]
 *
 * Without SERVER: the responder. It listens on TCP PORT, fills its buffer, posts
 * receives, connects its RC QP and waits for the requester's "check", then validates
 * what the requester wrote, sent and swapped, and answers "ok" or "FAIL <why>".
 * With SERVER: the requester. It connects, runs the schedule ITERS times, checks every
 * READ and atomic result, sends "check" and exits 0 only if both sides are satisfied.
 *
 * Exchange (one line each way, requester first):
 *   "%06x:%06x:%032s:%016llx:%08x\n"  QPN, PSN, GID (hex of its 16 bytes), MR address, R_Key
 * Buffer (BUF_LEN bytes, same layout on both sides):
 *   [0, 24576)      READ source on the responder (pat(0xA5)), READ target on the requester
 *   [24576, 49152)  WRITE target on the responder, WRITE source on the requester (pat(0x3C))
 *   [49152, 57344)  SEND-with-immediate source / receive buffers (pat(0x5A))
 *   57344           the atomic target (8 bytes, starts at ATOMIC_INIT); 57352.. results
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_LEN 65536
#define OFF_WRITE 24576
#define OFF_RECV 49152
#define OFF_ATOMIC 57344
#define OFF_RESULT 57352
#define SEND_LEN 3000
#define WIMM_OFF (OFF_WRITE + 16384)
#define WIMM_LEN 2000
#define SEND_IMM 0x1234abcdu
#define WRITE_IMM 0x0badf00du
#define ATOMIC_INIT UINT64_C(0x0102030405060708)
#define ATOMIC_ADD UINT64_C(0x10)
#define ATOMIC_SWAP UINT64_C(0xcafebabedeadbeef)
#define MAX_ITERS 64

static uint8_t pat(uint8_t seed, size_t i) { return (uint8_t)((i * 131u + seed) ^ (i >> 8)); }

static void fill(uint8_t *b, size_t off, size_t len, uint8_t seed)
{
	for (size_t i = off; i < off + len; i++)
		b[i] = pat(seed, i);
}

static int same(const uint8_t *b, size_t off, size_t len, uint8_t seed)
{
	for (size_t i = off; i < off + len; i++)
		if (b[i] != pat(seed, i))
			return 0;
	return 1;
}

static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_mr *mr;
static uint8_t *buf;

/* Waits up to 30 s for one completion; fails on an error status or a wrong opcode. */
static int wait_wc(struct ibv_wc *wc, enum ibv_wc_opcode want, const char *what)
{
	time_t end = time(NULL) + 30;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0) {
			fprintf(stderr, "%s: poll_cq failed\n", what);
			return -1;
		}
		if (n == 1)
			break;
		if (time(NULL) > end) {
			fprintf(stderr, "%s: no completion in 30 s\n", what);
			return -1;
		}
	}
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s: completion status %s (%d)\n", what,
			ibv_wc_status_str(wc->status), wc->status);
		return -1;
	}
	if (wc->opcode != want) {
		fprintf(stderr, "%s: completion opcode %d, want %d\n", what, wc->opcode, want);
		return -1;
	}
	return 0;
}

struct peer {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static void encode(char *out, size_t n, const struct peer *p)
{
	char gid[33];
	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", p->gid.raw[i]);
	snprintf(out, n, "%06x:%06x:%s:%016" PRIx64 ":%08x\n", p->qpn, p->psn, gid, p->addr,
		 p->rkey);
}

static int decode(const char *in, struct peer *p)
{
	char gid[33];
	if (sscanf(in, "%6x:%6x:%32[0-9a-f]:%16" SCNx64 ":%8x", &p->qpn, &p->psn, gid, &p->addr,
		   &p->rkey) != 5 || strlen(gid) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(gid + 2 * i, "%2x", &v) != 1)
			return -1;
		p->gid.raw[i] = (uint8_t)v;
	}
	return 0;
}

/* Reads one '\n'-terminated line (at most n-1 bytes). */
static int read_line(int fd, char *out, size_t n)
{
	size_t i = 0;
	while (i + 1 < n) {
		char c;
		ssize_t r = read(fd, &c, 1);
		if (r <= 0)
			return -1;
		if (c == '\n')
			break;
		out[i++] = c;
	}
	out[i] = 0;
	return 0;
}

static int write_all(int fd, const char *s)
{
	size_t n = strlen(s);
	while (n) {
		ssize_t w = write(fd, s, n);
		if (w <= 0)
			return -1;
		s += w;
		n -= (size_t)w;
	}
	return 0;
}

static int connect_qp(const struct peer *rem, uint32_t my_psn, int gidx)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = rem->qpn,
		.rq_psn = rem->psn,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = rem->gid, .sgid_index = (uint8_t)gidx, .hop_limit = 1 } },
	};
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = my_psn;
	a.max_rd_atomic = 4;
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int post(enum ibv_wr_opcode op, size_t loff, uint32_t len, const struct peer *rem,
		uint64_t roff, uint64_t cmp_add, uint64_t swap, uint32_t imm)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(buf + loff), .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = op, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.imm_data = htonl(imm);
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = rem->addr + roff;
		wr.wr.atomic.rkey = rem->rkey;
		wr.wr.atomic.compare_add = cmp_add;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = rem->addr + roff;
		wr.wr.rdma.rkey = rem->rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

static int post_recv(size_t off, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(buf + off), .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(qp, &wr, &bad);
}

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, __VA_ARGS__);                                      \
			fputc('\n', stderr);                                               \
			return 1;                                                          \
		}                                                                          \
	} while (0)

static uint64_t result(int k) { uint64_t v; memcpy(&v, buf + OFF_RESULT + 8 * k, 8); return v; }

/* The requester's schedule; 0 when every completion and every local result is right. */
static int requester(const struct peer *rem, int iters)
{
	struct ibv_wc wc;
	fill(buf, OFF_WRITE, OFF_RECV - OFF_WRITE, 0x3c);
	fill(buf, OFF_RECV, SEND_LEN, 0x5a);
	for (int it = 0; it < iters; it++) {
		/* WRITE: one packet, then 12000 B (12 packets at MTU 1024), unaligned. */
		CHECK(!post(IBV_WR_RDMA_WRITE, OFF_WRITE, 512, rem, OFF_WRITE, 0, 0, 0), "post WRITE");
		CHECK(!wait_wc(&wc, IBV_WC_RDMA_WRITE, "WRITE 512"), "WRITE 512 failed");
		CHECK(!post(IBV_WR_RDMA_WRITE, OFF_WRITE + 1001, 12000, rem, OFF_WRITE + 1001, 0, 0, 0),
		      "post WRITE");
		CHECK(!wait_wc(&wc, IBV_WC_RDMA_WRITE, "WRITE 12000"), "WRITE 12000 failed");
		/* READ: a one-packet response, then a 20000 B (20-packet) response. */
		memset(buf, 0, OFF_WRITE);
		CHECK(!post(IBV_WR_RDMA_READ, 0, 512, rem, 0, 0, 0, 0), "post READ");
		CHECK(!wait_wc(&wc, IBV_WC_RDMA_READ, "READ 512"), "READ 512 failed");
		CHECK(wc.byte_len == 512, "READ 512: byte_len %u", wc.byte_len);
		CHECK(same(buf, 0, 512, 0xa5), "READ 512: data differ");
		CHECK(!post(IBV_WR_RDMA_READ, 1003, 20000, rem, 1003, 0, 0, 0), "post READ");
		CHECK(!wait_wc(&wc, IBV_WC_RDMA_READ, "READ 20000"), "READ 20000 failed");
		CHECK(wc.byte_len == 20000, "READ 20000: byte_len %u", wc.byte_len);
		CHECK(same(buf, 1003, 20000, 0xa5), "READ 20000: data differ");
		/* SEND with immediate (3 packets), WRITE with immediate (2 packets). */
		CHECK(!post(IBV_WR_SEND_WITH_IMM, OFF_RECV, SEND_LEN, rem, 0, 0, 0, SEND_IMM + it),
		      "post SEND_WITH_IMM");
		CHECK(!wait_wc(&wc, IBV_WC_SEND, "SEND_WITH_IMM"), "SEND_WITH_IMM failed");
		CHECK(!post(IBV_WR_RDMA_WRITE_WITH_IMM, WIMM_OFF, WIMM_LEN, rem, WIMM_OFF, 0, 0,
			    WRITE_IMM + it), "post WRITE_WITH_IMM");
		CHECK(!wait_wc(&wc, IBV_WC_RDMA_WRITE, "WRITE_WITH_IMM"), "WRITE_WITH_IMM failed");
		/* FETCH_ADD: the original value comes back. */
		CHECK(!post(IBV_WR_ATOMIC_FETCH_AND_ADD, OFF_RESULT, 8, rem, OFF_ATOMIC, ATOMIC_ADD, 0, 0),
		      "post FETCH_ADD");
		CHECK(!wait_wc(&wc, IBV_WC_FETCH_ADD, "FETCH_ADD"), "FETCH_ADD failed");
		CHECK(result(0) == ATOMIC_INIT + ATOMIC_ADD * (uint64_t)it,
		      "FETCH_ADD %d returned %016" PRIx64, it, result(0));
	}
	uint64_t now = ATOMIC_INIT + ATOMIC_ADD * (uint64_t)iters;
	/* CMP_SWAP that matches (swaps), then one that does not (leaves the value). */
	CHECK(!post(IBV_WR_ATOMIC_CMP_AND_SWP, OFF_RESULT + 8, 8, rem, OFF_ATOMIC, now, ATOMIC_SWAP, 0),
	      "post CMP_SWAP");
	CHECK(!wait_wc(&wc, IBV_WC_COMP_SWAP, "CMP_SWAP"), "CMP_SWAP failed");
	CHECK(result(1) == now, "CMP_SWAP returned %016" PRIx64 ", want %016" PRIx64, result(1), now);
	CHECK(!post(IBV_WR_ATOMIC_CMP_AND_SWP, OFF_RESULT + 16, 8, rem, OFF_ATOMIC, now, 1, 0),
	      "post CMP_SWAP");
	CHECK(!wait_wc(&wc, IBV_WC_COMP_SWAP, "CMP_SWAP 2"), "CMP_SWAP 2 failed");
	CHECK(result(2) == ATOMIC_SWAP, "failing CMP_SWAP returned %016" PRIx64, result(2));
	return 0;
}

/* The responder's checks after "check"; 0 when all the requester did arrived intact. */
static int responder_check(int iters, char *why, size_t n)
{
	struct ibv_wc wc;
	for (int it = 0; it < iters; it++) {
		memset(&wc, 0, sizeof(wc));
		if (wait_wc(&wc, IBV_WC_RECV, "receive of SEND_WITH_IMM")) {
			snprintf(why, n, "SEND_WITH_IMM %d not received", it);
			return 1;
		}
		if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != SEND_IMM + (unsigned)it ||
		    wc.byte_len != SEND_LEN) {
			snprintf(why, n, "SEND_WITH_IMM %d: flags %x imm %08x len %u", it, wc.wc_flags,
				 ntohl(wc.imm_data), wc.byte_len);
			return 1;
		}
		if (!same(buf + (size_t)(it % 2) * 4096, OFF_RECV, SEND_LEN, 0x5a)) {
			snprintf(why, n, "SEND_WITH_IMM %d: data differ", it);
			return 1;
		}
		if (wait_wc(&wc, IBV_WC_RECV_RDMA_WITH_IMM, "WRITE_WITH_IMM")) {
			snprintf(why, n, "WRITE_WITH_IMM %d not received", it);
			return 1;
		}
		if (ntohl(wc.imm_data) != WRITE_IMM + (unsigned)it) {
			snprintf(why, n, "WRITE_WITH_IMM %d: imm %08x", it, ntohl(wc.imm_data));
			return 1;
		}
	}
	if (!same(buf, OFF_WRITE, 512, 0x3c) || !same(buf, OFF_WRITE + 1001, 12000, 0x3c) ||
	    !same(buf, WIMM_OFF, WIMM_LEN, 0x3c)) {
		snprintf(why, n, "WRITE data differ");
		return 1;
	}
	uint64_t v;
	memcpy(&v, buf + OFF_ATOMIC, 8);
	if (v != ATOMIC_SWAP) {
		snprintf(why, n, "atomic target is %016" PRIx64 ", want %016" PRIx64, v, ATOMIC_SWAP);
		return 1;
	}
	return 0;
}

static int tcp(const char *server, int port)
{
	/* The listener is IPv6 and dual-stack, so a requester may connect over either family. */
	struct addrinfo hints = { .ai_flags = server ? 0 : AI_PASSIVE,
				  .ai_family = server ? AF_UNSPEC : AF_INET6,
				  .ai_socktype = SOCK_STREAM }, *res, *r;
	char service[8];
	int fd = -1, one = 1;
	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(server, service, &hints, &res))
		return -1;
	for (r = res; r; r = r->ai_next) {
		fd = socket(r->ai_family, r->ai_socktype, r->ai_protocol);
		if (fd < 0)
			continue;
		if (server) {
			if (!connect(fd, r->ai_addr, r->ai_addrlen))
				break;
		} else {
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (!bind(fd, r->ai_addr, r->ai_addrlen) && !listen(fd, 1)) {
				int c = accept(fd, NULL, NULL);
				close(fd);
				fd = c;
				break;
			}
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

int main(int argc, char **argv)
{
	const char *devname = "rxe0", *server = NULL;
	int gidx = 1, port = 18700, iters = 4, opt;
	while ((opt = getopt(argc, argv, "d:g:p:n:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 'n': iters = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-d DEV] [-g GIDX] [-p PORT] [-n ITERS] [SERVER]\n", argv[0]);
			return 2;
		}
	}
	if (optind < argc)
		server = argv[optind];
	if (iters < 1 || iters > MAX_ITERS) {
		fprintf(stderr, "-n must be within 1..%d\n", MAX_ITERS);
		return 2;
	}
	struct ibv_device **list = ibv_get_device_list(NULL), *dev = NULL;
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), devname))
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "no device %s\n", devname);
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd || posix_memalign((void **)&buf, 4096, BUF_LEN)) {
		fprintf(stderr, "open/alloc failed\n");
		return 1;
	}
	memset(buf, 0, BUF_LEN);
	mr = ibv_reg_mr(pd, buf, BUF_LEN,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_ATOMIC);
	cq = ibv_create_cq(ctx, 4 * MAX_ITERS + 8, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 2 * MAX_ITERS,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	qp = mr && cq ? ibv_create_qp(pd, &ia) : NULL;
	if (!qp) {
		fprintf(stderr, "reg_mr/create_cq/create_qp failed: %s\n", strerror(errno));
		return 1;
	}
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		fprintf(stderr, "modify_qp to INIT failed\n");
		return 1;
	}
	struct peer me = { .qpn = qp->qp_num, .addr = (uintptr_t)buf, .rkey = mr->rkey }, rem;
	srand48(getpid() ^ time(NULL));
	me.psn = (uint32_t)lrand48() & 0xffffff;
	if (ibv_query_gid(ctx, 1, gidx, &me.gid)) {
		fprintf(stderr, "no GID %d\n", gidx);
		return 1;
	}
	if (!server) {
		/* Responder: READ source, atomic target, receives (alternating 4 KiB buffers). */
		fill(buf, 0, OFF_WRITE, 0xa5);
		uint64_t init = ATOMIC_INIT;
		memcpy(buf + OFF_ATOMIC, &init, 8);
		for (int i = 0; i < MAX_ITERS; i++)
			if (post_recv(OFF_RECV + (size_t)(i % 2) * 4096, 4096) || post_recv(OFF_RECV, 0)) {
				fprintf(stderr, "post_recv failed\n");
				return 1;
			}
	}
	int fd = tcp(server, port);
	char line[128], why[160] = "";
	if (fd < 0) {
		fprintf(stderr, "TCP %s port %d failed\n", server ? server : "listen", port);
		return 1;
	}
	encode(line, sizeof(line), &me);
	if (server) {
		if (write_all(fd, line) || read_line(fd, line, sizeof(line)) || decode(line, &rem)) {
			fprintf(stderr, "bad exchange\n");
			return 1;
		}
	} else {
		char mine[128];
		strcpy(mine, line);
		if (read_line(fd, line, sizeof(line)) || decode(line, &rem)) {
			fprintf(stderr, "bad exchange\n");
			return 1;
		}
		if (connect_qp(&rem, me.psn, gidx) || write_all(fd, mine)) {
			fprintf(stderr, "connect failed\n");
			return 1;
		}
	}
	printf("local QPN 0x%06x PSN 0x%06x, remote QPN 0x%06x PSN 0x%06x\n", me.qpn, me.psn,
	       rem.qpn, rem.psn);
	if (server) {
		if (connect_qp(&rem, me.psn, gidx)) {
			fprintf(stderr, "connect failed\n");
			return 1;
		}
		int bad = requester(&rem, iters);
		if (write_all(fd, bad ? "abort\n" : "check\n") || read_line(fd, line, sizeof(line))) {
			fprintf(stderr, "no verdict from the responder\n");
			return 1;
		}
		printf("responder: %s\n", line);
		if (bad || strcmp(line, "ok"))
			return 1;
		printf("requester: %d x (WRITE 512+12000, READ 512+20000, SEND_WITH_IMM %d, "
		       "WRITE_WITH_IMM %d, FETCH_ADD) + 2 CMP_SWAP: all verified\n",
		       iters, SEND_LEN, WIMM_LEN);
		return 0;
	}
	if (read_line(fd, line, sizeof(line)) || strcmp(line, "check")) {
		fprintf(stderr, "requester gave up (%s)\n", line);
		return 1;
	}
	int bad = responder_check(iters, why, sizeof(why));
	snprintf(line, sizeof(line), "%s\n", bad ? why : "ok");
	if (bad) {
		memmove(line + 5, line, strlen(line) + 1);
		memcpy(line, "FAIL ", 5);
	}
	write_all(fd, line);
	printf("responder: %s", line);
	return bad;
}
