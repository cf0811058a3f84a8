//! The safe API beyond the data path: completion channels, asynchronous events, SRQs,
//! typed QP attributes, device/port queries, and the memory-safety rules of the crate
//! documentation (dropping a region with work in flight, verbs inside `Mr::with`).

#![forbid(unsafe_code)]

mod common;
use common::*;
use rverbs::*;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

fn readable(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let mut p = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let rc = rverbs_sys::poll::poll(&mut p, 0);
    matches!(rc, Ok(1)) && p[0].revents & libc::POLLIN != 0
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn handles_are_send_and_sync() {
    assert_send_sync::<Context>();
    assert_send_sync::<Pd>();
    assert_send_sync::<Mr>();
    assert_send_sync::<LocalBuf<'static>>();
    assert_send_sync::<SendRequest<'static>>();
    assert_send_sync::<Cq>();
    assert_send_sync::<Qp>();
    assert_send_sync::<Srq>();
    assert_send_sync::<Ah>();
    assert_send_sync::<CompChannel>();
    assert_send_sync::<Error>();
}

#[test]
fn handles_work_from_other_threads_and_outlive_their_parents() {
    let dev = device(None).unwrap();
    let (ea, eb) = connected_pair(&dev, 4096, 4096);
    // The QP, CQ and MR keep the context and PD alive after their handles go.
    let End {
        qp,
        mr,
        cq,
        pd,
        ctx,
    } = ea;
    drop((pd, ctx));
    mr.write(0, b"from another thread");
    let remote = eb.mr.remote(0..19);
    std::thread::scope(|s| {
        s.spawn(|| {
            qp.post_send(&SendRequest::write(1, &[mr.slice(0..19)], remote))
                .unwrap()
        });
    });
    let wc = std::thread::scope(|s| s.spawn(|| wait(&cq)).join().unwrap());
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(&eb.mr.to_vec()[..19], b"from another thread");
}

#[test]
fn completion_channel_fd_and_events() {
    let dev = device(None).unwrap();
    let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
    let ch = b.create_comp_channel().unwrap();
    let ea = end(a, 4096);
    // b's endpoint by hand, with its receive CQ on the channel.
    let pdb = b.alloc_pd().unwrap();
    let scq = b.create_cq(16).unwrap();
    let rcq = b.create_cq_on(16, &ch).unwrap();
    let mrb = pdb.reg_mr(4096, AccessFlags::ALL).unwrap();
    let qb = pdb
        .create_qp(&QpInitAttr::new(QpType::Rc, &scq).recv_cq(&rcq))
        .unwrap();
    let o = ConnectOpts::default();
    connect_qps(&ea.qp, &qb, &o);

    assert!(!readable(ch.as_fd()));
    assert!(ch.try_get_cq_event().is_none());
    rcq.req_notify(false).unwrap();
    for i in 0..2 {
        qb.post_recv(i, &[mrb.slice(0..64)]).unwrap();
    }
    ea.mr.write(0, b"ping");
    ea.qp
        .post_send(&SendRequest::send(7, &[ea.mr.slice(0..4)]))
        .unwrap();
    // The fd turns readable; the event names the CQ; then it is empty again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !readable(ch.as_fd()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(readable(ch.as_fd()), "channel fd never became readable");
    let got = ch.get_cq_event(Some(Duration::from_secs(1))).unwrap();
    assert!(got.same_as(&rcq));
    assert!(!readable(ch.as_fd()));
    assert_eq!(rcq.unacked_events(), 1);
    let wc = wait(&rcq);
    assert_eq!((wc.wr_id, wc.byte_len), (0, 4));
    // Not re-armed: a second message gives no event.
    ea.qp
        .post_send(&SendRequest::send(8, &[ea.mr.slice(0..4)]))
        .unwrap();
    assert_eq!(wait(&rcq).wr_id, 1);
    assert!(ch.get_cq_event(Some(Duration::from_millis(50))).is_none());
    // Acknowledging: exactly what was received.
    assert_eq!(rcq.ack_events(2).unwrap_err().errno(), libc::EINVAL);
    rcq.ack_events(1).unwrap();
    assert_eq!(rcq.unacked_events(), 0);
    // A channel of another context is refused.
    assert_eq!(
        ea.ctx.create_cq_on(4, &ch).err().unwrap().errno(),
        libc::EINVAL
    );
}

#[test]
fn srq_shared_by_two_qps_with_limit_event() {
    let dev = device(None).unwrap();
    let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
    let pda = a.alloc_pd().unwrap();
    let cqa = a.create_cq(64).unwrap();
    let mra = pda.reg_mr(4096, AccessFlags::ALL).unwrap();
    let pdb = b.alloc_pd().unwrap();
    let cqb = b.create_cq(64).unwrap();
    let srq = pdb.create_srq(&SrqInitAttr::new(8)).unwrap();
    let bufs = pdb.reg_mr(8 * 256, AccessFlags::ALL).unwrap();
    let o = ConnectOpts::default();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let qa = pda.create_qp(&QpInitAttr::new(QpType::Rc, &cqa)).unwrap();
        let qb = pdb
            .create_qp(&QpInitAttr::new(QpType::Rc, &cqb).srq(&srq))
            .unwrap();
        connect_qps(&qa, &qb, &o);
        // A QP on an SRQ has no receive queue of its own.
        assert!(qb.post_recv(0, &[bufs.slice(0..8)]).is_err());
        pairs.push((qa, qb));
    }
    for i in 0..8 {
        srq.post_recv(100 + i as u64, &[bufs.slice(i * 256..(i + 1) * 256)])
            .unwrap();
    }
    // Full: the ninth is refused.
    assert_eq!(
        srq.post_recv(999, &[bufs.slice(0..8)]).unwrap_err().errno(),
        libc::ENOMEM
    );
    assert_eq!(srq.arm_limit(9).unwrap_err().errno(), libc::EINVAL);
    srq.arm_limit(6).unwrap();
    // Four messages, alternating QPs: SRQ entries are used in posting order.
    for i in 0..4u8 {
        mra.write(0, &[i; 100]);
        let qa = &pairs[usize::from(i % 2)].0;
        qa.post_send(&SendRequest::send(u64::from(i), &[mra.slice(0..100)]))
            .unwrap();
        assert_eq!(wait(&cqa).status, WcStatus::Success);
        let wc = wait(&cqb);
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.wr_id, 100 + u64::from(i));
        assert_eq!(wc.qp_num, pairs[usize::from(i % 2)].1.qp_num());
        let mut got = [0u8; 100];
        bufs.read(usize::from(i) * 256, &mut got);
        assert_eq!(got, [i; 100]);
    }
    // 8 - 4 = 4 left < 6: the limit event fired once (after the 3rd: 5 < 6).
    let mut evs = Vec::new();
    while let Some(e) = b.get_async_event(Some(Duration::from_millis(100))) {
        evs.push(e);
    }
    let limit: Vec<_> = evs
        .iter()
        .filter(|e| matches!(e, AsyncEvent::SrqLimitReached { .. }))
        .collect();
    assert_eq!(
        limit,
        [&AsyncEvent::SrqLimitReached { srq: srq.handle() }],
        "{evs:?}"
    );
    assert!(!readable(b.async_fd()));
}

