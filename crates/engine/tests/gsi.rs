//! The GSI (QP1) between simulated engines: the PMA answering over the wire, agents,
//! the automatic 0x000C answer, drops, B_Key violations with Trap 259 sent to the
//! ClassPortInfo trap destination, and the local SMP path.

use rverbs_engine::mad::gsi::{GsiDest, Registration, GSI_QKEY};
use rverbs_engine::mad::{flags, MadResult};
use rverbs_engine::net;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_wire::grh::Gid;
use rverbs_wire::mad::bm::{BKeyInfo, BKeyInfoRepr};
use rverbs_wire::mad::notice::{
    GsNotice, GsNoticeRepr, Trap259BKeyDetails, Trap259BKeyDetailsRepr,
};
use rverbs_wire::mad::pma::{ClassPortInfo, ClassPortInfoRepr, PortCounters, PortCountersRepr};
use rverbs_wire::mad::sma::{sm_attr, NodeInfo, NodeInfoRepr};
use rverbs_wire::mad::{attr, class, method, MadHeader, MadHeaderRepr, MAD_LEN};

type Mad = [u8; MAD_LEN];

fn mad(cls: u8, m: u8, attr_id: u16, tid: u64) -> Mad {
    let mut b = [0u8; MAD_LEN];
    MadHeaderRepr {
        base_version: 1,
        mgmt_class: cls,
        class_version: 1,
        method: m,
        status: 0,
        class_specific: 0,
        transaction_id: tid,
        attribute_id: attr_id,
        attribute_modifier: 0,
    }
    .emit(&mut MadHeader::new_unchecked(&mut b[..]));
    b
}

fn gid(sim: &Sim, i: usize) -> Gid {
    net::ip_to_gid(sim.addr(i))
}

fn sim(n: usize) -> Sim {
    Sim::new(n, false, LinkConfig::default(), 7)
}

fn settle(s: &mut Sim) {
    let until = s.now + 1_000_000_000;
    s.run_until(until, |_| false);
}

fn only_responses() -> Option<Registration> {
    None
}

#[test]
fn perf_get_over_the_wire() {
    let mut s = sim(2);
    let a = s.engines[0].gsi_register(only_responses()).unwrap();
    let mut req = mad(class::PERF_MGMT, method::GET, attr::PMA_PORT_COUNTERS, 0x77);
    req[65] = 1;
    let dest = GsiDest::gsi(gid(&s, 1));
    s.engines[0].gsi_send(a, dest, &req).unwrap();
    settle(&mut s);
    let r = s.engines[0].gsi_recv(a).expect("a PMA response");
    assert_eq!(r.mad[3], method::GET_RESP);
    assert_eq!(u16::from_be_bytes([r.mad[4], r.mad[5]]), 0);
    // The TID's high half is the agent's id, the low half ours.
    let tid = u64::from_be_bytes(r.mad[8..16].try_into().unwrap());
    assert_eq!((tid >> 32, tid & 0xffff_ffff), (u64::from(a.0), 0x77));
    assert_eq!((r.wc.src_qp, r.wc.qp_num), (1, 1));
    assert_eq!(r.src_gid(), gid(&s, 1));
    let pc = PortCountersRepr::parse(&PortCounters::new_unchecked(&r.mad[64..108])).unwrap();
    // B had received exactly our request (one packet of BTH 12 + DETH 8 + MAD 256 +
    // ICRC 4 = 280 bytes) when it answered, and sent nothing.
    assert_eq!((pc.port_rcv_pkts, pc.port_xmit_pkts), (1, 0));
    assert_eq!(pc.port_rcv_data, 280 / 4);
    assert_eq!(s.engines[1].counters().tx_packets, 1);
    assert_eq!(s.engines[1].mad_port().stats.gsi_received, 1);
}

