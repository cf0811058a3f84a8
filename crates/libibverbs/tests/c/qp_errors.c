/* Bad input from a C caller gets the errno libibverbs gives on a kernel device
 * (rdma-core's libibverbs/cmd.c, the kernel's ib_modify_qp_is_ok() and rxe's checks):
 * unknown mask bits, bad states and transitions, missing or extra attributes, values
 * out of range, capacities over the device's, bad work requests. A refused modify
 * leaves the QP as it was. */
#include "common.h"

static int modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	return ibv_modify_qp(qp, a, mask);
}

static enum ibv_qp_state state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;

	CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE, &i) == 0, "query_qp");
	return a.qp_state;
}

#define INIT_MASK (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)

int main(void)
{
	struct ibv_context *ctx = open_lo();
	struct ibv_device_attr dev;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	static char buf[4096];
	struct ibv_mr *mr;

	CHECK(pd, "alloc_pd");
	CHECK(ibv_query_device(ctx, &dev) == 0, "query_device");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");

	/* Sizes over the caps. */
	errno = 0;
	CHECK(!ibv_create_cq(ctx, dev.max_cqe + 1, NULL, NULL, 0) && errno == EINVAL,
	      "cqe over max_cqe");
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	struct {
		const char *what;
		struct ibv_qp_cap cap;
	} caps[] = {
		{ "max_send_wr", { .max_send_wr = dev.max_qp_wr + 1, .max_recv_wr = 1 } },
		{ "max_recv_wr", { .max_send_wr = 1, .max_recv_wr = dev.max_qp_wr + 1 } },
		{ "max_send_sge", { .max_send_wr = 1, .max_recv_wr = 1,
				    .max_send_sge = dev.max_sge + 1 } },
		{ "max_recv_sge", { .max_send_wr = 1, .max_recv_wr = 1,
				    .max_recv_sge = dev.max_sge + 1 } },
		{ "max_inline_data", { .max_send_wr = 1, .max_recv_wr = 1,
				       .max_inline_data = 1u << 30 } },
	};
	for (unsigned i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		init = (struct ibv_qp_init_attr){ .send_cq = cq, .recv_cq = cq,
						  .cap = caps[i].cap, .qp_type = IBV_QPT_RC };
		errno = 0;
		CHECK(!ibv_create_qp(pd, &init) && errno == EINVAL, "%s over the cap", caps[i].what);
	}
	init = (struct ibv_qp_init_attr){ .send_cq = cq, .recv_cq = cq,
					  .cap = { .max_send_wr = 1 }, .qp_type = 77 };
	errno = 0;
	CHECK(!ibv_create_qp(pd, &init) && errno == EINVAL, "unknown QP type");

	qp = rc_qp(pd, cq);

	/* Mask bits rdma-core does not define: EOPNOTSUPP before anything else is
	 * looked at (libibverbs' ibv_cmd_modify_qp), even a state out of the enum. */
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1 };
	CHECK(modify(qp, &a, INIT_MASK | (1 << 26)) == EOPNOTSUPP, "unknown mask bit");
	a.qp_state = 99;
	CHECK(modify(qp, &a, INIT_MASK | (1 << 30)) == EOPNOTSUPP, "unknown bit and bad state");
	CHECK(modify(qp, &a, INIT_MASK | (int)(1u << 31)) == EOPNOTSUPP, "negative mask");
	/* A state out of the enum, skipped states, missing and extra attributes. */
	CHECK(modify(qp, &a, INIT_MASK) == EINVAL, "state 99");
	a.qp_state = IBV_QPS_RTS;
	CHECK(modify(qp, &a, IBV_QP_STATE) == EINVAL, "RESET -> RTS");
	a.qp_state = IBV_QPS_INIT;
	CHECK(modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS) == EINVAL,
	      "INIT without PORT");
	a.path_mtu = IBV_MTU_1024;
	CHECK(modify(qp, &a, INIT_MASK | IBV_QP_PATH_MTU) == EINVAL, "PATH_MTU to INIT");
	/* Values out of range. */
	a.port_num = 2;
	CHECK(modify(qp, &a, INIT_MASK) == EINVAL, "port 2");
	a.port_num = 1;
	a.pkey_index = 1000;
	CHECK(modify(qp, &a, INIT_MASK) == EINVAL, "pkey_index beyond the table");
	a.pkey_index = 0;
	a.qp_access_flags = 1 << 20;
	CHECK(modify(qp, &a, INIT_MASK) == EINVAL, "unknown access flag");
	a.qp_access_flags = 0;
	/* cur_qp_state only from RTR on, and must be the QP's. */
	a.cur_qp_state = IBV_QPS_RESET;
	CHECK(modify(qp, &a, INIT_MASK | IBV_QP_CUR_STATE) == EINVAL, "CUR_STATE in RESET");
	CHECK(state(qp) == IBV_QPS_RESET && qp->state == IBV_QPS_RESET,
	      "a refused modify moved the QP");
	CHECK(modify(qp, &a, INIT_MASK) == 0, "to INIT");
	CHECK(state(qp) == IBV_QPS_INIT && qp->state == IBV_QPS_INIT, "INIT");

	/* INIT -> RTR: path_mtu beyond the enum, then a bad timeout at RTR -> RTS. */
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR, .path_mtu = 9, .dest_qp_num = qp->qp_num,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = 1, .hop_limit = 1 } },
	};
	int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK(modify(qp, &a, rtr) == EINVAL, "path_mtu 9");
	a.path_mtu = IBV_MTU_1024;
	a.min_rnr_timer = 32;
	CHECK(modify(qp, &a, rtr) == EINVAL, "min_rnr_timer 32");
	a.min_rnr_timer = 12;
	CHECK(modify(qp, &a, rtr & ~IBV_QP_DEST_QPN) == EINVAL, "RTR without DEST_QPN");
	CHECK(modify(qp, &a, rtr) == 0, "to RTR");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 32, .retry_cnt = 7,
				  .rnr_retry = 7, .max_rd_atomic = 1 };
	int rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
	CHECK(modify(qp, &a, rts) == EINVAL, "timeout 32");
	a.timeout = 14;
	a.retry_cnt = 8;
	CHECK(modify(qp, &a, rts) == EINVAL, "retry_cnt 8");
	a.retry_cnt = 7;
	a.max_rd_atomic = dev.max_qp_rd_atom + 1;
	CHECK(modify(qp, &a, rts) == EINVAL, "max_rd_atomic over the device's");
	a.max_rd_atomic = 1;
	CHECK(state(qp) == IBV_QPS_RTR, "refused RTS moved the QP");
	CHECK(modify(qp, &a, rts) == 0, "to RTS");

	/* Work requests: SGEs over the QP's, an unknown opcode, a full queue. */
	struct ibv_sge sge[2] = { { (uintptr_t)buf, 8, mr->lkey }, { (uintptr_t)buf, 8, mr->lkey } };
	struct ibv_send_wr wr = { .sg_list = sge, .num_sge = 2, .opcode = IBV_WR_SEND }, *bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "num_sge over max_send_sge");
	wr.num_sge = 1;
	wr.opcode = 200;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "unknown opcode");
	struct ibv_recv_wr rwr = { .sg_list = sge, .num_sge = 2 }, *rbad = NULL;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == EINVAL && rbad == &rwr, "num_sge over max_recv_sge");
	/* The queue holds max_recv_wr = 8: the ninth of a chain is refused, ENOMEM. */
	struct ibv_recv_wr chain[9];
	for (int i = 0; i < 9; i++)
		chain[i] = (struct ibv_recv_wr){ .wr_id = i, .sg_list = sge, .num_sge = 1,
						 .next = i < 8 ? &chain[i + 1] : NULL };
	CHECK(ibv_post_recv(qp, chain, &rbad) == ENOMEM && rbad == &chain[8], "recv queue full");
	/* In a chain, the requests before a refused one are posted and bad_wr names it.
	 * (Last: the WRITE it posts, to this QP, may move the QP to ERROR.) */
	struct ibv_send_wr second = { .wr_id = 2, .sg_list = sge, .num_sge = 1, .opcode = 200 };
	struct ibv_send_wr first = { .wr_id = 1, .sg_list = sge, .num_sge = 1,
				     .opcode = IBV_WR_RDMA_WRITE, .next = &second };
	first.wr.rdma.remote_addr = (uintptr_t)buf;
	first.wr.rdma.rkey = mr->rkey;
	bad = NULL;
	CHECK(ibv_post_send(qp, &first, &bad) == EINVAL && bad == &second,
	      "second of a chain refused");

	CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	printf("OK\n");
	return 0;
}
