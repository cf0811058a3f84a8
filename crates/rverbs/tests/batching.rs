//! The loopback device's batched data path: trains of datagrams leave in one
//! `sendmmsg` / `UDP_SEGMENT` buffer and arrive whole (`UDP_GRO`), ACKs are deferred
//! and coalesced, and a post list enters the device once. Every byte must still arrive
//! intact and in order, at every size around the MTU and the train limits, and both
//! ICRC counters stay at zero (every datagram cut back out of a train verifies).

mod common;
use common::*;
use rverbs::*;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

#[test]
fn sends_and_writes_of_every_train_shape_arrive_intact() {
    let dev = device(None).unwrap();
    for mtu in [Mtu::M1024, Mtu::M4096] {
        let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
        let (ea, eb) = (end(a.clone(), 1 << 21), end(b.clone(), 1 << 21));
        connect(
            &ea,
            &eb,
            &ConnectOpts {
                mtu,
                ..ConnectOpts::default()
            },
        );
        assert_eq!(ea.qp.query().unwrap().path_mtu, mtu);
        transfer_all(&ea, &eb, mtu);
        for c in [&a, &b] {
            let k = c.counters();
            assert_eq!((k.rx_icrc_errors, k.rx_malformed), (0, 0), "MTU {mtu:?}");
        }
    }
}

/// SENDs and WRITEs of sizes around one MTU, a full train (64 datagrams) and the
/// 65,000-byte train limit, each checked byte for byte.
fn transfer_all(x: &End, y: &End, mtu: Mtu) {
    let m = mtu.bytes();
    let sizes = [
        1,
        m - 1,
        m,
        m + 1,
        3 * m + 7,
        64 * m,
        64 * m + 1,
        65_000,
        65_537,
        300_001,
    ];
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, i as u32);
        x.mr.write(0, &data);
        y.qp.post_recv(1, &[y.mr.slice(0..len)]).unwrap();
        x.qp.post_send(&SendRequest::send(2, &[x.mr.slice(0..len)]))
            .unwrap();
        let wc = wait(&y.cq);
        assert_eq!((wc.status, wc.byte_len as usize), (WcStatus::Success, len));
        assert_eq!(wait(&x.cq).status, WcStatus::Success);
        let mut got = vec![0u8; len];
        y.mr.read(0, &mut got);
        assert!(got == data, "SEND of {len} bytes at MTU {m}");

        let data = pattern(len, 1000 + i as u32);
        x.mr.write(0, &data);
        x.qp.post_send(&SendRequest::write(
            3,
            &[x.mr.slice(0..len)],
            y.mr.remote(1 << 20..(1 << 20) + len),
        ))
        .unwrap();
        assert_eq!(wait(&x.cq).status, WcStatus::Success);
        y.mr.read(1 << 20, &mut got);
        assert!(got == data, "WRITE of {len} bytes at MTU {m}");
    }
}

#[test]
fn a_post_list_of_small_writes_lands_in_order() {
    let dev = device(None).unwrap();
    let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
    let (ea, eb) = (end(a, 1 << 16), end(b, 1 << 16));
    connect(&ea, &eb, &ConnectOpts::default());
    // 40 WRITEs of 64 bytes to the same place, in one post list: the last one wins.
    for round in 0..20u8 {
        for k in 0..40u8 {
            ea.mr.write(usize::from(k) * 64, &[round ^ k; 64]);
        }
        let wrs: Vec<SendRequest> = (0..40usize)
            .map(|k| {
                SendRequest::write(
                    k as u64,
                    &[ea.mr.slice(k * 64..k * 64 + 64)],
                    eb.mr.remote(0..64),
                )
                .signaled(k == 39)
            })
            .collect();
        ea.qp.post_send_list(&wrs).unwrap();
        let wc = wait(&ea.cq);
        assert_eq!((wc.wr_id, wc.status), (39, WcStatus::Success));
        let mut got = [0u8; 64];
        eb.mr.read(0, &mut got);
        assert_eq!(got, [round ^ 39; 64]);
    }
    // A refused request in the middle: the ones before it were posted, the rest not.
    let big = ea.mr.slice(0..64);
    let mut wrs: Vec<SendRequest> = (0..3)
        .map(|k| SendRequest::write(100 + k, &[big], eb.mr.remote(0..64)))
        .collect();
    wrs[1] = SendRequest::fetch_add(101, ea.mr.slice(0..4), eb.mr.remote(0..8), 1);
    let (at, err) = ea.qp.post_send_list(&wrs).unwrap_err();
    assert_eq!(at, 1, "{err}");
    let wc = wait(&ea.cq);
    assert_eq!((wc.wr_id, wc.status), (100, WcStatus::Success));
}

/// The receiver's ACK is deferred while it polls (it would leave with its next send);
/// a receiver that drops its QP right after its completion still sends it, so the
/// sender completes with success instead of retrying into RETRY_EXC_ERR.
#[test]
fn a_receiver_that_quits_after_its_completion_still_acknowledges() {
    let dev = device(None).unwrap();
    for _ in 0..5 {
        let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
        let (ea, eb) = (end(a, 1 << 12), end(b, 1 << 12));
        connect(&ea, &eb, &ConnectOpts::default());
        eb.qp.post_recv(1, &[eb.mr.slice(0..100)]).unwrap();
        ea.qp
            .post_send(&SendRequest::send(2, &[ea.mr.slice(0..100)]))
            .unwrap();
        assert_eq!(wait(&eb.cq).status, WcStatus::Success);
        let End {
            qp,
            cq,
            mr,
            pd,
            ctx,
        } = eb;
        drop((qp, cq, mr, pd, ctx));
        let wc = wait(&ea.cq);
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
        assert_eq!(ea.ctx.counters().retransmit_timeouts, 0);
    }
}