#[test]
fn agents_unmatched_and_dropped() {
    let mut s = sim(2);
    let a = s.engines[0].gsi_register(only_responses()).unwrap();
    let reg = Registration {
        mgmt_class: 0x30,
        class_version: 1,
        methods: 1 << method::GET,
    };
    let b = s.engines[1].gsi_register(Some(reg)).unwrap();
    assert!(s.engines[1].gsi_register(Some(reg)).is_err());
    let dest_b = GsiDest::gsi(gid(&s, 1));
    s.engines[0]
        .gsi_send(a, dest_b, &mad(0x30, method::GET, 9, 1))
        .unwrap();
    settle(&mut s);
    let got = s.engines[1].gsi_recv(b).expect("delivered to B's agent");
    assert_eq!((got.src_gid(), got.wc.src_qp), (gid(&s, 0), 1));
    // B's agent answers to where the request came from.
    let mut resp = got.mad;
    resp[3] = method::GET_RESP;
    let back = GsiDest::gsi(got.src_gid());
    s.engines[1].gsi_send(b, back, &resp).unwrap();
    settle(&mut s);
    assert_eq!(s.engines[0].gsi_recv(a).unwrap().mad[3], method::GET_RESP);
    // Nobody registered for Set of class 0x30: the automatic 0x000C.
    s.engines[0]
        .gsi_send(a, dest_b, &mad(0x30, method::SET, 9, 2))
        .unwrap();
    settle(&mut s);
    let r = s.engines[0].gsi_recv(a).unwrap();
    assert_eq!(u16::from_be_bytes([r.mad[4], r.mad[5]]), 0x000C);
    assert_eq!(s.engines[1].mad_port().stats.gsi_unsupported_replies, 1);
    // A Send nobody takes, an SMP on QP1 and a bad base version: dropped, counted.
    for m in [
        mad(0x31, method::SEND, 9, 3),
        mad(class::SUBN_LID_ROUTED, method::GET, sm_attr::NODE_INFO, 4),
        {
            let mut m = mad(0x30, method::GET, 9, 5);
            m[0] = 2;
            m
        },
    ] {
        s.engines[0].gsi_send(a, dest_b, &m).unwrap();
    }
    settle(&mut s);
    assert!(s.engines[0].gsi_recv(a).is_none());
    assert_eq!(s.engines[1].mad_port().stats.gsi_dropped, 3);
    // A wrong Q_Key never reaches the GSI.
    let wrong = GsiDest {
        qkey: 0x1234,
        ..dest_b
    };
    s.engines[0]
        .gsi_send(a, wrong, &mad(0x30, method::GET, 9, 6))
        .unwrap();
    settle(&mut s);
    assert_eq!(s.engines[1].counters().rx_bad_qkey, 1);
    assert!(s.engines[1].gsi_recv(b).is_none());
    s.engines[1].gsi_unregister(b).unwrap();
    assert!(s.engines[1].gsi_unregister(b).is_err());
}

fn bkey_set(key_in_mad: u64, new_key: u64) -> Mad {
    let mut m = mad(class::BM, method::SET, attr::BM_BKEY_INFO, 0x99);
    m[24..32].copy_from_slice(&key_in_mad.to_be_bytes());
    BKeyInfoRepr {
        b_key: new_key,
        b_key_protect_bit: false,
        b_key_lease_period: 0,
        b_key_violations: 1,
    }
    .emit(&mut BKeyInfo::new_unchecked(&mut m[64..78]));
    m
}

#[test]
fn bad_b_key_trap_reaches_the_trap_destination() {
    let mut s = sim(3);
    let (a_gid, c_gid) = (gid(&s, 0), gid(&s, 2));
    let a = s.engines[0].gsi_register(only_responses()).unwrap();
    let c = s.engines[2]
        .gsi_register(Some(Registration {
            mgmt_class: class::BM,
            class_version: 1,
            methods: 1 << method::TRAP,
        }))
        .unwrap();
    s.engines[1].mad_port_mut().set_b_key(0x5ec2e7, false);
    let dest_b = GsiDest::gsi(gid(&s, 1));
    // Set B's trap destination to C, with the right key.
    let mut cpi_set = mad(class::BM, method::SET, attr::CLASS_PORT_INFO, 1);
    cpi_set[24..32].copy_from_slice(&0x5ec2e7u64.to_be_bytes());
    let mut cpi = ClassPortInfoRepr::parse(&ClassPortInfo::new_unchecked(&[0u8; 72][..])).unwrap();
    cpi.trap_gid = c_gid.0;
    cpi.trap_qp = 1;
    cpi.trap_q_key = GSI_QKEY;
    cpi.emit(&mut ClassPortInfo::new_unchecked(&mut cpi_set[64..136]));
    s.engines[0].gsi_send(a, dest_b, &cpi_set).unwrap();
    settle(&mut s);
    assert_eq!(s.engines[0].gsi_recv(a).unwrap().mad[3], method::GET_RESP);
    // Wrong key: no answer, a trap at C naming A.
    s.engines[0]
        .gsi_send(a, dest_b, &bkey_set(0xbad, 1))
        .unwrap();
    settle(&mut s);
    assert!(s.engines[0].gsi_recv(a).is_none());
    assert_eq!(s.engines[1].mad_port().b_key_violations(), 1);
    let t = s.engines[2].gsi_recv(c).expect("trap 259 at C");
    assert_eq!((t.mad[1], t.mad[3]), (class::BM, method::TRAP));
    assert_eq!(t.src_gid(), gid(&s, 1));
    let n = GsNoticeRepr::parse(&GsNotice::new_unchecked(&t.mad[64..144])).unwrap();
    assert_eq!(n.notice.trap_number_or_device_id, 259);
    let d = Trap259BKeyDetailsRepr::parse(&Trap259BKeyDetails::new_unchecked(
        &n.notice.data_details[..],
    ))
    .unwrap();
    assert_eq!((Gid(d.gidaddr), d.qp, d.b_key), (a_gid, 1, 0xbad));
    assert_eq!(
        (d.method, d.attribute_id),
        (method::SET, attr::BM_BKEY_INFO)
    );
    // B also keeps it for local listeners.
    assert_eq!(s.engines[1].poll_trap().unwrap().number(), 259);
    // The right key: the Set succeeds.
    s.engines[0]
        .gsi_send(a, dest_b, &bkey_set(0x5ec2e7, 0x42))
        .unwrap();
    settle(&mut s);
    let r = s.engines[0].gsi_recv(a).unwrap();
    assert_eq!(
        (r.mad[3], u16::from_be_bytes([r.mad[4], r.mad[5]])),
        (method::GET_RESP, 0)
    );
    assert_eq!(s.engines[1].mad_port().b_key(), 0x42);
}

