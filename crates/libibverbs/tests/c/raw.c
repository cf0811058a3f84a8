/* RAW_PACKET QPs from C (IBV_QPT_RAW_PACKET): whole Ethernet frames posted with
 * ibv_post_send, received through ibv_create_flow rules with ibv_post_recv.
 *
 *   raw recv        two QPs, one rule each (UDP to PORT_A / PORT_B); prints READY once
 *                   both wait, then checks which frame reached which QP
 *   raw send        sends the frames the receiver expects (one of them gathered from two
 *                   SGEs), and checks what the device refuses
 *   raw unsupported ERRNO   ibv_create_qp(RAW_PACKET) fails with ERRNO (a context not in
 *                   raw mode: EOPNOTSUPP; no CAP_NET_RAW: EPERM)
 *
 * The test runs recv and send in two network namespaces joined by a veth pair, each with
 * RVERBS_RAW_IF naming its end. */
#include "common.h"
#include <arpa/inet.h>
#include <unistd.h>

#define PORT_A 7001
#define PORT_B 7002
#define PORT_NONE 7003
#define FRAME 60
#define SLOT 2048

static char buf[8 * SLOT];
static struct ibv_mr *mr;

static struct ibv_qp *raw_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 1,
			 .max_inline_data = 64 },
		.qp_type = IBV_QPT_RAW_PACKET,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

	CHECK(qp, "create RAW_PACKET QP");
	CHECK(qp->qp_type == IBV_QPT_RAW_PACKET, "qp_type");
	CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PORT) == 0, "INIT");
	m.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE) == 0, "RTR");
	m.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE) == 0, "RTS");
	return qp;
}

/* A broadcast IPv4/UDP frame to 10.0.0.2:dport (checksums 0) at `f`. */
static void frame(unsigned char *f, uint16_t dport)
{
	uint16_t v;

	memset(f, 0, FRAME);
	memset(f, 0xff, 6);
	memcpy(f + 6, "\x02\x00\x00\x00\x00\x0a", 6);
	f[12] = 0x08;
	f[14] = 0x45;
	v = htons(FRAME - 14);
	memcpy(f + 16, &v, 2);
	f[22] = 64;
	f[23] = 17;
	memcpy(f + 26, "\x0a\x00\x00\x01\x0a\x00\x00\x02", 8);
	v = htons(1000);
	memcpy(f + 34, &v, 2);
	v = htons(dport);
	memcpy(f + 36, &v, 2);
	v = htons(FRAME - 34);
	memcpy(f + 38, &v, 2);
	for (int i = 42; i < FRAME; i++)
		f[i] = (unsigned char)(dport + i);
}

struct rule {
	struct ibv_flow_attr attr;
	struct ibv_flow_spec_eth eth;
	struct ibv_flow_spec_ipv4 ip;
	struct ibv_flow_spec_tcp_udp udp;
} __attribute__((packed, aligned(8)));

static struct ibv_flow *udp_rule(struct ibv_qp *qp, uint16_t dport)
{
	struct rule r = {
		.attr = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(r), .num_of_specs = 3,
			  .port = 1 },
		.eth = { .type = IBV_FLOW_SPEC_ETH, .size = sizeof(r.eth),
			 .val.ether_type = htons(0x0800), .mask.ether_type = 0xffff },
		.ip = { .type = IBV_FLOW_SPEC_IPV4, .size = sizeof(r.ip) },
		.udp = { .type = IBV_FLOW_SPEC_UDP, .size = sizeof(r.udp),
			 .val.dst_port = htons(dport), .mask.dst_port = 0xffff },
	};
	struct ibv_flow *f = ibv_create_flow(qp, &r.attr);

	CHECK(f, "create_flow UDP %u", dport);
	return f;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	for (int i = 0; i < ms; i++) {
		int n = ibv_poll_cq(cq, 1, wc);

		CHECK(n >= 0, "poll_cq");
		if (n)
			return 1;
		usleep(1000);
	}
	return 0;
}

static int do_recv(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_qp *a, *b;
	struct ibv_flow *fa, *fb;
	struct ibv_wc wc;
	int got_a = 0, got_b = 0;

	CHECK(pd && cq, "pd, cq");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	a = raw_qp(pd, cq);
	b = raw_qp(pd, cq);
	for (uint64_t i = 0; i < 4; i++) {
		struct ibv_qp *q = i < 2 ? a : b;
		struct ibv_sge sge = { (uintptr_t)buf + SLOT * i, SLOT, mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		CHECK(ibv_post_recv(q, &wr, &bad) == 0, "post_recv %d", (int)i);
	}
	fa = udp_rule(a, PORT_A);
	fb = udp_rule(b, PORT_B);
	printf("READY\n");
	fflush(stdout);

	/* The sender sends PORT_NONE, PORT_A, PORT_B: the first matches no rule. */
	while (!(got_a && got_b)) {
		unsigned char want[FRAME];

		CHECK(poll_one(cq, &wc, 10000), "no frame within 10 s (A %d, B %d)", got_a, got_b);
		CHECK(wc.status == IBV_WC_SUCCESS, "receive status %d", wc.status);
		CHECK(wc.opcode == IBV_WC_RECV, "opcode %d", wc.opcode);
		CHECK(wc.byte_len == FRAME, "byte_len %u", wc.byte_len);
		if (wc.qp_num == a->qp_num) {
			CHECK(wc.wr_id < 2, "A's completion names B's request %d", (int)wc.wr_id);
			frame(want, PORT_A);
			got_a++;
		} else {
			CHECK(wc.qp_num == b->qp_num, "qp_num %#x", wc.qp_num);
			CHECK(wc.wr_id >= 2, "B's completion names A's request %d", (int)wc.wr_id);
			frame(want, PORT_B);
			got_b++;
		}
		CHECK(!memcmp(buf + SLOT * wc.wr_id, want, FRAME), "frame bytes (wr %d)", (int)wc.wr_id);
	}
	CHECK(got_a == 1 && got_b == 1, "A %d, B %d", got_a, got_b);
	CHECK(!poll_one(cq, &wc, 300), "a frame no rule matched arrived on QP %#x", wc.qp_num);

	/* Once destroyed, a QP in ERROR flushes what it still holds. */
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_ERR };

	CHECK(ibv_destroy_flow(fa) == 0 && ibv_destroy_flow(fb) == 0, "destroy_flow");
	CHECK(ibv_modify_qp(a, &m, IBV_QP_STATE) == 0, "A to ERROR");
	CHECK(poll_one(cq, &wc, 2000) && wc.status == IBV_WC_WR_FLUSH_ERR && wc.qp_num == a->qp_num,
	      "A's last receive flushed (status %d)", wc.status);
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy_qp");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0,
	      "teardown");
	return 0;
}

