//! Two (or three) CM endpoints over the simulated link on virtual time: the handshake,
//! its failure paths and the kernel's answers to each.

use rverbs_cm::cma::{service_id, PortSpace};
use rverbs_cm::consts::{self, private_len, rej, sidr_status, MS};
use rverbs_cm::sim::{node_gid, LinkConfig, Sim};
use rverbs_cm::state::Input;
use rverbs_cm::{
    AcceptParams, CmError, CmId, Config, ConnectParams, Event, Path, QpState, SidrParams,
    SidrReply, State, Unanswered,
};
use rverbs_wire::mad::attr;

const SID: u64 = 0x0000_0000_0106_4e20; // TCP port 20000

fn cfg(i: usize) -> Config {
    Config {
        ca_guid: 0x0002_c903_0000_0000 + i as u64,
        hi_tid: 1 + i as u32,
        id_xor: 0x1357_0000u32.wrapping_mul(i as u32 + 1),
        ..Config::default()
    }
}

fn sim_with(link: LinkConfig, seed: u64, f: impl Fn(usize) -> Config) -> Sim {
    Sim::new(2, f, link, seed)
}

fn sim() -> Sim {
    sim_with(LinkConfig::default(), 1, cfg)
}

fn params(qpn: u32) -> ConnectParams {
    ConnectParams::rdma_cm(SID, qpn, 0x1000 + qpn, Path::roce(node_gid(0), node_gid(1)))
}

fn accept_params(qpn: u32, private_data: &[u8]) -> AcceptParams {
    AcceptParams {
        qpn,
        starting_psn: 0x2000 + qpn,
        responder_resources: 4,
        initiator_depth: 2,
        rnr_retry_count: 6,
        failover_accepted: 0,
        srq: false,
        flow_control: true,
        private_data: private_data.to_vec(),
    }
}

fn listen(sim: &mut Sim) -> CmId {
    let l = sim.node(1).create_id();
    sim.node(1).listen(l, SID, 0).unwrap();
    l
}

fn connect(sim: &mut Sim, qpn: u32) -> CmId {
    let id = sim.node(0).create_id();
    let now = sim.now();
    sim.node(0).connect(now, id, &params(qpn)).unwrap();
    id
}

/// The passive side's connect request, if one came.
fn take_request(sim: &mut Sim) -> Option<(CmId, rverbs_cm::ReqInfo)> {
    sim.events(1).into_iter().find_map(|e| match e {
        Event::ConnectRequest { id, req } => Some((id, *req)),
        _ => None,
    })
}

/// Connect, accept, RTU; returns (active ID, passive ID).
fn establish(sim: &mut Sim, qpn: u32) -> (CmId, CmId) {
    let a = connect(sim, qpn);
    sim.run_for(MS);
    let (p, _) = take_request(sim).expect("connect request");
    let now = sim.now();
    sim.node(1)
        .accept(now, p, &accept_params(qpn + 1000, b"hello"))
        .unwrap();
    sim.run_for(MS);
    let ev = sim.events(0);
    assert!(
        matches!(ev[..], [Event::ConnectResponse { id, .. }] if id == a),
        "{ev:?}"
    );
    let now = sim.now();
    sim.node(0).rtu(now, a, b"rtu").unwrap();
    sim.run_for(MS);
    let ev = sim.events(1);
    assert!(
        matches!(&ev[..], [Event::Established { id, private_data }] if *id == p && private_data.starts_with(b"rtu")),
        "{ev:?}"
    );
    (a, p)
}

#[test]
fn connect_accept_rtu_and_qp_attributes() {
    let mut sim = sim();
    listen(&mut sim);
    let a = connect(&mut sim, 0x11);
    sim.run_for(MS);
    let (p, req) = take_request(&mut sim).unwrap();
    assert_eq!(sim.node(1).state(p), Some(State::ReqRcvd));
    assert_eq!(
        (req.remote_qpn, req.starting_psn, req.service_id),
        (0x11, 0x1011, SID)
    );
    assert_eq!(req.remote_ca_guid, cfg(0).ca_guid);
    assert_eq!(req.path.remote_gid, node_gid(0));
    assert_eq!(req.path.packet_life_time, consts::CMA_IBOE_PACKET_LIFETIME);
    let now = sim.now();
    sim.node(1)
        .accept(now, p, &accept_params(0x22, b"hello"))
        .unwrap();
    sim.run_for(MS);
    let ev = sim.events(0);
    let [Event::ConnectResponse { id, rep }] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(*id, a);
    assert_eq!((rep.remote_qpn, rep.starting_psn), (0x22, 0x2022));
    // Resources are swapped to the receiver's point of view.
    assert_eq!((rep.responder_resources, rep.initiator_depth), (2, 4));
    assert!(rep.private_data.starts_with(b"hello"));
    assert_eq!(rep.private_data.len(), private_len::REP);

    // The attributes the active consumer applies before the RTU.
    let rtr = sim.node(0).qp_attr(a, QpState::Rtr).unwrap();
    assert_eq!((rtr.dest_qpn, rtr.rq_psn), (Some(0x22), Some(0x1011)));
    assert_eq!(rtr.max_dest_rd_atomic, Some(2));
    assert_eq!(rtr.ah.unwrap().remote_gid, node_gid(1));
    let rts = sim.node(0).qp_attr(a, QpState::Rts).unwrap();
    assert_eq!(
        (rts.sq_psn, rts.max_rd_atomic, rts.rnr_retry),
        (Some(0x2022), Some(4), Some(6))
    );
    // Local ACK timeout: ack_timeout(rxe ack delay 15, packet life time 16) = 17.
    assert_eq!(rts.timeout, Some(17));
    let init = sim.node(0).qp_attr(a, QpState::Init).unwrap();
    assert_eq!(init.access_flags, Some(0b1110));

    let now = sim.now();
    sim.node(0).rtu(now, a, &[]).unwrap();
    sim.run_for(MS);
    assert!(matches!(sim.events(1)[..], [Event::Established { id, .. }] if id == p));
    assert_eq!(sim.node(0).state(a), Some(State::Established));
    assert_eq!(sim.node(1).state(p), Some(State::Established));
    let prtr = sim.node(1).qp_attr(p, QpState::Rtr).unwrap();
    assert_eq!((prtr.dest_qpn, prtr.rq_psn), (Some(0x11), Some(0x2022)));
    let prts = sim.node(1).qp_attr(p, QpState::Rts).unwrap();
    assert_eq!(prts.sq_psn, Some(0x1011));
    assert_eq!(sim.node(0).stats().retries + sim.node(1).stats().retries, 0);
}

