/* Shared by the C test programs: a failed check prints its line and exits 1. */
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...)                                                              \
	do {                                                                       \
		if (!(c)) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__,     \
				__LINE__, #c);                                     \
			fprintf(stderr, __VA_ARGS__);                              \
			fprintf(stderr, " (errno %d)\n", errno);                   \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

/* Opens the loopback soft device. */
static inline struct ibv_context *open_lo(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;

	CHECK(list && n > 0, "no device");
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "rv_lo"))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	CHECK(ctx, "rv_lo did not open");
	return ctx;
}

static inline struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);

	CHECK(qp, "create_qp");
	return qp;
}

/* RESET -> INIT with the attributes Linux requires of an RC QP. */
static inline void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };

	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "to INIT");
}