static void send_one(struct ibv_qp *qp, struct ibv_sge *sge, int n, uint64_t id, int flags)
{
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = sge, .num_sge = n,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED | flags },
			   *bad;

	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post_send %d", (int)id);
}

static int do_send(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_qp *qp;
	struct ibv_wc wc;
	unsigned char *f = (unsigned char *)buf;

	CHECK(pd && cq, "pd, cq");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	qp = raw_qp(pd, cq);

	/* Refused before anything is sent: not a SEND; more SGEs than the cap; inline data
	 * over max_inline_data. */
	struct ibv_sge sge[3] = { { (uintptr_t)f, FRAME, mr->lkey } };
	struct ibv_send_wr wr = { .wr_id = 90, .sg_list = sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE }, *bad = NULL;

	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "RDMA WRITE on a raw QP");
	wr.opcode = IBV_WR_SEND;
	wr.num_sge = 3;
	sge[1] = sge[2] = sge[0];
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL, "3 SGEs over max_send_sge 2");
	wr.num_sge = 1;
	sge[0].length = 100;
	wr.send_flags = IBV_SEND_INLINE;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL, "inline data over 64");

	/* A key of no region: a LOC_PROT_ERR completion, nothing sent. */
	sge[0] = (struct ibv_sge){ (uintptr_t)f, FRAME, mr->lkey ^ 0x5a5a00 };
	send_one(qp, sge, 1, 91, 0);
	CHECK(poll_one(cq, &wc, 2000), "no completion for the bad key");
	CHECK(wc.wr_id == 91 && wc.status == IBV_WC_LOC_PROT_ERR, "bad key: wr %d status %d",
	      (int)wc.wr_id, wc.status);

	/* PORT_NONE (no rule on the receiver), PORT_A (gathered from two SGEs: 20 + 40
	 * bytes far apart), PORT_B (inline). */
	frame(f, PORT_NONE);
	sge[0] = (struct ibv_sge){ (uintptr_t)f, FRAME, mr->lkey };
	send_one(qp, sge, 1, 1, 0);
	frame(f + SLOT, PORT_A);
	memcpy(f + 3 * SLOT, f + SLOT + 20, FRAME - 20);
	memset(f + SLOT + 20, 0, FRAME - 20);
	sge[0] = (struct ibv_sge){ (uintptr_t)f + SLOT, 20, mr->lkey };
	sge[1] = (struct ibv_sge){ (uintptr_t)f + 3 * SLOT, FRAME - 20, mr->lkey };
	send_one(qp, sge, 2, 2, 0);
	{
		unsigned char stack[FRAME];
		struct ibv_sge in = { (uintptr_t)stack, FRAME, 0 };

		frame(stack, PORT_B);
		send_one(qp, &in, 1, 3, IBV_SEND_INLINE);
		memset(stack, 0, FRAME);
	}
	for (uint64_t id = 1; id <= 3; id++) {
		CHECK(poll_one(cq, &wc, 2000), "no send completion %d", (int)id);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == id,
		      "send %d: wr %d status %d opcode %d", (int)id, (int)wc.wr_id, wc.status,
		      wc.opcode);
	}
	CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0,
	      "teardown");
	return 0;
}

static int do_unsupported(struct ibv_context *ctx, int want)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RAW_PACKET,
	};

	CHECK(pd && cq, "pd, cq");
	errno = 0;
	CHECK(!ibv_create_qp(pd, &a) && errno == want, "RAW_PACKET QP: want errno %d", want);
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "teardown");
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;

	CHECK(argc >= 2, "usage: raw recv|send|unsupported ERRNO");
	ctx = open_lo();
	if (!strcmp(argv[1], "recv"))
		do_recv(ctx);
	else if (!strcmp(argv[1], "send"))
		do_send(ctx);
	else if (!strcmp(argv[1], "unsupported") && argc == 3)
		do_unsupported(ctx, atoi(argv[2]));
	else
		CHECK(0, "unknown role %s", argv[1]);
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	printf("OK\n");
	return 0;
}