#[test]
fn disconnect_timewait_then_exit() {
    let mut sim = sim();
    listen(&mut sim);
    let (a, p) = establish(&mut sim, 1);
    let now = sim.now();
    sim.node(0).disconnect(now, a, b"bye").unwrap();
    sim.run_for(MS);
    let ev = sim.events(1);
    assert!(
        matches!(&ev[..], [Event::DisconnectRequest { id, private_data }] if *id == p && private_data.starts_with(b"bye"))
    );
    let now = sim.now();
    sim.node(1).disconnect(now, p, b"ok").unwrap();
    sim.run_for(MS);
    let ev = sim.events(0);
    assert!(
        matches!(&ev[..], [Event::Disconnected { id, timed_out: false, private_data }] if *id == a && private_data.starts_with(b"ok"))
    );
    assert_eq!(sim.node(0).state(a), Some(State::Timewait));
    // Time wait lasts 4.096 us x 2^(local ACK timeout) as the kernel rounds it.
    let tw = consts::convert_to_ns(17);
    sim.run_for(tw - 3 * MS);
    assert!(sim.events(0).is_empty());
    sim.run_for(5 * MS);
    assert!(matches!(sim.events(0)[..], [Event::TimewaitExit { id }] if id == a));
    assert!(matches!(sim.events(1)[..], [Event::TimewaitExit { id }] if id == p));
    assert_eq!(sim.node(0).state(a), Some(State::Idle));
    // An idle ID connects again.
    let now = sim.now();
    sim.node(0).connect(now, a, &params(1)).unwrap();
}

#[test]
fn lost_reqs_are_retried_and_then_unreachable() {
    let mut sim = sim();
    listen(&mut sim);
    // The first two REQs vanish: the third gets through.
    let lost = std::rc::Rc::new(std::cell::Cell::new(0));
    let l2 = lost.clone();
    sim.set_filter(move |_, _, a, _| {
        if a == attr::CM_REQ && l2.get() < 2 {
            l2.set(l2.get() + 1);
            return true;
        }
        false
    });
    connect(&mut sim, 1);
    let try_ns = consts::req_timeout_ms(16, 20) * MS;
    sim.run_for(2 * try_ns - MS);
    assert!(take_request(&mut sim).is_none());
    sim.run_for(2 * MS);
    assert!(take_request(&mut sim).is_some());
    assert_eq!(sim.node(0).stats().retries, 2);

    // Every REQ lost: 1 + 15 sends 4608 ms apart, then unreachable.
    let mut sim = sim_with(LinkConfig::default(), 2, cfg);
    listen(&mut sim);
    sim.set_filter(|_, _, a, _| a == attr::CM_REQ);
    let id = connect(&mut sim, 1);
    sim.run_for(16 * try_ns - MS);
    assert!(sim.events(0).is_empty());
    sim.run_for(2 * MS);
    let ev = sim.events(0);
    assert_eq!(
        ev,
        vec![Event::Unreachable {
            id,
            message: Unanswered::Req
        }]
    );
    assert_eq!(sim.net.filtered, 16);
    assert_eq!(sim.node(0).stats().timeouts, 1);
    assert_eq!(sim.node(0).state(id), Some(State::Idle));
}

#[test]
fn lost_reps_time_out_the_passive_side() {
    let mut sim = sim();
    listen(&mut sim);
    sim.set_filter(|_, _, a, _| a == attr::CM_REP);
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    let (p, _) = take_request(&mut sim).unwrap();
    let now = sim.now();
    sim.node(1).accept(now, p, &accept_params(2, &[])).unwrap();
    // The passive REP timer is the REQ's local CM response timeout (20: 4096 ms).
    sim.run_for(16 * 4096 * MS + MS);
    let ev = sim.events(1);
    assert!(
        ev.contains(&Event::Unreachable {
            id: p,
            message: Unanswered::Rep
        }),
        "{ev:?}"
    );
    assert_eq!(sim.net.filtered, 16);
    // Duplicate REQs meanwhile met REP_SENT and were dropped (the REP timer resends).
    assert!(sim.node(1).stats().duplicates > 0);
    sim.run_for(16 * 4608 * MS);
    let ev = sim.events(0);
    assert!(
        ev.contains(&Event::Unreachable {
            id: a,
            message: Unanswered::Req
        }),
        "{ev:?}"
    );
}

#[test]
fn a_lost_rtu_is_recovered_by_the_rep_retry() {
    let mut sim = sim();
    listen(&mut sim);
    let first = std::rc::Rc::new(std::cell::Cell::new(true));
    let f2 = first.clone();
    sim.set_filter(move |_, _, a, _| a == attr::CM_RTU && f2.replace(false));
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    let (p, _) = take_request(&mut sim).unwrap();
    let now = sim.now();
    sim.node(1).accept(now, p, &accept_params(2, &[])).unwrap();
    sim.run_for(MS);
    assert!(matches!(sim.events(0)[..], [Event::ConnectResponse { .. }]));
    let now = sim.now();
    sim.node(0).rtu(now, a, b"x").unwrap();
    sim.run_for(MS);
    assert!(sim.events(1).is_empty());
    // The REP comes again; the established active side answers it with the RTU.
    sim.run_for(4096 * MS);
    let ev = sim.events(1);
    assert!(
        matches!(&ev[..], [Event::Established { id, private_data }] if *id == p && private_data.starts_with(b"x")),
        "{ev:?}"
    );
    assert_eq!(sim.node(0).stats().duplicates, 1);
    assert!(sim.events(0).is_empty());
}