#[test]
fn local_smp_path() {
    let mut s = sim(1);
    s.engines[0].mad_port_mut().node.node_guid = 0x1122;
    let mut dr = mad(
        class::SUBN_DIRECTED_ROUTE,
        method::GET,
        sm_attr::NODE_INFO,
        1,
    );
    dr[32..36].copy_from_slice(&[0xff; 4]);
    let out = s.engines[0].local_smp(0, &dr).unwrap();
    assert_eq!((out[3], out[4] & 0x80, out[6]), (method::GET_RESP, 0x80, 1));
    let ni = NodeInfoRepr::parse(&NodeInfo::new_unchecked(&out[64..104])).unwrap();
    assert_eq!(ni.node_guid, 0x1122);
    // A route that leaves the node is refused (no QP0 on RoCE).
    let mut far = dr;
    far[7] = 1;
    far[129] = 1;
    assert!(s.engines[0].local_smp(0, &far).is_err());
    // The M_Key is checked on the local path.
    s.engines[0].mad_port_mut().set_m_key(7, 2);
    // handle_outgoing_dr_smp fails the send with -EINVAL when process_mad says
    // FAILURE, which qib/hfi1 say for an M_Key violation.
    let e = s.engines[0].local_smp(0, &dr).unwrap_err();
    assert_eq!(e.errno, rverbs_engine::Errno::Inval, "{e}");
    assert!(e.to_string().contains("M_Key"), "{e}");
    let mut keyed = dr;
    keyed[24..32].copy_from_slice(&7u64.to_be_bytes());
    assert!(s.engines[0].local_smp(0, &keyed).is_ok());
    // process_mad with IGNORE_MKEY, as sysfs-style local readers call it.
    let (r, _) = s.engines[0].process_mad(0, flags::IGNORE_MKEY, 1, None, None, &dr);
    assert_eq!(r, MadResult::SUCCESS | MadResult::REPLY);
    assert!(s.engines[0]
        .local_smp(0, &mad(class::PERF_MGMT, method::GET, 1, 1))
        .is_err());
}

#[test]
fn bm_send_responses_and_trap_represses_are_routed_by_tid() {
    // Kernel ib_response_mad: a BM Send with IB_BM_ATTR_MOD_RESP (attribute modifier
    // bit 0) and a TrapRepress are responses: find_mad_agent routes them by the TID's
    // high half and ib_umad_write leaves their TID alone.
    let mut s = sim(2);
    let req = s.engines[0].gsi_register(only_responses()).unwrap();
    let sends = Registration {
        mgmt_class: class::BM,
        class_version: 1,
        methods: 1 << method::SEND,
    };
    let decoy = s.engines[0].gsi_register(Some(sends)).unwrap();
    let srv = s.engines[1].gsi_register(Some(sends)).unwrap();
    let request = mad(class::BM, method::SEND, 0x20, 0x55);
    let b = GsiDest::gsi(gid(&s, 1));
    s.engines[0].gsi_send(req, b, &request).unwrap();
    settle(&mut s);
    let got = s.engines[1].gsi_recv(srv).expect("the BM Send request");
    let mut resp = got.mad;
    resp[20..24].copy_from_slice(&1u32.to_be_bytes());
    s.engines[1]
        .gsi_send(srv, GsiDest::gsi(got.src_gid()), &resp)
        .unwrap();
    settle(&mut s);
    let back = s.engines[0].gsi_recv(req).expect("the response, by TID");
    assert_eq!(back.mad[8..16], got.mad[8..16]);
    assert!(s.engines[0].gsi_recv(decoy).is_none());

    // A Trap and its TrapRepress.
    let traps = Registration {
        mgmt_class: class::BM,
        class_version: 1,
        methods: 1 << method::TRAP,
    };
    let listener = s.engines[1].gsi_register(Some(traps)).unwrap();
    let represses = Registration {
        mgmt_class: class::BM,
        class_version: 1,
        methods: 1 << method::TRAP_REPRESS,
    };
    let decoy2 = s.engines[0].gsi_register(Some(represses)).unwrap();
    let trap = mad(class::BM, method::TRAP, attr::NOTICE, 0x66);
    s.engines[0].gsi_send(req, b, &trap).unwrap();
    settle(&mut s);
    let t = s.engines[1].gsi_recv(listener).expect("the trap");
    let mut repress = t.mad;
    repress[3] = method::TRAP_REPRESS;
    s.engines[1]
        .gsi_send(listener, GsiDest::gsi(t.src_gid()), &repress)
        .unwrap();
    settle(&mut s);
    let r = s.engines[0].gsi_recv(req).expect("the repress, by TID");
    assert_eq!(r.mad[3], method::TRAP_REPRESS);
    assert_eq!(
        u64::from_be_bytes(r.mad[8..16].try_into().unwrap()) >> 32,
        u64::from(req.0)
    );
    assert!(s.engines[0].gsi_recv(decoy2).is_none());
}

