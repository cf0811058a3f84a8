//! A peer that vanishes mid-transfer ends in RETRY_EXC_ERR within the configured
//! timeout x retries, with the remaining work flushed; closing contexts leaks no file
//! descriptors and no threads.

mod common;
use common::*;
use rverbs::*;
use std::time::{Duration, Instant};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn vanished_peer_gives_retry_exceeded_and_nothing_leaks() {
    let (fds0, threads0) = (count("/proc/self/fd"), count("/proc/self/task"));
    {
        let dev = device(None).unwrap();
        let ea = end(dev.open().unwrap(), 1 << 20);
        let eb = end(dev.open().unwrap(), 1 << 20);
        // timeout 10 = 4.2 ms, retry_cnt 3: the peer is declared gone after ~17 ms.
        let o = ConnectOpts {
            timeout: 10,
            retry_cnt: 3,
            ..ConnectOpts::default()
        };
        connect(&ea, &eb, &o);
        let remote = eb.mr.remote(0..1 << 20);
        // The peer goes away (its device closes) before the transfer.
        drop(eb);
        let (a, qa, ma, cqa) = (&ea.ctx, &ea.qp, &ea.mr, &ea.cq);
        let start = Instant::now();
        for i in 0..4 {
            qa.post_send(&SendRequest::write(i, &[ma.all()], remote))
                .unwrap();
        }
        let mut wcs = Vec::new();
        let mut buf = [Wc::default(); 8];
        while wcs.len() < 4 && start.elapsed() < Duration::from_secs(10) {
            let n = cqa.poll(&mut buf).unwrap();
            wcs.extend_from_slice(&buf[..n]);
        }
        let took = start.elapsed();
        let st: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(
            st,
            [
                (0, WcStatus::RetryExcErr),
                (1, WcStatus::WrFlushErr),
                (2, WcStatus::WrFlushErr),
                (3, WcStatus::WrFlushErr)
            ]
        );
        assert_eq!(qa.state(), QpState::Err);
        // 4 timeouts of 4.2 ms (first try + 3 retries); generous bound for a busy machine.
        assert!(took < Duration::from_secs(2), "took {took:?}");
        assert!(a.counters().retransmit_timeouts >= 4);
        // The QP's failure is also an asynchronous event (after COMM_EST from the
        // connection's first packet).
        let mut evs = Vec::new();
        while let Some(e) = a.get_async_event(Some(Duration::from_millis(200))) {
            evs.push(e);
        }
        assert!(
            evs.contains(&AsyncEvent::QpFatal { qpn: qa.qp_num() }),
            "{evs:?}"
        );
    }
    // Every context, socket, eventfd and driver thread is gone.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline
        && (count("/proc/self/fd") > fds0 || count("/proc/self/task") > threads0)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(count("/proc/self/fd") <= fds0, "file descriptors leaked");
    assert!(count("/proc/self/task") <= threads0, "threads leaked");
}