#[test]
fn lost_dreqs_end_in_a_timed_out_disconnect() {
    let mut sim = sim();
    listen(&mut sim);
    let (a, p) = establish(&mut sim, 1);
    sim.set_filter(|_, _, at, _| at == attr::CM_DREQ);
    let now = sim.now();
    sim.node(0).disconnect(now, a, &[]).unwrap();
    let try_ns = consts::req_timeout_ms(16, 20) * MS;
    sim.run_for(16 * try_ns + MS);
    let ev = sim.events(0);
    assert_eq!(
        ev,
        vec![Event::Disconnected {
            id: a,
            private_data: vec![],
            timed_out: true
        }]
    );
    assert_eq!(sim.net.filtered, 16);
    assert_eq!(sim.node(0).state(a), Some(State::Timewait));
    sim.run_for(consts::convert_to_ns(17) + MS);
    assert_eq!(sim.events(0), vec![Event::TimewaitExit { id: a }]);
    // The passive side never heard of it.
    assert_eq!(sim.node(1).state(p), Some(State::Established));
}

#[test]
fn reject_with_private_data() {
    let mut sim = sim();
    listen(&mut sim);
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    let (p, _) = take_request(&mut sim).unwrap();
    let now = sim.now();
    assert_eq!(
        sim.node(1)
            .reject(now, p, rej::CONSUMER_DEFINED, &[], &[0; 149]),
        Err(CmError::PrivateDataTooLong)
    );
    sim.node(1)
        .reject(now, p, rej::CONSUMER_DEFINED, &[], b"go away")
        .unwrap();
    sim.run_for(MS);
    let ev = sim.events(0);
    let [Event::Rejected {
        id,
        reason,
        ari,
        private_data,
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!((*id, *reason), (a, 28));
    assert!(ari.is_empty());
    assert!(private_data.starts_with(b"go away"));
    assert_eq!(private_data.len(), private_len::REJ);
    assert_eq!(sim.node(0).state(a), Some(State::Idle));
    assert_eq!(sim.node(1).state(p), Some(State::Idle));
    // No retries after the REJ.
    sim.run_for(10_000 * MS);
    assert_eq!(sim.node(0).stats().retries, 0);
}

#[test]
fn no_listener_is_rejected_invalid_service_id() {
    let mut sim = sim();
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    let ev = sim.events(0);
    assert!(
        matches!(ev[..], [Event::Rejected { id, reason: 8, .. }] if id == a),
        "{ev:?}"
    );
    assert_eq!(sim.node(1).stats().no_listener, 1);
    assert_eq!(sim.node(1).id_count(), 0);
}

#[test]
fn second_listener_on_a_service_id_is_addr_in_use() {
    let mut sim = sim();
    let l = listen(&mut sim);
    let second = sim.node(1).create_id();
    let e = sim.node(1).listen(second, SID, 10).unwrap_err();
    assert_eq!((e, e.errno()), (CmError::AddrInUse, 98));
    // Listening twice on one ID is a state error; another service ID is fine.
    assert!(matches!(
        sim.node(1).listen(l, SID + 1, 0),
        Err(CmError::InvalidState(_))
    ));
    sim.node(1).listen(second, SID + 1, 0).unwrap();
    // Once the first goes, the service ID is free again.
    let now = sim.now();
    sim.node(1).destroy(now, l).unwrap();
    let third = sim.node(1).create_id();
    sim.node(1).listen(third, SID, 0).unwrap();
}

#[test]
fn a_listener_that_goes_away() {
    let mut sim = sim();
    let l = listen(&mut sim);
    sim.hold_events(1, true);
    let pending = connect(&mut sim, 1);
    sim.run_for(MS);
    // The listener dies with a connect request its consumer never read: the request
    // is rejected (kernel cm_destroy_id in REQ_RCVD) and new REQs find no listener.
    let now = sim.now();
    sim.node(1).destroy(now, l).unwrap();
    assert!(sim.node(1).poll_event().is_none());
    sim.hold_events(1, false);
    sim.run_for(MS);
    let ev = sim.events(0);
    assert!(
        matches!(ev[..], [Event::Rejected { id, reason: 28, .. }] if id == pending),
        "{ev:?}"
    );
    let late = connect(&mut sim, 2);
    sim.run_for(MS);
    let ev = sim.events(0);
    assert!(
        matches!(ev[..], [Event::Rejected { id, reason: 8, .. }] if id == late),
        "{ev:?}"
    );
    assert_eq!(sim.node(1).id_count(), 0);
}

#[test]
fn duplicate_reqs_are_dropped_while_the_consumer_decides() {
    let mut sim = sim_with(
        LinkConfig {
            dup: 1.0,
            ..LinkConfig::default()
        },
        3,
        cfg,
    );
    listen(&mut sim);
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    let reqs: Vec<_> = sim
        .events(1)
        .into_iter()
        .filter(|e| matches!(e, Event::ConnectRequest { .. }))
        .collect();
    assert_eq!(reqs.len(), 1);
    assert_eq!(sim.node(1).stats().duplicates, 1);
    // Retries of the REQ while the consumer thinks are dropped too.
    sim.run_for(4608 * MS);
    assert_eq!(sim.node(1).stats().duplicates, 3);
    assert!(sim.net.sent >= 2);
    let _ = a;
}

#[test]
fn delayed_mra_answers_a_duplicate_req_and_extends_the_peer_timer() {
    // rdma_cm's delayed MRA (CMA_CM_MRA_SETTING): the consumer is slow, the REQ comes
    // again, the MRA tells the active side to wait 2^24 x 4.096 us more.
    let mut sim = sim_with(LinkConfig::default(), 4, |i| Config {
        auto_mra: Some(consts::CMA_MRA_SERVICE_TIMEOUT),
        ..cfg(i)
    });
    listen(&mut sim);
    let a = {
        let id = sim.node(0).create_id();
        let mut p = params(1);
        p.max_cm_retries = 1;
        let now = sim.now();
        sim.node(0).connect(now, id, &p).unwrap();
        id
    };
    sim.run_for(MS);
    let (p, _) = take_request(&mut sim).unwrap();
    assert_eq!(sim.node(1).state(p), Some(State::MraReqSent));
    // Without the MRA the active side would give up after 2 x 4608 ms.
    sim.run_for(4608 * MS);
    let ev = sim.events(0);
    assert_eq!(
        ev,
        vec![Event::MraReceived {
            id: a,
            service_timeout: 24
        }]
    );
    assert_eq!(sim.node(0).state(a), Some(State::MraReqRcvd));
    sim.run_for(30_000 * MS);
    assert!(sim.events(0).is_empty());
    let now = sim.now();
    sim.node(1).accept(now, p, &accept_params(2, &[])).unwrap();
    sim.run_for(MS);
    assert!(matches!(sim.events(0)[..], [Event::ConnectResponse { id, .. }] if id == a));
}

#[test]
fn explicit_mra_extends_the_timeout() {
    let mut sim = sim();
    listen(&mut sim);
    let id = sim.node(0).create_id();
    let mut p = params(1);
    p.max_cm_retries = 0;
    let now = sim.now();
    sim.node(0).connect(now, id, &p).unwrap();
    sim.run_for(MS);
    let (pid, _) = take_request(&mut sim).unwrap();
    let now = sim.now();
    assert_eq!(
        sim.node(1).mra(now, pid, 20, &[0; 223]),
        Err(CmError::PrivateDataTooLong)
    );
    // 2^20 x 4.096 us = 4096 ms, plus the path's 2^17: 4096 + 512 ms.
    sim.node(1).mra(now, pid, 20, b"wait").unwrap();
    assert_eq!(sim.node(1).state(pid), Some(State::MraReqSent));
    sim.run_for(MS);
    assert!(matches!(
        sim.events(0)[..],
        [Event::MraReceived {
            service_timeout: 20,
            ..
        }]
    ));
    // The REQ alone had 4608 ms; the MRA moved its deadline to 4096 + 512 ms after it.
    sim.run_for(4608 * MS - 3 * MS);
    assert!(sim.events(0).is_empty());
    let now = sim.now();
    sim.node(1)
        .accept(now, pid, &accept_params(2, &[]))
        .unwrap();
    sim.run_for(MS);
    assert!(matches!(sim.events(0)[..], [Event::ConnectResponse { .. }]));
    // An MRA is only for a REQ or REP being considered.
    let now = sim.now();
    assert!(sim.node(1).mra(now, pid, 20, &[]).is_err());
}

#[test]
fn mra_then_silence_still_times_out() {
    let mut sim = sim();
    listen(&mut sim);
    let id = sim.node(0).create_id();
    let mut p = params(1);
    p.max_cm_retries = 0;
    let now = sim.now();
    sim.node(0).connect(now, id, &p).unwrap();
    sim.run_for(MS);
    let (pid, _) = take_request(&mut sim).unwrap();
    let now = sim.now();
    sim.node(1).mra(now, pid, 20, &[]).unwrap();
    sim.run_for(4608 * MS + MS);
    let ev = sim.events(0);
    assert!(
        ev.contains(&Event::Unreachable {
            id,
            message: Unanswered::Req
        }),
        "{ev:?}"
    );
}

#[test]
fn stale_connection_is_rejected_and_the_old_one_torn_down() {
    let mut sim = sim();
    listen(&mut sim);
    let (a, p) = establish(&mut sim, 7);
    // The same QPN from the same CA on a new communication ID (a peer that restarted).
    let b = connect(&mut sim, 7);
    sim.run_for(MS);
    let ev = sim.events(0);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Rejected { id, reason: 10, .. } if *id == b)),
        "{ev:?}"
    );
    assert_eq!(sim.node(1).stats().stale, 1);
    // The passive side disconnected the old connection.
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::DisconnectRequest { id, .. } if *id == a)),
        "{ev:?}"
    );
    assert_eq!(sim.node(1).state(p), Some(State::DreqSent));
    // A stale REJ puts the active ID in time wait.
    assert_eq!(sim.node(0).state(b), Some(State::Timewait));
}

