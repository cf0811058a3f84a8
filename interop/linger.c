/*
 * linger.so: an LD_PRELOAD shim for the guest's rdma-core tools in the recovery suite
 * (interop/recovery.sh). ibv_rc_pingpong has no closing handshake: when it has its last
 * message and its last ACK it destroys its QP and exits, and if the ACK it sent for the
 * peer's last message was lost on the way, the peer retransmits into a QP that is gone
 * and fails with a retry-exceeded error although every byte arrived. rverbs' pingpong
 * lingers before closing for this reason; this shim gives the unmodified rdma-core tool
 * the same grace: ibv_destroy_qp waits LINGER_MS (default 1000) first, while the
 * kernel's responder keeps re-acknowledging duplicates.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <unistd.h>

int ibv_destroy_qp(struct ibv_qp *qp)
{
	static int (*real)(struct ibv_qp *);
	const char *ms = getenv("LINGER_MS");
	if (!real)
		real = (int (*)(struct ibv_qp *))dlsym(RTLD_NEXT, "ibv_destroy_qp");
	if (!real)
		return -1;
	usleep((useconds_t)(ms ? atoi(ms) : 1000) * 1000);
	return real(qp);
}
