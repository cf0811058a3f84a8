//! Objects dropped inside `Mr::with` (where taking the device lock could deadlock) are
//! destroyed by the driver thread; a context closed there shuts down on its own. Alone
//! in its test binary: it counts the process's file descriptors and threads.

mod common;
use common::*;
use rverbs::*;
use std::time::{Duration, Instant};

#[test]
fn objects_dropped_inside_mr_with_are_destroyed_without_deadlock() {
    let dev = device(None).unwrap();
    let (ea, eb) = connected_pair(&dev, 4096, 4096);
    // One RDMA WRITE first: a's socket to b (and its probe socket, `conn_tx.rs`) open on
    // a's first send and belong in the count before c.
    ea.qp
        .post_send(&SendRequest::write(
            9,
            &[ea.mr.slice(0..8)],
            eb.mr.remote(0..8),
        ))
        .unwrap();
    assert_eq!(wait(&ea.cq).status, WcStatus::Success);
    let (fds0, threads0) = (count("/proc/self/fd"), count("/proc/self/task"));
    let keep = eb.pd.reg_mr(64, AccessFlags::ALL).unwrap();
    let third = end(dev.open().unwrap(), 64);
    let dead_qpn = eb.qp.qp_num();
    let End {
        qp,
        mr,
        cq,
        pd,
        ctx,
    } = eb;
    let b_ctx = ctx.clone();
    // Inside `with`: the QP, its CQ, region and PD of context b, and all of context c.
    keep.with(|_| drop((qp, mr, cq, pd, ctx, third)));
    drop(keep);
    // b's QP is gone: a's packets to it are counted as for an unknown QP.
    ea.mr.write(0, &[1; 8]);
    ea.qp
        .post_send(&SendRequest::send(1, &[ea.mr.slice(0..8)]))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while b_ctx.counters().rx_unknown_qp == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        b_ctx.counters().rx_unknown_qp > 0,
        "QP {dead_qpn:#x} still exists"
    );
    // Context c closed on its own: its socket, eventfds and driver thread are gone.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline
        && (count("/proc/self/fd") > fds0 || count("/proc/self/task") > threads0)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(count("/proc/self/fd") <= fds0, "context c leaked fds");
    assert!(
        count("/proc/self/task") <= threads0,
        "context c leaked its thread"
    );
    // b still works for new objects.
    let pd = b_ctx.alloc_pd().unwrap();
    let cq = b_ctx.create_cq(4).unwrap();
    pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}