#[test]
fn a_rep_from_a_live_connections_qpn_is_rejected_stale() {
    let mut sim = sim();
    listen(&mut sim);
    let (a, _) = establish(&mut sim, 7);
    // A second connection whose passive side answers with the first one's QPN (1007).
    let b = connect(&mut sim, 8);
    sim.run_for(MS);
    let (p2, _) = take_request(&mut sim).expect("connect request");
    let now = sim.now();
    sim.node(1)
        .accept(now, p2, &accept_params(1007, b""))
        .unwrap();
    sim.run_for(MS);
    // The active side rejects the REP as stale and tears the live connection down.
    assert_eq!(sim.node(0).stats().stale, 1);
    assert_eq!(sim.node(0).state(a), Some(State::DreqSent));
    assert_ne!(sim.node(0).state(b), Some(State::Established));
    let ev = sim.events(1);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Rejected { id, reason: 10, .. } if *id == p2)),
        "{ev:?}"
    );
}

#[test]
fn backlog_full_drops_connect_requests_until_they_are_read() {
    let mut sim = sim();
    let l = sim.node(1).create_id();
    sim.node(1).listen(l, SID, 2).unwrap();
    sim.hold_events(1, true);
    for q in 0..4 {
        connect(&mut sim, 10 + q);
    }
    sim.run_for(MS);
    assert_eq!(sim.node(1).stats().backlog_full, 2);
    // No REJ: the REQs are retried.
    assert!(sim.events(0).is_empty());
    // Reading the two queued requests frees the backlog; the retries get in.
    let mut got = 0;
    while let Some(e) = sim.node(1).poll_event() {
        assert!(matches!(e, Event::ConnectRequest { .. }));
        got += 1;
    }
    assert_eq!(got, 2);
    sim.run_for(4608 * MS);
    let mut later = 0;
    while let Some(e) = sim.node(1).poll_event() {
        assert!(matches!(e, Event::ConnectRequest { .. }));
        later += 1;
    }
    assert_eq!(later, 2);
}

