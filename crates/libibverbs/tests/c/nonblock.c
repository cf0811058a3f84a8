/* ibv_get_cq_event / ibv_get_async_event on descriptors the program made
 * O_NONBLOCK: -1 with EAGAIN when no event waits, the event when one does; and
 * blocking again once the flag is cleared (libibverbs reads the descriptor). */
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static struct ibv_qp *qp;
static char buf[64];
static struct ibv_mr *mr;

/* A receive on a QP in ERR completes at once (flushed): a completion to signal. */
static void post_one(void)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(buf),
			       .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;

	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
}

static void *later(void *arg)
{
	(void)arg;
	usleep(200 * 1000);
	post_one();
	return NULL;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void)
{
	struct ibv_context *ctx = open_lo();
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq, *ecq;
	struct ibv_pd *pd;
	struct ibv_async_event ae;
	struct ibv_wc wc;
	void *ectx;
	struct pollfd p;
	pthread_t t;
	double t0;

	CHECK(ch, "create_comp_channel");
	cq = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
	CHECK(cq, "create_cq");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	qp = rc_qp(pd, cq);
	to_init(qp);
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	CHECK(ibv_modify_qp(qp, &err, IBV_QP_STATE) == 0, "to ERR");

	/* The descriptors start blocking, as libibverbs' do. */
	CHECK(!(fcntl(ch->fd, F_GETFL) & O_NONBLOCK), "channel fd starts non-blocking");
	CHECK(!(fcntl(ctx->async_fd, F_GETFL) & O_NONBLOCK), "async_fd starts non-blocking");

	/* Non-blocking and nothing waiting: EAGAIN at once. */
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "F_SETFL");
	CHECK(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0,
	      "F_SETFL");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "req_notify_cq");
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == -1 && errno == EAGAIN, "no event: EAGAIN");
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ae) == -1 && errno == EAGAIN, "no async event: EAGAIN");
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 0, "fd readable with no event");

	/* An event: the fd becomes readable and the event is returned. */
	post_one();
	CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "fd not readable after an event");
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == 0, "get_cq_event with an event waiting");
	CHECK(ecq == cq && ectx == (void *)0x1234, "event names the CQ");
	ibv_ack_cq_events(cq, 1);
	CHECK(ibv_poll_cq(cq, 1, &wc) == 1 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 7,
	      "flushed receive");
	CHECK(poll(&p, 1, 0) == 0, "fd still readable after the event was taken");
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == -1 && errno == EAGAIN, "EAGAIN again");

	/* Blocking again: the call waits for the event another thread causes. */
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK) == 0, "F_SETFL");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "req_notify_cq");
	t0 = now();
	CHECK(pthread_create(&t, NULL, later, NULL) == 0, "pthread_create");
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == cq, "blocking get_cq_event");
	CHECK(now() - t0 > 0.15, "blocking get_cq_event returned after %.3f s", now() - t0);
	pthread_join(t, NULL);
	ibv_ack_cq_events(cq, 1);
	CHECK(ibv_poll_cq(cq, 1, &wc) == 1, "second flushed receive");

	CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel");
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	printf("OK\n");
	return 0;
}