#[test]
fn typed_modify_connects_and_rejects_bad_transitions() {
    let dev = device(None).unwrap();
    let (ea, eb) = (
        end(dev.open().unwrap(), 4096),
        end(dev.open().unwrap(), 4096),
    );
    let up = |e: &End, peer: &End| {
        let q = &e.qp;
        q.modify(
            &QpModify::to(QpState::Init)
                .port(1)
                .pkey_index(0)
                .access(AccessFlags::ALL),
        )
        .unwrap();
        q.modify(
            &QpModify::to(QpState::Rtr)
                .path(AhAttr::to(peer.ctx.gid(1).unwrap(), 1))
                .path_mtu(Mtu::M1024)
                .dest_qpn(peer.qp.qp_num())
                .rq_psn(0x100)
                .max_dest_rd_atomic(4)
                .min_rnr_timer(12),
        )
        .unwrap();
        q.modify(
            &QpModify::to(QpState::Rts)
                .sq_psn(0x100)
                .timeout(14)
                .retry_cnt(7)
                .rnr_retry(7)
                .max_rd_atomic(4),
        )
        .unwrap();
    };
    // RESET -> RTR skips INIT: EINVAL; INIT without the access flags: EINVAL.
    let e = ea
        .qp
        .modify(&QpModify::to(QpState::Rtr).dest_qpn(1))
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(e.to_string().contains("modify_qp"), "{e}");
    assert_eq!(
        ea.qp
            .modify(&QpModify::to(QpState::Init).port(1))
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    up(&ea, &eb);
    up(&eb, &ea);
    let attr = ea.qp.query().unwrap();
    assert_eq!(attr.qp_state, QpState::Rts);
    assert_eq!((attr.sq_psn, attr.max_rd_atomic), (0x100, 4));
    // Attribute-only change in RTS.
    ea.qp
        .modify(&QpModify::attrs_only().min_rnr_timer(3))
        .unwrap();
    assert_eq!(ea.qp.query().unwrap().min_rnr_timer, 3);
    ea.mr.write(0, &[9; 64]);
    ea.qp
        .post_send(&SendRequest::write(
            1,
            &[ea.mr.slice(0..64)],
            eb.mr.remote(0..64),
        ))
        .unwrap();
    assert_eq!(wait(&ea.cq).status, WcStatus::Success);
    assert_eq!(eb.mr.to_vec()[..64], [9; 64]);
    // To ERR: in-flight nothing, the QP reports it.
    ea.qp.modify(&QpModify::to(QpState::Err)).unwrap();
    assert_eq!(ea.qp.state(), QpState::Err);
}

#[test]
fn query_device_and_port() {
    let ctx = device(None).unwrap().open().unwrap();
    let d = ctx.query_device().unwrap();
    assert_eq!(d.phys_port_cnt, 1);
    assert_eq!(d.node_guid, ctx.gid(0).unwrap().interface_id());
    assert!(d.max_qp >= 1000 && d.max_qp_wr >= 1024 && d.max_cqe >= 1024);
    // The limits are the enforced ones.
    let pd = ctx.alloc_pd().unwrap();
    assert!(pd
        .create_srq(&SrqInitAttr {
            max_wr: d.max_srq_wr + 1,
            max_sge: 1
        })
        .is_err());
    assert!(pd
        .create_srq(&SrqInitAttr {
            max_wr: 1,
            max_sge: d.max_srq_sge + 1
        })
        .is_err());
    assert!(ctx.create_cq(d.max_cqe + 1).is_err());
    let p = ctx.query_port(1).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.active_mtu, ctx.device().active_mtu());
    // The table's capacity, as rxe reports it; the entries in use fit in it.
    assert_eq!(p.gid_tbl_len as usize, rverbs::GID_TABLE_LEN);
    assert!(ctx.gids().len() <= p.gid_tbl_len as usize);
    assert!(p.link_layer_ethernet);
    assert_eq!(ctx.query_port(2).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(ctx.query_port(0).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn verbs_inside_mr_with_fail_instead_of_deadlocking() {
    let dev = device(None).unwrap();
    let (ea, eb) = connected_pair(&dev, 4096, 4096);
    let r = ea.mr.with(|b| {
        b[..4].copy_from_slice(b"abcd");
        ea.qp.post_send(&SendRequest::write(
            1,
            &[ea.mr.slice(0..4)],
            eb.mr.remote(0..4),
        ))
    });
    let e = r.unwrap_err();
    assert_eq!(e.errno(), libc::EDEADLK);
    assert!(e.to_string().contains("post_send"), "{e}");
    // Nested regions, other objects: the same.
    let r = eb
        .mr
        .with(|_| ea.mr.with(|_| eb.cq.poll(&mut [Wc::default()])));
    assert_eq!(r.unwrap_err().errno(), libc::EDEADLK);
    // Outside `with` all is well, and the data written inside is there.
    ea.qp
        .post_send(&SendRequest::write(
            1,
            &[ea.mr.slice(0..4)],
            eb.mr.remote(0..4),
        ))
        .unwrap();
    assert_eq!(wait(&ea.cq).status, WcStatus::Success);
    assert_eq!(&eb.mr.to_vec()[..4], b"abcd");
}

#[test]
fn dropping_an_mr_with_a_posted_receive_fails_that_receive_cleanly() {
    let dev = device(None).unwrap();
    let (ea, eb) = connected_pair(&dev, 4096, 4096);
    let extra = eb.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    eb.qp.post_recv(5, &[extra.slice(0..4096)]).unwrap();
    drop(extra); // deregistered with the receive still posted
    ea.mr.write(0, &[1; 100]);
    ea.qp
        .post_send(&SendRequest::send(1, &[ea.mr.slice(0..100)]))
        .unwrap();
    let wc = wait(&eb.cq);
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::LocProtErr));
    assert_eq!(eb.qp.state(), QpState::Err);
}

#[test]
fn dropping_an_mr_with_a_started_write_keeps_its_bytes_alive() {
    let dev = device(None).unwrap();
    let (ea, eb) = connected_pair(&dev, 4096, 1 << 20);
    let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let src = ea.pd.reg_mr_from(data.clone(), AccessFlags::NONE).unwrap();
    // 1 MiB = 1024 packets: far from sent when post_send returns.
    ea.qp
        .post_send(&SendRequest::write(
            1,
            &[src.all()],
            eb.mr.remote(0..1 << 20),
        ))
        .unwrap();
    drop(src);
    let wc = wait(&ea.cq);
    assert_eq!(wc.status, WcStatus::Success);
    assert!(eb.mr.to_vec() == data, "the peer got other bytes");
}

#[test]
fn dropping_an_mr_of_a_queued_send_fails_that_send_cleanly() {
    let dev = device(None).unwrap();
    let (ea, eb) = connected_pair(&dev, 1 << 20, 2 << 20);
    let second = ea.pd.reg_mr_from(vec![7; 4096], AccessFlags::NONE).unwrap();
    // 1 MiB = 1024 packets, more than the 128 a QP may have unacknowledged: the
    // second WRITE waits behind the first and has not started when its region goes.
    // The peer is held still meanwhile (its driver blocks on the target region, which
    // another thread holds), so no ACK can let the first WRITE finish early however
    // the scheduler runs this thread.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let eb_mr = &eb.mr;
        s.spawn(move || {
            eb_mr.with(|_| {
                held_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            })
        });
        held_rx.recv().unwrap();
        ea.qp
            .post_send(&SendRequest::write(
                1,
                &[ea.mr.all()],
                eb.mr.remote(0..1 << 20),
            ))
            .unwrap();
        ea.qp
            .post_send(&SendRequest::write(
                2,
                &[second.all()],
                eb.mr.remote(1 << 20..(1 << 20) + 4096),
            ))
            .unwrap();
        drop(second);
        release_tx.send(()).unwrap();
    });
    let (w1, w2) = (wait(&ea.cq), wait(&ea.cq));
    assert_eq!((w1.wr_id, w1.status), (1, WcStatus::Success));
    assert_eq!((w2.wr_id, w2.status), (2, WcStatus::LocProtErr));
    // Nothing of the dropped region reached the peer.
    assert!(eb.mr.to_vec()[1 << 20..].iter().all(|&b| b == 0));
}