#[test]
fn held_connect_requests_count_until_released() {
    // A driver that queues events for its consumer takes them with poll_event_held:
    // the backlog stays taken until it says the consumer took the request.
    let mut sim = sim();
    let l = sim.node(1).create_id();
    sim.node(1).listen(l, SID, 1).unwrap();
    sim.hold_events(1, true);
    connect(&mut sim, 10);
    sim.run_for(MS);
    let first = match sim.node(1).poll_event_held() {
        Some(Event::ConnectRequest { id, .. }) => id,
        e => panic!("{e:?}"),
    };
    connect(&mut sim, 11);
    sim.run_for(MS);
    assert_eq!(sim.node(1).stats().backlog_full, 1);
    assert!(sim.node(1).poll_event_held().is_none());
    sim.node(1).backlog_release(first);
    sim.node(1).backlog_release(first); // idempotent
    sim.run_for(4608 * MS);
    assert!(matches!(
        sim.node(1).poll_event_held(),
        Some(Event::ConnectRequest { .. })
    ));
    assert_eq!(sim.node(1).stats().backlog_full, 1);
}

#[test]
fn sidr_resolves_a_ud_service() {
    let mut sim = sim();
    let usid = service_id(PortSpace::Udp, 7471);
    let l = sim.node(1).create_id();
    sim.node(1).listen(l, usid, 0).unwrap();
    let id = sim.node(0).create_id();
    let p = SidrParams {
        service_id: usid,
        remote_gid: node_gid(1),
        pkey: 0xffff,
        timeout_ms: consts::convert_to_ms(consts::CMA_CM_RESPONSE_TIMEOUT),
        max_cm_retries: consts::CMA_MAX_CM_RETRIES,
        private_data: b"udp hello".to_vec(),
    };
    let now = sim.now();
    sim.node(0).sidr_request(now, id, &p).unwrap();
    sim.run_for(MS);
    let ev = sim.events(1);
    let [Event::SidrRequest {
        id: rid,
        listener,
        service_id,
        pkey,
        private_data,
        ..
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!((*listener, *service_id, *pkey), (l, usid, 0xffff));
    assert!(private_data.starts_with(b"udp hello"));
    let now = sim.now();
    sim.node(1)
        .sidr_reply(
            now,
            *rid,
            &SidrReply {
                status: sidr_status::SUCCESS,
                qpn: 0x345,
                qkey: 0x1234_5678,
                info: vec![],
                private_data: b"welcome".to_vec(),
            },
        )
        .unwrap();
    sim.run_for(MS);
    let ev = sim.events(0);
    let [Event::SidrReply {
        id: got,
        status: 0,
        qpn: 0x345,
        qkey: 0x1234_5678,
        private_data,
        ..
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(*got, id);
    assert!(private_data.starts_with(b"welcome"));
    assert_eq!(sim.node(0).state(id), Some(State::Idle));

    // Nobody on the service: status 1 (unsupported).
    let id2 = sim.node(0).create_id();
    let now = sim.now();
    sim.node(0)
        .sidr_request(
            now,
            id2,
            &SidrParams {
                service_id: usid + 1,
                ..p.clone()
            },
        )
        .unwrap();
    sim.run_for(MS);
    assert!(matches!(
        sim.events(0)[..],
        [Event::SidrReply { status: 1, .. }]
    ));

    // Lost: retries, then unreachable.
    sim.set_filter(|_, _, a, _| a == attr::CM_SIDR_REQ);
    let id3 = sim.node(0).create_id();
    let now = sim.now();
    sim.node(0).sidr_request(now, id3, &p).unwrap();
    sim.run_for(16 * 4096 * MS + MS);
    assert_eq!(
        sim.events(0),
        vec![Event::Unreachable {
            id: id3,
            message: Unanswered::SidrReq
        }]
    );
}

#[test]
fn duplicate_sidr_reqs_are_dropped() {
    let mut sim = sim_with(
        LinkConfig {
            dup: 1.0,
            ..LinkConfig::default()
        },
        5,
        cfg,
    );
    let usid = service_id(PortSpace::Udp, 1);
    let l = sim.node(1).create_id();
    sim.node(1).listen(l, usid, 0).unwrap();
    let id = sim.node(0).create_id();
    let now = sim.now();
    sim.node(0)
        .sidr_request(
            now,
            id,
            &SidrParams {
                service_id: usid,
                remote_gid: node_gid(1),
                pkey: 0xffff,
                timeout_ms: 100,
                max_cm_retries: 2,
                private_data: vec![],
            },
        )
        .unwrap();
    sim.run_for(MS);
    let n = sim
        .events(1)
        .iter()
        .filter(|e| matches!(e, Event::SidrRequest { .. }))
        .count();
    assert_eq!(n, 1);
    assert_eq!(sim.node(1).stats().duplicates, 1);
}

#[test]
fn consumer_calls_in_the_wrong_state_and_oversized_private_data() {
    let mut sim = sim();
    let id = sim.node(0).create_id();
    let now = sim.now();
    let e = sim
        .node(0)
        .accept(now, id, &accept_params(1, &[]))
        .unwrap_err();
    assert!(
        matches!(e, CmError::InvalidState(t) if t.state == State::Idle && t.input == Input::SendRep)
    );
    assert_eq!(e.errno(), 22);
    assert!(sim.node(0).rtu(now, id, &[]).is_err());
    assert!(sim.node(0).disconnect(now, id, &[]).is_err());
    assert!(sim.node(0).reject(now, id, 28, &[], &[]).is_err());
    assert!(sim.node(0).qp_attr(id, QpState::Rtr).is_err());
    assert_eq!(sim.node(0).establish(CmId(12345)), Err(CmError::UnknownId));
    let mut p = params(1);
    p.private_data = vec![0; private_len::REQ + 1];
    assert_eq!(
        sim.node(0).connect(now, id, &p),
        Err(CmError::PrivateDataTooLong)
    );
    p.private_data = vec![0; private_len::REQ];
    p.qpn = 1 << 24;
    assert!(matches!(
        sim.node(0).connect(now, id, &p),
        Err(CmError::InvalidArgument(_))
    ));
    p.qpn = 1;
    sim.node(0).connect(now, id, &p).unwrap();
    assert!(matches!(
        sim.node(0).connect(now, id, &p),
        Err(CmError::InvalidState(_))
    ));
    let sid_id = sim.node(0).create_id();
    assert_eq!(
        sim.node(0).sidr_request(
            now,
            sid_id,
            &SidrParams {
                service_id: 1,
                remote_gid: node_gid(1),
                pkey: 0xffff,
                timeout_ms: 1,
                max_cm_retries: 0,
                private_data: vec![0; 217],
            }
        ),
        Err(CmError::PrivateDataTooLong)
    );
}

#[test]
fn destroying_a_pending_active_id_rejects_with_timeout() {
    let mut sim = sim();
    let l = listen(&mut sim);
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    let (p, _) = take_request(&mut sim).unwrap();
    let now = sim.now();
    sim.node(0).destroy(now, a).unwrap();
    sim.run_for(MS);
    // REJ reason 4 with our CA GUID as ARI finds the passive ID by remote ID.
    let ev = sim.events(1);
    assert!(
        matches!(&ev[..], [Event::Rejected { id, reason: 4, ari, .. }] if *id == p && ari[..] == cfg(0).ca_guid.to_be_bytes()),
        "{ev:?}"
    );
    assert_eq!(sim.node(0).state(a), None);
    let _ = l;
}

#[test]
fn destroying_an_established_id_sends_a_dreq() {
    let mut sim = sim();
    listen(&mut sim);
    let (a, p) = establish(&mut sim, 1);
    let now = sim.now();
    sim.node(0).destroy(now, a).unwrap();
    sim.run_for(MS);
    assert!(matches!(sim.events(1)[..], [Event::DisconnectRequest { id, .. }] if id == p));
    // The DREP for a destroyed ID is unmatched, and that is counted, not an error.
    let now = sim.now();
    sim.node(1).disconnect(now, p, &[]).unwrap();
    sim.run_for(MS);
    assert_eq!(sim.node(0).stats().unmatched, 1);
}

#[test]
fn comm_established_before_the_rtu() {
    let mut sim = sim();
    listen(&mut sim);
    sim.set_filter(|_, _, a, _| a == attr::CM_RTU);
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    let (p, _) = take_request(&mut sim).unwrap();
    let now = sim.now();
    sim.node(1).accept(now, p, &accept_params(2, &[])).unwrap();
    sim.run_for(MS);
    let now = sim.now();
    sim.node(0).rtu(now, a, &[]).unwrap();
    sim.run_for(MS);
    // Data reached the passive QP first (IB_EVENT_COMM_EST).
    sim.node(1).establish(p).unwrap();
    assert_eq!(sim.node(1).establish(p), Err(CmError::AlreadyConnected));
    assert!(matches!(sim.events(1)[..], [Event::Established { id, .. }] if id == p));
    sim.run_for(100_000 * MS);
    assert_eq!(sim.node(1).stats().retries, 0);
}

/// A lossy, duplicating, reordering link: every seed connects, disconnects and leaves
/// time wait on both sides.
#[test]
fn handshake_and_teardown_survive_a_bad_link() {
    for seed in 1..=40u64 {
        let link = LinkConfig {
            loss: 0.25,
            dup: 0.15,
            reorder: 0.3,
            ..LinkConfig::default()
        };
        let mut sim = sim_with(link, seed, cfg);
        listen(&mut sim);
        let a = connect(&mut sim, 3);
        let (mut p, mut est_a, mut est_p) = (None, false, false);
        let mut deadline = 0;
        while !(est_a && est_p) {
            sim.run_for(100 * MS);
            deadline += 1;
            assert!(deadline < 3000, "seed {seed}: stuck");
            let now = sim.now();
            for e in sim.events(1) {
                match e {
                    Event::ConnectRequest { id, .. } => {
                        assert!(p.is_none(), "seed {seed}: two connect requests");
                        p = Some(id);
                        sim.node(1).accept(now, id, &accept_params(4, &[])).unwrap();
                    }
                    Event::Established { .. } => est_p = true,
                    e => panic!("seed {seed}: passive {e:?}"),
                }
            }
            for e in sim.events(0) {
                match e {
                    Event::ConnectResponse { id, .. } => {
                        sim.node(0).rtu(now, id, &[]).unwrap();
                        est_a = true;
                    }
                    e => panic!("seed {seed}: active {e:?}"),
                }
            }
        }
        let p = p.unwrap();
        let now = sim.now();
        sim.node(0).disconnect(now, a, &[]).unwrap();
        let (mut exit_a, mut exit_p) = (false, false);
        while !(exit_a && exit_p) {
            sim.run_for(100 * MS);
            deadline += 1;
            assert!(deadline < 6000, "seed {seed}: stuck disconnecting");
            let now = sim.now();
            for e in sim.events(1) {
                match e {
                    Event::DisconnectRequest { id, .. } => {
                        sim.node(1).disconnect(now, id, &[]).unwrap()
                    }
                    Event::TimewaitExit { .. } => exit_p = true,
                    e => panic!("seed {seed}: passive {e:?}"),
                }
            }
            for e in sim.events(0) {
                match e {
                    Event::Disconnected { .. } => {}
                    Event::TimewaitExit { .. } => exit_a = true,
                    e => panic!("seed {seed}: active {e:?}"),
                }
            }
        }
        assert_eq!(sim.node(1).state(p), Some(State::Idle));
    }
}

/// One listener accepts 1,000 connections; reports the virtual and wall time taken.
#[test]
fn a_thousand_connections_on_one_listener() {
    let started = std::time::Instant::now();
    let mut sim = sim();
    listen(&mut sim);
    let n = 1000u32;
    for i in 0..n {
        connect(&mut sim, 100 + i);
    }
    let mut established = 0;
    let mut passive = std::collections::BTreeSet::new();
    while established < n {
        sim.run_for(MS);
        assert!(sim.now() < 10_000 * MS, "stuck at {established}");
        let now = sim.now();
        for e in sim.events(1) {
            match e {
                Event::ConnectRequest { id, req } => {
                    sim.node(1)
                        .accept(now, id, &accept_params(req.remote_qpn + 5000, &[]))
                        .unwrap();
                }
                Event::Established { id, .. } => {
                    assert!(passive.insert(id));
                    established += 1;
                }
                e => panic!("{e:?}"),
            }
        }
        for e in sim.events(0) {
            if let Event::ConnectResponse { id, .. } = e {
                sim.node(0).rtu(now, id, &[]).unwrap();
            }
        }
    }
    assert_eq!(sim.node(1).id_count(), 1001);
    let st = sim.node(1).stats();
    assert_eq!((st.backlog_full, st.retries, st.duplicates), (0, 0, 0));
    let wall = started.elapsed();
    println!(
        "1000 connections: {:.1} ms virtual, {:.1} ms wall ({:.0} connections/s)",
        sim.now() as f64 / 1e6,
        wall.as_secs_f64() * 1e3,
        n as f64 / wall.as_secs_f64()
    );
}

#[test]
fn the_active_side_mras_a_rep_and_answers_its_duplicates_with_the_mra() {
    let mut sim = sim();
    listen(&mut sim);
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    let (p, _) = take_request(&mut sim).unwrap();
    let now = sim.now();
    sim.node(1).accept(now, p, &accept_params(2, &[])).unwrap();
    sim.run_for(MS);
    assert!(matches!(sim.events(0)[..], [Event::ConnectResponse { .. }]));
    let now = sim.now();
    // 2^22 x 4.096 us = 16384 ms (plus the path's 2^17: 512 ms) instead of 4096 ms.
    sim.node(0).mra(now, a, 22, b"busy").unwrap();
    assert_eq!(sim.node(0).state(a), Some(State::MraRepSent));
    sim.run_for(MS);
    assert!(
        matches!(sim.events(1)[..], [Event::MraReceived { id, service_timeout: 22 }] if id == p)
    );
    assert_eq!(sim.node(1).state(p), Some(State::MraRepRcvd));
    sim.run_for(16_000 * MS);
    assert_eq!(sim.node(1).stats().retries, 0);
    // Past the extended deadline the REP comes again; the MRA answers it.
    sim.run_for(1_000 * MS);
    assert_eq!(sim.node(1).stats().retries, 1);
    assert_eq!(sim.node(0).stats().duplicates, 1);
    let now = sim.now();
    sim.node(0).rtu(now, a, &[]).unwrap();
    sim.run_for(MS);
    assert!(matches!(sim.events(1)[..], [Event::Established { id, .. }] if id == p));
}

#[test]
fn crossed_dreqs_both_end_in_timewait() {
    let mut sim = sim();
    listen(&mut sim);
    let (a, p) = establish(&mut sim, 1);
    let now = sim.now();
    sim.node(0).disconnect(now, a, &[]).unwrap();
    sim.node(1).disconnect(now, p, &[]).unwrap();
    sim.run_for(MS);
    // Each DREQ met a DREQ_SENT: both sides now owe a DREP (cm_dreq_handler).
    assert!(matches!(sim.events(0)[..], [Event::DisconnectRequest { id, .. }] if id == a));
    assert!(matches!(sim.events(1)[..], [Event::DisconnectRequest { id, .. }] if id == p));
    let now = sim.now();
    sim.node(0).disconnect(now, a, &[]).unwrap();
    sim.node(1).disconnect(now, p, &[]).unwrap();
    sim.run_for(MS);
    assert_eq!(sim.node(0).state(a), Some(State::Timewait));
    assert_eq!(sim.node(1).state(p), Some(State::Timewait));
    // No DREQ is resent once answered.
    sim.run_for(consts::convert_to_ns(17) + MS);
    assert_eq!(sim.events(0), vec![Event::TimewaitExit { id: a }]);
    assert_eq!(sim.events(1), vec![Event::TimewaitExit { id: p }]);
    assert_eq!(sim.node(0).stats().retries + sim.node(1).stats().retries, 0);
}

#[test]
fn a_dreq_before_the_rtu_ends_the_passive_rep_wait() {
    let mut sim = sim();
    listen(&mut sim);
    sim.set_filter(|_, _, a, _| a == attr::CM_RTU);
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    let (p, _) = take_request(&mut sim).unwrap();
    let now = sim.now();
    sim.node(1).accept(now, p, &accept_params(2, &[])).unwrap();
    sim.run_for(MS);
    let now = sim.now();
    assert!(matches!(sim.events(0)[..], [Event::ConnectResponse { .. }]));
    sim.node(0).rtu(now, a, &[]).unwrap();
    sim.node(0).disconnect(now, a, &[]).unwrap();
    sim.run_for(MS);
    assert!(matches!(sim.events(1)[..], [Event::DisconnectRequest { id, .. }] if id == p));
    assert_eq!(sim.node(1).state(p), Some(State::DreqRcvd));
    let now = sim.now();
    sim.node(1).disconnect(now, p, &[]).unwrap();
    sim.run_for(MS);
    assert!(matches!(
        sim.events(0)[..],
        [Event::Disconnected {
            timed_out: false,
            ..
        }]
    ));
    // The REP timer was cancelled: no REP resend, no unreachable.
    sim.run_for(100_000 * MS);
    assert_eq!(sim.node(1).stats().retries, 0);
    assert_eq!(sim.events(1), vec![Event::TimewaitExit { id: p }]);
}

#[test]
fn a_request_withdrawn_before_it_is_read_vanishes() {
    let mut sim = sim();
    listen(&mut sim);
    sim.hold_events(1, true);
    let a = connect(&mut sim, 1);
    sim.run_for(MS);
    // The active side gives up (REJ timeout) before the passive consumer reads.
    let now = sim.now();
    sim.node(0).destroy(now, a).unwrap();
    sim.run_for(MS);
    assert!(sim.node(1).poll_event().is_none());
    assert_eq!(sim.node(1).id_count(), 1, "only the listener is left");
    // And its place in the backlog is free again.
    sim.hold_events(1, false);
    connect(&mut sim, 2);
    sim.run_for(MS);
    assert!(take_request(&mut sim).is_some());
}

/// Consumers calling anything on any ID at any time over a bad link: calls fail with
/// errors, never panics; the CMs keep their timers in the future and keep working.
#[test]
fn random_consumer_calls_over_a_bad_link() {
    for seed in 1..=12u64 {
        let link = LinkConfig {
            loss: 0.2,
            dup: 0.2,
            reorder: 0.3,
            ..LinkConfig::default()
        };
        let mut sim = sim_with(link, seed, |i| Config {
            auto_mra: if i == 1 { Some(20) } else { None },
            max_backlog: 8,
            ..cfg(i)
        });
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut ids: [Vec<CmId>; 2] = [vec![], vec![]];
        let (mut ok, mut err) = (0u32, 0u32);
        for _ in 0..1500 {
            let side = (rnd() & 1) as usize;
            if ids[side].is_empty() || rnd() % 8 == 0 {
                let id = sim.node(side).create_id();
                ids[side].push(id);
            }
            let id = ids[side][rnd() as usize % ids[side].len()];
            let now = sim.now();
            let pd = vec![0xab; rnd() as usize % 240];
            let cm = sim.node(side);
            let r = match rnd() % 12 {
                0 => cm.listen(id, SID + rnd() % 3, (rnd() % 4) as u32),
                1 => {
                    let mut p = params(1 + (rnd() % 50) as u32);
                    p.service_id = SID + rnd() % 3;
                    p.path.remote_gid = node_gid(1 - side);
                    p.max_cm_retries = (rnd() % 4) as u8;
                    p.private_data.truncate(0);
                    cm.connect(now, id, &p)
                }
                2 => cm.accept(
                    now,
                    id,
                    &accept_params((rnd() % 99) as u32, &pd[..pd.len().min(196)]),
                ),
                3 => cm.rtu(now, id, &pd),
                4 => cm.reject(now, id, rej::CONSUMER_DEFINED, &[], &pd),
                5 => cm.mra(now, id, (rnd() % 32) as u8, &pd),
                6 => cm.disconnect(now, id, &pd),
                7 => cm.establish(id),
                8 => cm.destroy(now, id).map(|_| ids[side].retain(|&i| i != id)),
                9 => cm.sidr_request(
                    now,
                    id,
                    &SidrParams {
                        service_id: SID + rnd() % 3,
                        remote_gid: node_gid(1 - side),
                        pkey: 0xffff,
                        timeout_ms: 50,
                        max_cm_retries: 2,
                        private_data: pd.clone(),
                    },
                ),
                10 => cm.sidr_reply(now, id, &SidrReply::status(0)),
                _ => cm.qp_attr(id, QpState::Rts).map(|_| ()),
            };
            if r.is_ok() {
                ok += 1;
            } else {
                err += 1;
            }
            sim.run_for((rnd() % 3000) * MS);
            for (s, known) in ids.iter_mut().enumerate() {
                for e in sim.events(s) {
                    match e {
                        Event::ConnectRequest { id, .. } | Event::SidrRequest { id, .. } => {
                            known.push(id)
                        }
                        _ => {}
                    }
                }
                let now = sim.now();
                assert!(sim.node(s).poll_timeout().is_none_or(|t| t > now));
            }
        }
        assert!(ok > 100 && err > 100, "seed {seed}: {ok} ok, {err} errors");
        // Still working: a clean connection between fresh IDs.
        sim.set_link(LinkConfig::default());
        let l = sim.node(1).create_id();
        sim.node(1).listen(l, SID + 10, 0).unwrap();
        let a = sim.node(0).create_id();
        let mut p = params(777);
        p.service_id = SID + 10;
        let now = sim.now();
        sim.node(0).connect(now, a, &p).unwrap();
        sim.run_for(MS);
        let fresh = sim.events(1).into_iter().any(|e| {
            matches!(e, Event::ConnectRequest { req, .. } if req.service_id == SID + 10 && req.remote_qpn == 777)
        });
        assert!(fresh, "seed {seed}");
    }
}