/// A Get of a class version the port does not have is answered once, with status 0x0004
/// (bad version), and the answer reaches the asking agent. The answer itself (a
/// GetResp of that version) was answered again by the asking port's own BMA, and so
/// on: the two ports bounced it forever and the agent never got it.
#[test]
fn a_get_of_another_class_version_gets_one_bad_version_answer() {
    let mut s = sim(2);
    let a = s.engines[0].gsi_register(only_responses()).unwrap();
    let mut m = mad(class::BM, method::GET, attr::CLASS_PORT_INFO, 5);
    m[2] = 2; // class version 2
    let dest = GsiDest::gsi(gid(&s, 1));
    s.engines[0].gsi_send(a, dest, &m).unwrap();
    settle(&mut s);
    let r = s.engines[0].gsi_recv(a).expect("the bad-version answer");
    assert_eq!((r.mad[2], r.mad[3]), (2, method::GET_RESP));
    assert_eq!(u16::from_be_bytes([r.mad[4], r.mad[5]]), 0x0004);
    settle(&mut s);
    let tx = |s: &Sim, i: usize| s.engines[i].counters().tx_packets;
    assert_eq!((tx(&s, 0), tx(&s, 1)), (1, 1));
}

/// A response of another class version (here a PMA GetResp of version 2) is not
/// answered: it goes on to the agents (none here), and nothing is sent back.
#[test]
fn a_response_of_another_class_version_is_not_answered() {
    let mut s = sim(2);
    let a = s.engines[0].gsi_register(only_responses()).unwrap();
    for (k, (class, method)) in [
        (class::PERF_MGMT, method::GET_RESP),
        (class::BM, method::GET_RESP),
        (class::BM, method::TRAP_REPRESS),
        (class::PERF_MGMT, method::TRAP),
    ]
    .into_iter()
    .enumerate()
    {
        let mut m = mad(class, method, attr::PMA_PORT_COUNTERS, 0x42 + k as u64);
        m[2] = 2;
        let dest = GsiDest::gsi(gid(&s, 1));
        s.engines[0].gsi_send(a, dest, &m).unwrap();
    }
    settle(&mut s);
    settle(&mut s);
    assert_eq!(s.engines[0].counters().tx_packets, 4);
    assert_eq!(s.engines[1].counters().tx_packets, 0);
}

#[test]
fn send_as_is_keeps_the_transaction_id() {
    // A CM agent on B (class 0x07, version 2, Send); A sends it two CM MADs, one
    // stamped with A's agent id, one as is (as the CM echoes a request's TID).
    let mut s = sim(2);
    let a = s.engines[0].gsi_register(only_responses()).unwrap();
    let b = s.engines[1]
        .gsi_register(Some(Registration {
            mgmt_class: class::CM,
            class_version: 2,
            methods: 1 << method::SEND,
        }))
        .unwrap();
    let dest = GsiDest::gsi(gid(&s, 1));
    let mut m = mad(class::CM, method::SEND, 0x0013, 0xdead_beef_0000_0042);
    m[2] = 2;
    s.engines[0].gsi_send(a, dest, &m).unwrap();
    s.engines[0].gsi_send_as_is(a, dest, &m).unwrap();
    settle(&mut s);
    let tid =
        |r: &rverbs_engine::mad::gsi::GsiRecv| u64::from_be_bytes(r.mad[8..16].try_into().unwrap());
    let first = s.engines[1].gsi_recv(b).expect("the stamped MAD");
    assert_eq!(tid(&first), (u64::from(a.0) << 32) | 0x42);
    let second = s.engines[1].gsi_recv(b).expect("the MAD as is");
    assert_eq!(tid(&second), 0xdead_beef_0000_0042);
}