#[test]
fn qp_requests_from_other_contexts_objects_are_refused() {
    let dev = device(None).unwrap();
    let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
    let pda = a.alloc_pd().unwrap();
    let pda2 = a.alloc_pd().unwrap();
    let cqb = b.create_cq(4).unwrap();
    let cqa = a.create_cq(4).unwrap();
    assert_eq!(
        pda.create_qp(&QpInitAttr::new(QpType::Rc, &cqb))
            .err()
            .unwrap()
            .errno(),
        libc::EINVAL
    );
    let srq2 = pda2.create_srq(&SrqInitAttr::new(4)).unwrap();
    assert_eq!(
        pda.create_qp(&QpInitAttr::new(QpType::Rc, &cqa).srq(&srq2))
            .err()
            .unwrap()
            .errno(),
        libc::EINVAL
    );
}

#[cfg(feature = "tokio")]
#[test]
fn completion_event_awaited_on_tokio() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    let dev = device(None).unwrap();
    let (ea, b) = (end(dev.open().unwrap(), 4096), dev.open().unwrap());
    let ch = b.create_comp_channel().unwrap();
    let pdb = b.alloc_pd().unwrap();
    let cq = b.create_cq_on(16, &ch).unwrap();
    let mr = pdb.reg_mr(4096, AccessFlags::ALL).unwrap();
    let qb = pdb.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let o = ConnectOpts::default();
    connect_qps(&ea.qp, &qb, &o);
    rt.block_on(async {
        let mut got = 0;
        for i in 0..3u64 {
            cq.req_notify(false).unwrap();
            qb.post_recv(i, &[mr.slice(0..64)]).unwrap();
            ea.qp
                .post_send(&SendRequest::send(i, &[ea.mr.slice(0..8)]))
                .unwrap();
            let ev = tokio::time::timeout(Duration::from_secs(5), ch.get_cq_event_async())
                .await
                .expect("no completion event within 5 s")
                .unwrap();
            assert!(ev.same_as(&cq));
            ev.ack_events(1).unwrap();
            let mut wc = [Wc::default(); 4];
            // The event may come before the send's own completion: poll both.
            let deadline = Instant::now() + Duration::from_secs(5);
            while got <= i && Instant::now() < deadline {
                let n = cq.poll(&mut wc).unwrap();
                got += wc[..n]
                    .iter()
                    .filter(|w| w.opcode == WcOpcode::Recv)
                    .count() as u64;
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(got, 3);
    });
}

#[test]
fn a_remote_buf_of_another_length_than_the_local_buffers_is_refused_at_post() {
    let dev = device(None).unwrap();
    let (ea, eb) = connected_pair(&dev, 8192, 8192);
    ea.mr.write(0, &[0x5a; 4096]);
    let remote = eb.mr.remote(0..4096);
    for (wr, local) in [
        (SendRequest::write(1, &[ea.mr.slice(0..1024)], remote), 1024),
        (SendRequest::read(2, &[ea.mr.slice(0..1024)], remote), 1024),
        (
            SendRequest::write(3, &[ea.mr.slice(0..4096), ea.mr.slice(0..8)], remote),
            4104,
        ),
        (
            SendRequest::write(4, &[ea.mr.slice(0..1024)], remote).imm(7),
            1024,
        ),
    ] {
        let e = ea.qp.post_send(&wr).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!(
                "({local} bytes in the local buffers, the RemoteBuf has 4096)"
            )),
            "{msg}"
        );
        // The same through the list: refused at its index, nothing posted.
        let (at, e) = ea.qp.post_send_list(&[wr]).unwrap_err();
        assert_eq!((at, e.errno()), (0, libc::EINVAL));
    }
    // Nothing was sent: the peer's region is untouched, and a matching request works.
    assert!(eb.mr.to_vec()[..4096].iter().all(|&b| b == 0));
    ea.qp
        .post_send(&SendRequest::write(5, &[ea.mr.slice(0..4096)], remote))
        .unwrap();
    let wc = wait(&ea.cq);
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::Success));
    assert_eq!(eb.mr.to_vec()[..4096], [0x5a; 4096]);
    // Part of the peer's buffer: name that part.
    let part = RemoteBuf { len: 8, ..remote };
    ea.qp
        .post_send(&SendRequest::read(6, &[ea.mr.slice(4096..4104)], part))
        .unwrap();
    assert_eq!(wait(&ea.cq).status, WcStatus::Success);
    // Atomics take 8 bytes at `remote.addr` whatever its length.
    ea.qp
        .post_send(&SendRequest::fetch_add(
            7,
            ea.mr.slice(4104..4112),
            remote,
            1,
        ))
        .unwrap();
    assert_eq!(wait(&ea.cq).status, WcStatus::Success);
}

