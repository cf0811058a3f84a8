/* ibv_create_flow / ibv_destroy_flow (verbs.h's inlines through verbs_context) on UD
 * QPs: a rule made of libibverbs' spec structs steers a datagram sent to one QP to the
 * rule's QP instead, and stops once destroyed; bad attributes get the kernel's errno. */
#include "common.h"
#include <arpa/inet.h>
#include <unistd.h>

#define QKEY 0x11111111

static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };

	CHECK(qp, "create UD QP");
	CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0,
	      "INIT");
	m.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE) == 0, "RTR");
	m.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "RTS");
	return qp;
}

static char buf[4096];
static struct ibv_mr *mr;

static void post_recv(struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)buf + 256 * id, 256, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
}

/* Sends one datagram from `from` to `to_qpn` and returns the QP number it completed
 * a receive on (0 if none within 2 s). */
static uint32_t send_and_see(struct ibv_cq *cq, struct ibv_qp *from, struct ibv_ah *ah,
			     uint32_t to_qpn)
{
	struct ibv_sge sge = { (uintptr_t)buf, 16, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 99, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	uint32_t got = 0;
	int sent = 0;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = to_qpn;
	wr.wr.ud.remote_qkey = QKEY;
	CHECK(ibv_post_send(from, &wr, &bad) == 0, "post_send");
	for (int i = 0; i < 2000 && !(sent && got); i++) {
		int n = ibv_poll_cq(cq, 1, &wc);

		CHECK(n >= 0, "poll_cq");
		if (n == 0) {
			usleep(1000);
			continue;
		}
		CHECK(wc.status == IBV_WC_SUCCESS, "completion status %d", wc.status);
		if (wc.opcode == IBV_WC_SEND)
			sent = 1;
		else
			got = wc.qp_num;
	}
	CHECK(sent, "the send did not complete");
	return got;
}

struct rule {
	struct ibv_flow_attr attr;
	struct ibv_flow_spec_eth eth;
	struct ibv_flow_spec_ipv4_ext ip;
	struct ibv_flow_spec_tcp_udp udp;
} __attribute__((packed, aligned(8)));

int main(void)
{
	struct ibv_context *ctx = open_lo();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a, *b, *c, *rc;
	union ibv_gid gid;
	struct ibv_flow *flow;

	CHECK(pd && cq, "pd, cq");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	a = ud_qp(pd, cq);
	b = ud_qp(pd, cq);
	c = ud_qp(pd, cq);
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = 1, .hop_limit = 64 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "create_ah");
	for (int i = 0; i < 4; i++) {
		post_recv(b, 1 + i);
		post_recv(c, 5 + i);
	}

	/* No rule: the datagram reaches the QP it was sent to. */
	CHECK(send_and_see(cq, a, ah, b->qp_num) == b->qp_num, "unsteered datagram");

	/* IPv4 (the _EXT spec, sent to the kernel as IPV4) to our own address, UDP to
	 * RoCE's port: everything B would get goes to C. */
	struct rule r = {
		.attr = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(r), .num_of_specs = 3,
			  .port = 1 },
		.eth = { .type = IBV_FLOW_SPEC_ETH, .size = sizeof(r.eth),
			 .val.ether_type = htons(0x0800), .mask.ether_type = 0xffff },
		.ip = { .type = IBV_FLOW_SPEC_IPV4_EXT, .size = sizeof(r.ip) },
		.udp = { .type = IBV_FLOW_SPEC_UDP, .size = sizeof(r.udp),
			 .val.dst_port = htons(4791), .mask.dst_port = 0xffff },
	};
	memcpy(&r.ip.val.dst_ip, &gid.raw[12], 4);
	r.ip.mask.dst_ip = 0xffffffff;
	flow = ibv_create_flow(c, (struct ibv_flow_attr *)(void *)&r);
	CHECK(flow, "create_flow");
	CHECK(flow->context == ctx, "flow->context");
	CHECK(send_and_see(cq, a, ah, b->qp_num) == c->qp_num, "the rule did not steer");
	CHECK(ibv_destroy_flow(flow) == 0, "destroy_flow");
	CHECK(send_and_see(cq, a, ah, b->qp_num) == b->qp_num, "steered after destroy");

	/* Bad attributes: the kernel's (and rdma-core's) errno, nothing installed. */
	struct rule bad = r;
	bad.udp.type = 0x77;
	errno = 0;
	CHECK(!ibv_create_flow(c, (struct ibv_flow_attr *)(void *)&bad) && errno == EINVAL, "unknown spec type");
	bad = r;
	bad.attr.flags = 1 << 5;
	errno = 0;
	CHECK(!ibv_create_flow(c, (struct ibv_flow_attr *)(void *)&bad) && errno == EINVAL, "unknown flags");
	/* An IPV4_EXT spec with a longer filter (a newer header's) whose extra mask bytes
	 * are not zero: rdma-core's EOPNOTSUPP. */
	struct {
		struct ibv_flow_attr attr;
		uint32_t type;
		uint16_t size;
		uint16_t pad;
		uint8_t val[20], mask[20];
	} __attribute__((packed, aligned(8))) longer = {
		.attr = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(longer), .num_of_specs = 1,
			  .port = 1 },
		.type = IBV_FLOW_SPEC_IPV4_EXT, .size = 8 + 40,
	};
	longer.mask[16] = 1;
	errno = 0;
	CHECK(!ibv_create_flow(c, (struct ibv_flow_attr *)(void *)&longer) && errno == EOPNOTSUPP,
	      "IPV4_EXT filter bits the kernel does not know");
	rc = rc_qp(pd, cq);
	errno = 0;
	CHECK(!ibv_create_flow(rc, (struct ibv_flow_attr *)(void *)&r) && errno == EINVAL, "flow on an RC QP");
	CHECK(send_and_see(cq, a, ah, b->qp_num) == b->qp_num, "a refused rule steered");

	CHECK(ibv_destroy_qp(rc) == 0 && ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 &&
		      ibv_destroy_qp(c) == 0,
	      "destroy_qp");
	CHECK(ibv_destroy_ah(ah) == 0, "destroy_ah");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0,
	      "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	printf("OK\n");
	return 0;
}