#[test]
fn a_qp_made_with_default_caps_posts_and_errors_say_the_numbers() {
    let dev = device(None).unwrap();
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.reg_mr(64, AccessFlags::ALL).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap {
            max_send_sge: 2,
            max_recv_sge: 2,
            ..QpCap::default()
        }))
        .unwrap();
    // Connected to itself: RTS, so posts reach the queue checks.
    let me = PeerInfo {
        qpn: qp.qp_num(),
        psn: 0,
        gid: ctx.gid(1).unwrap(),
    };
    qp.connect(&me, &ConnectOpts::default()).unwrap();
    let five = [mr.slice(0..8); 5];
    qp.post_recv(1, &five[..2]).unwrap();
    qp.post_send(&SendRequest::send(3, &five[..2])).unwrap();
    let e = qp.post_send(&SendRequest::send(4, &five[..3])).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(
        e.to_string()
            .ends_with("too many SGEs (3 SGEs, the QP takes at most 2)"),
        "{e}"
    );
    let e = qp.post_recv(2, &five[..3]).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("too many SGEs (3 SGEs, the QP takes at most 2)"),
        "{e}"
    );
    // Caps above the device's limits name both numbers too.
    let e = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap {
            max_send_sge: 1000,
            ..QpCap::default()
        }))
        .err()
        .expect("caps above the device's limits");
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(
        e.to_string()
            .contains("(1000 SGEs, the device takes at most"),
        "{e}"
    );
}

#[test]
fn two_contexts_of_one_process_number_their_qps_apart() {
    let dev = device(None).unwrap();
    let qpn = |ctx: &Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4).unwrap();
        pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))
            .unwrap()
            .qp_num()
    };
    let (a, b) = (dev.open().unwrap(), dev.open().unwrap());
    assert_ne!(qpn(&a), qpn(&b));
}
