//! `process_mad` result codes, status codes, key rules and trap fields.

use super::*;
use crate::types::{WcFlags, WcOpcode};
use rverbs_wire::mad::bm::{BKeyInfo, BKeyInfoRepr};
use rverbs_wire::mad::notice::{
    GsNotice, GsNoticeRepr, Notice, NoticeRepr, Trap256Details, Trap256DetailsRepr,
    Trap259BKeyDetails, Trap259BKeyDetailsRepr,
};
use rverbs_wire::mad::pma::{
    capability, ClassPortInfo, ClassPortInfoRepr, PortCounters, PortCountersExtended,
    PortCountersExtendedRepr, PortCountersRepr,
};
use rverbs_wire::mad::sma::{sm_attr, NodeInfo, NodeInfoRepr, PortInfo, PortInfoRepr};
use rverbs_wire::mad::{class, MadHeaderRepr};

const SEC: Nanos = 1_000_000_000;

fn port() -> MadPort {
    MadPort::new(NodeIdentity {
        node_guid: 0x0002_c9ff_fe00_0001,
        description: "node-a".into(),
        vendor_id: 0x1234,
        device_id: 7,
        revision: 3,
    })
}

fn mad(class: u8, m: u8, attr_id: u16, attr_mod: u32) -> Mad {
    let mut b = [0u8; MAD_LEN];
    MadHeaderRepr {
        base_version: 1,
        mgmt_class: class,
        class_version: 1,
        method: m,
        status: 0,
        class_specific: 0,
        transaction_id: 0x1234_5678_9abc,
        attribute_id: attr_id,
        attribute_modifier: attr_mod,
    }
    .emit(&mut MadHeader::new_unchecked(&mut b[..]));
    b
}

fn pc_get(port_select: u8) -> Mad {
    let mut m = mad(class::PERF_MGMT, method::GET, attr::PMA_PORT_COUNTERS, 0);
    m[65] = port_select;
    m
}

fn status_of(m: &Mad) -> u16 {
    u16::from_be_bytes([m[4], m[5]])
}

fn run(p: &mut MadPort, c: &Counters, flags: u32, m: &Mad) -> (MadResult, Mad) {
    p.process_mad(0, c, flags, PORT, None, None, m)
}

const REPLIED: MadResult = MadResult(1 | 2);
const CONSUMED: MadResult = MadResult(1 | 4);

#[test]
fn result_codes() {
    let mut p = port();
    let c = Counters::default();
    assert_eq!(run(&mut p, &c, 0, &pc_get(1)).0, REPLIED);
    let mut resp = pc_get(1);
    resp[3] = method::GET_RESP;
    assert_eq!(run(&mut p, &c, 0, &resp).0, MadResult::SUCCESS);
    let mut bad_base = pc_get(1);
    bad_base[0] = 2;
    assert_eq!(run(&mut p, &c, 0, &bad_base).0, MadResult::FAILURE);
    // A port the device does not have (it has port 1 only): nothing is answered,
    // where port 1's counters were, as port 2's.
    for port in [0, 2, 255] {
        let (r, out) = p.process_mad(0, &c, 0, port, None, None, &pc_get(port));
        assert_eq!((r, out), (MadResult::FAILURE, pc_get(port)));
    }
    // A class the device does not implement is left to the agents.
    assert_eq!(
        run(&mut p, &c, 0, &mad(class::CM, method::SEND, 0x10, 0)).0,
        MadResult::SUCCESS
    );
    // An SMP dropped for its M_Key is a FAILURE (qib/hfi1 process_subn); a BM MAD
    // dropped for its B_Key is consumed.
    p.set_m_key(9, 0);
    let smp = mad(class::SUBN_LID_ROUTED, method::SET, sm_attr::PORT_INFO, 0);
    assert_eq!(run(&mut p, &c, 0, &smp).0, MadResult::FAILURE);
    assert_eq!(p.stats.mkey_drops, 1);
    assert!(MadResult(7).contains(CONSUMED) && !MadResult(1).contains(REPLIED));
}

#[test]
fn status_codes() {
    let mut p = port();
    let c = Counters::default();
    let mut v2 = pc_get(1);
    v2[2] = 2;
    let (r, o) = run(&mut p, &c, 0, &v2);
    assert_eq!(
        (r, status_of(&o), o[3]),
        (REPLIED, 0x0004, method::GET_RESP)
    );
    // The same for the SMA (NodeInfo) and the BMA (ClassPortInfo); a class the port does
    // not answer is left alone whatever its version.
    for (cl, attr) in [(class::SUBN_LID_ROUTED, 0x0011), (class::BM, 0x0001)] {
        let mut m = mad(cl, method::GET, attr, 0);
        m[2] = 2;
        let (r, o) = run(&mut p, &c, 0, &m);
        assert_eq!(
            (r, status_of(&o), o[3]),
            (REPLIED, 0x0004, method::GET_RESP),
            "class {cl:#x}"
        );
    }
    let mut other = mad(0x30, method::GET, 0x0001, 0);
    other[2] = 2;
    assert_eq!(run(&mut p, &c, 0, &other).0, MadResult::SUCCESS);
    let (_, o) = run(&mut p, &c, 0, &mad(class::PERF_MGMT, 0x04, 0x12, 0));
    assert_eq!(status_of(&o), 0x0008);
    let (_, o) = run(
        &mut p,
        &c,
        0,
        &mad(class::PERF_MGMT, method::GET, 0x0099, 0),
    );
    assert_eq!(status_of(&o), 0x000C);
    let (_, o) = run(&mut p, &c, 0, &pc_get(2));
    assert_eq!((status_of(&o), o[65]), (0x001C, 2));
    let mut modded = pc_get(1);
    modded[23] = 1;
    assert_eq!(status_of(&run(&mut p, &c, 0, &modded).1), 0x001C);
    let (_, o) = run(&mut p, &c, 0, &pc_get(pma::ALL_PORTS));
    assert_eq!(status_of(&o), 0);
    // SMA: unsupported attribute and method, bad port.
    let (_, o) = run(
        &mut p,
        &c,
        0,
        &mad(class::SUBN_LID_ROUTED, method::GET, 0x0020, 0),
    );
    assert_eq!(status_of(&o), 0x000C);
    let (_, o) = run(
        &mut p,
        &c,
        0,
        &mad(class::SUBN_LID_ROUTED, method::SET, sm_attr::NODE_INFO, 0),
    );
    assert_eq!(status_of(&o), 0x000C);
    let (_, o) = run(
        &mut p,
        &c,
        0,
        &mad(class::SUBN_LID_ROUTED, 0x04, sm_attr::NODE_INFO, 0),
    );
    assert_eq!(status_of(&o), 0x0008);
    let (_, o) = run(
        &mut p,
        &c,
        0,
        &mad(class::SUBN_LID_ROUTED, method::GET, sm_attr::PORT_INFO, 2),
    );
    assert_eq!(status_of(&o), 0x001C);
    // Directed route replies carry the D bit.
    let mut dr = mad(class::SUBN_DIRECTED_ROUTE, method::GET, 0x0020, 0);
    dr[6] = 1;
    let (_, o) = run(&mut p, &c, 0, &dr);
    assert_eq!(status_of(&o), 0x800C);
}

#[test]
fn unmatched_responses() {
    let get = mad(0x30, method::GET, 5, 0);
    let r = unmatched_response(&get).unwrap();
    assert_eq!((r[3], status_of(&r)), (method::GET_RESP, 0x000C));
    assert_eq!(&r[8..16], &get[8..16]);
    assert!(unmatched_response(&mad(0x30, method::SET, 5, 0)).is_some());
    for m in [method::SEND, method::TRAP, method::GET_RESP, method::REPORT] {
        assert!(unmatched_response(&mad(0x30, m, 5, 0)).is_none());
    }
    let dr = unmatched_response(&mad(class::SUBN_DIRECTED_ROUTE, method::GET, 5, 0)).unwrap();
    assert_eq!(status_of(&dr), 0x800C);
}

#[test]
fn pma_class_port_info_has_perfquery_bits() {
    let mut p = port();
    let (r, o) = run(
        &mut p,
        &Counters::default(),
        0,
        &mad(class::PERF_MGMT, method::GET, 1, 0),
    );
    assert_eq!(r, REPLIED);
    let cpi = ClassPortInfoRepr::parse(&ClassPortInfo::new_unchecked(&o[64..136])).unwrap();
    assert_eq!((cpi.base_version, cpi.class_version), (1, 1));
    // perfquery.c: AllPortSelect (bit 8), ExtWidth (bit 9), NOIETF (bit 10), and
    // IsQP1DropSupported (bit 15), without which `perfquery -R` never clears
    // QP1Dropped.
    assert_eq!(&o[66..68], &[0x87, 0x00]);
    assert_ne!(cpi.capability_mask & capability::PM_IS_QP1_DROP_SUP, 0);
    // perfquery reads CapabilityMask2 as ntohl(bytes 4..8) >> 5.
    assert_eq!(u32::from_be_bytes(o[68..72].try_into().unwrap()) >> 5, 2);
    assert_ne!(cpi.capability_mask & capability::PM_ALL_PORT_SELECT, 0);
    assert_eq!(
        cpi.capability_mask2,
        capability::PM2_IS_ADDL_PORT_CTRS_EXT_SUP
    );
}

fn traffic() -> Counters {
    Counters {
        tx_packets: 10,
        tx_bytes: 4003,
        rx_packets: 7,
        rx_bytes: 2800,
        rx_icrc_errors: 2,
        rx_malformed: 1,
        ..Default::default()
    }
}

fn read_pc(o: &Mad) -> PortCountersRepr {
    PortCountersRepr::parse(&PortCounters::new_unchecked(&o[64..108])).unwrap()
}

#[test]
fn port_counters_from_engine_counters() {
    let mut p = port();
    let c = traffic();
    let (_, o) = run(&mut p, &c, 0, &pc_get(1));
    let pc = read_pc(&o);
    assert_eq!(pc.port_xmit_data, 4003 / 4);
    assert_eq!(pc.port_rcv_data, 700);
    assert_eq!((pc.port_xmit_pkts, pc.port_rcv_pkts), (10, 7));
    assert_eq!(pc.port_rcv_errors, 3);
    // libibmad fields.c: PortXmitData {192,32}, PortRcvErrors BITSOFFS(64,16).
    assert_eq!(&o[64 + 24..64 + 28], &1000u32.to_be_bytes());
    assert_eq!(&o[64 + 8..64 + 10], &3u16.to_be_bytes());
}

#[test]
fn port_counters_saturate() {
    let mut p = port();
    let c = Counters {
        tx_bytes: 1 << 40,
        rx_packets: 1 << 33,
        rx_icrc_errors: 70_000,
        ..Default::default()
    };
    let pc = read_pc(&run(&mut p, &c, 0, &pc_get(1)).1);
    assert_eq!(pc.port_xmit_data, u32::MAX);
    assert_eq!(pc.port_rcv_pkts, u32::MAX);
    assert_eq!(pc.port_rcv_errors, u16::MAX);
    let mut e = mad(
        class::PERF_MGMT,
        method::GET,
        attr::PMA_PORT_COUNTERS_EXT,
        0,
    );
    e[65] = 1;
    let (_, o) = run(&mut p, &c, 0, &e);
    let x =
        PortCountersExtendedRepr::parse(&PortCountersExtended::new_unchecked(&o[64..])).unwrap();
    assert_eq!(x.port_xmit_data, 1 << 38);
    assert_eq!(x.port_rcv_pkts, 1 << 33);
    assert_eq!(x.port_unicast_rcv_pkts, 1 << 33);
    assert_eq!(x.port_rcv_errors, 70_000);
    // libibmad: PortXmitData (ext) {64,64}.
    assert_eq!(&o[64 + 8..64 + 16], &(1u64 << 38).to_be_bytes());
}

#[test]
fn set_clears_by_counter_select() {
    let mut p = port();
    let mut c = traffic();
    let mut set = pc_get(1);
    set[3] = method::SET;
    set[66..68].copy_from_slice(&(pma_sel::PORT_XMIT_DATA | pma_sel::PORT_RCV_PKTS).to_be_bytes());
    let (r, o) = run(&mut p, &c, 0, &set);
    assert_eq!(r, REPLIED);
    let pc = read_pc(&o);
    assert_eq!((pc.port_xmit_data, pc.port_rcv_pkts), (0, 0));
    assert_eq!(
        (pc.port_rcv_data, pc.port_xmit_pkts, pc.port_rcv_errors),
        (700, 10, 3)
    );
    c.tx_bytes += 40;
    c.rx_packets += 1;
    let pc = read_pc(&run(&mut p, &c, 0, &pc_get(1)).1);
    assert_eq!((pc.port_xmit_data, pc.port_rcv_pkts), (10, 1));
    // A Set with a bad PortSelect clears nothing.
    let mut bad = set;
    bad[65] = 3;
    bad[66..68].copy_from_slice(&0xffffu16.to_be_bytes());
    assert_eq!(status_of(&run(&mut p, &c, 0, &bad).1), 0x001C);
    assert_eq!(
        read_pc(&run(&mut p, &c, 0, &pc_get(1)).1).port_rcv_data,
        700
    );
    // Extended Set: bit 1 clears PortRcvData.
    let mut ext = mad(
        class::PERF_MGMT,
        method::SET,
        attr::PMA_PORT_COUNTERS_EXT,
        0,
    );
    ext[65] = 1;
    ext[66..68].copy_from_slice(&pma::ext_select::PORT_RCV_DATA.to_be_bytes());
    run(&mut p, &c, 0, &ext);
    assert_eq!(read_pc(&run(&mut p, &c, 0, &pc_get(1)).1).port_rcv_data, 0);
    assert_eq!(p.pma_totals(&c).rcv_bytes, 0);
}

use rverbs_wire::mad::pma::counter_select as pma_sel;

fn smp(m: u8, attr_id: u16, key: u64) -> Mad {
    let mut b = mad(class::SUBN_LID_ROUTED, m, attr_id, 0);
    b[24..32].copy_from_slice(&key.to_be_bytes());
    b
}

fn port_info(o: &Mad) -> PortInfoRepr {
    PortInfoRepr::parse(&PortInfo::new_unchecked(&o[64..128])).unwrap()
}

#[test]
fn node_info_desc_guids_pkeys() {
    let mut p = port();
    let c = Counters::default();
    let (r, o) = run(&mut p, &c, 0, &smp(method::GET, sm_attr::NODE_INFO, 0));
    assert_eq!(r, REPLIED);
    let ni = NodeInfoRepr::parse(&NodeInfo::new_unchecked(&o[64..104])).unwrap();
    assert_eq!((ni.node_type, ni.num_ports, ni.local_port_num), (1, 1, 1));
    assert_eq!(
        (ni.node_guid, ni.port_guid),
        (0x0002_c9ff_fe00_0001, 0x0002_c9ff_fe00_0001)
    );
    assert_eq!((ni.vendor_id, ni.device_id, ni.revision), (0x1234, 7, 3));
    let (_, o) = run(&mut p, &c, 0, &smp(method::GET, sm_attr::NODE_DESC, 0));
    assert_eq!(&o[64..70], b"node-a");
    assert!(o[70..128].iter().all(|&b| b == 0));
    let (_, o) = run(&mut p, &c, 0, &smp(method::GET, sm_attr::PKEY_TABLE, 0));
    assert_eq!(&o[64..66], &[0xff, 0xff]);
    let mut blk = smp(method::GET, sm_attr::PKEY_TABLE, 0);
    blk[23] = 1;
    assert_eq!(status_of(&run(&mut p, &c, 0, &blk).1), 0x001C);
    // GUIDInfo: entry 0 is the port GUID (read-only), 1-7 settable.
    let mut g = smp(method::SET, sm_attr::GUID_INFO, 0);
    g[64..72].copy_from_slice(&5u64.to_be_bytes());
    g[72..80].copy_from_slice(&0xabcdu64.to_be_bytes());
    let (_, o) = run(&mut p, &c, 0, &g);
    assert_eq!(&o[64..72], &0x0002_c9ff_fe00_0001u64.to_be_bytes());
    assert_eq!(&o[72..80], &0xabcdu64.to_be_bytes());
    // No GUID: NodeInfo is an invalid field (qib).
    let mut anon = MadPort::new(NodeIdentity::default());
    assert_eq!(
        status_of(&run(&mut anon, &c, 0, &smp(method::GET, sm_attr::NODE_INFO, 0)).1),
        0x001C
    );
}

#[test]
fn port_info_set_and_get() {
    let mut p = port();
    let c = Counters {
        rx_bad_qkey: 4,
        rx_bad_pkey: 2,
        ..Default::default()
    };
    let (_, o) = run(&mut p, &c, 0, &smp(method::GET, sm_attr::PORT_INFO, 0));
    let pi = port_info(&o);
    assert_eq!(
        (pi.port_state, pi.port_phys_state, pi.local_port_num),
        (4, 5, 1)
    );
    assert_eq!((pi.q_key_violations, pi.p_key_violations), (4, 2));
    assert_eq!(pi.capability_mask, sma::PORT_CAPABILITIES);
    let mut set = smp(method::SET, sm_attr::PORT_INFO, 0);
    let mut w = pi;
    w.m_key = 0x77;
    w.m_key_protect_bits = 2;
    w.m_key_lease_period = 5;
    w.lid = 9;
    w.q_key_violations = 0;
    w.p_key_violations = 1;
    w.emit(&mut PortInfo::new_unchecked(&mut set[64..128]));
    let (r, o) = run(&mut p, &c, 0, &set);
    assert_eq!(r, REPLIED);
    let pi = port_info(&o);
    assert_eq!(
        (
            pi.m_key,
            pi.m_key_protect_bits,
            pi.m_key_lease_period,
            pi.lid
        ),
        (0x77, 2, 5, 9)
    );
    assert_eq!((pi.q_key_violations, pi.p_key_violations), (0, 2));
    // A PortState the soft link cannot take: invalid field, nothing applied.
    let mut bad = set;
    bad[64 + 24..64 + 32].copy_from_slice(&0u64.to_be_bytes());
    bad[24..32].copy_from_slice(&0x77u64.to_be_bytes());
    bad[64 + 32] = (bad[64 + 32] & 0xf0) | 1;
    let (_, o) = run(&mut p, &c, 0, &bad);
    assert_eq!(status_of(&o), 0x001C);
    assert_eq!(p.m_key(), 0x77);
}

#[test]
fn m_key_protect_levels() {
    let c = Counters::default();
    for (level, get_ok, key_shown) in [
        (0u8, true, true),
        (1, true, false),
        (2, false, false),
        (3, false, false),
    ] {
        let mut p = port();
        p.set_m_key(0x55, level);
        let (r, o) = run(&mut p, &c, 0, &smp(method::GET, sm_attr::PORT_INFO, 0x66));
        assert_eq!(r == REPLIED, get_ok, "level {level}");
        if get_ok {
            assert_eq!(port_info(&o).m_key == 0x55, key_shown, "level {level}");
        } else {
            assert_eq!(r, MadResult::FAILURE);
            assert_eq!(p.m_key_violations(), 1);
        }
        // A Set with the wrong key is a violation at every level.
        let (r, _) = run(&mut p, &c, 0, &smp(method::SET, sm_attr::PORT_INFO, 0x66));
        assert_eq!(r, MadResult::FAILURE, "level {level}");
        // The right key, IGNORE_MKEY, or a zero port key always pass.
        assert_eq!(
            run(&mut p, &c, 0, &smp(method::GET, sm_attr::PORT_INFO, 0x55)).0,
            REPLIED
        );
        assert_eq!(
            run(
                &mut p,
                &c,
                flags::IGNORE_MKEY,
                &smp(method::GET, sm_attr::PORT_INFO, 1)
            )
            .0,
            REPLIED
        );
    }
    let mut p = port();
    assert_eq!(
        run(&mut p, &c, 0, &smp(method::SET, sm_attr::PORT_INFO, 0x99)).0,
        REPLIED
    );
}

#[test]
fn m_key_violations_saturate_and_lease_expires() {
    let c = Counters::default();
    let mut p = port();
    p.set_m_key(1, 2);
    p.sma.m_key_violations = 0xfffe;
    p.sma.lease_period = 2;
    let bad = smp(method::GET, sm_attr::NODE_INFO, 2);
    assert_eq!(
        p.process_mad(0, &c, 0, PORT, None, None, &bad).0,
        MadResult::FAILURE
    );
    assert_eq!(
        p.process_mad(SEC, &c, 0, PORT, None, None, &bad).0,
        MadResult::FAILURE
    );
    assert_eq!(p.m_key_violations(), 0xffff);
    // The lease started at the first violation ends at 2 s: protect bits drop to 0 and
    // the Get goes through.
    assert_eq!(
        p.process_mad(2 * SEC, &c, 0, PORT, None, None, &bad).0,
        REPLIED
    );
    assert_eq!(p.sma.protect_bits, 0);
    // A valid Get cancels a running lease.
    p.set_m_key(1, 2);
    p.process_mad(3 * SEC, &c, 0, PORT, None, None, &bad);
    assert!(p.sma.lease_deadline.is_some());
    p.process_mad(
        3 * SEC,
        &c,
        0,
        PORT,
        None,
        None,
        &smp(method::GET, sm_attr::NODE_INFO, 1),
    );
    assert!(p.sma.lease_deadline.is_none());
    assert_eq!(
        p.process_mad(9 * SEC, &c, 0, PORT, None, None, &bad).0,
        MadResult::FAILURE
    );
}

#[test]
fn trap_256_fields_and_rate_limit() {
    let c = Counters::default();
    let mut p = port();
    p.set_m_key(0x1111, 2);
    p.sma.lid = 0x21;
    let mut dr = mad(
        class::SUBN_DIRECTED_ROUTE,
        method::SET,
        sm_attr::PORT_INFO,
        1,
    );
    dr[24..32].copy_from_slice(&0xbadu64.to_be_bytes());
    dr[7] = 33; // hop count above the 30 the notice holds
    dr[32..34].copy_from_slice(&0xffffu16.to_be_bytes());
    for i in 0..64 {
        dr[192 + i] = i as u8;
    }
    assert_eq!(
        p.process_mad(0, &c, 0, PORT, None, None, &dr).0,
        MadResult::FAILURE
    );
    let t = p.poll_trap().unwrap();
    assert_eq!(
        (t.class(), t.number(), t.mad[3]),
        (class::SUBN_LID_ROUTED, 256, method::TRAP)
    );
    assert_eq!(u16::from_be_bytes([t.mad[16], t.mad[17]]), attr::NOTICE);
    let n = NoticeRepr::parse(&Notice::new_unchecked(&t.mad[64..128])).unwrap();
    assert!(n.is_generic);
    assert_eq!(
        (n.notice_type, n.producer_type_or_vendor_id, n.issuer_lid),
        (2, 1, 0x21)
    );
    let d = Trap256DetailsRepr::parse(&Trap256Details::new_unchecked(&n.data_details[..])).unwrap();
    assert_eq!(
        (d.lidaddr, d.dr_slid, d.method),
        (0x21, 0xffff, method::SET)
    );
    assert_eq!(
        (d.attribute_id, d.attribute_modifier, d.m_key),
        (sm_attr::PORT_INFO, 1, 0xbad)
    );
    assert!(d.dr_notice && d.dr_path_truncated);
    assert_eq!(d.dr_hop_count, 30);
    assert_eq!(d.dr_notice_return_path[29], 29);
    // Rate limit: SubnetTimeOut 18 is 4.096 us * 2^18 = 1.07 s.
    assert_eq!(
        p.process_mad(SEC, &c, 0, PORT, None, None, &dr).0,
        MadResult::FAILURE
    );
    assert!(p.poll_trap().is_none());
    assert_eq!(p.stats.traps_suppressed, 1);
    p.process_mad(2 * SEC, &c, 0, PORT, None, None, &dr);
    assert!(p.poll_trap().is_some());
    assert_eq!(p.m_key_violations(), 3);
}

#[test]
fn directed_route_hop_rules_of_a_ca() {
    let fresh = |hop_ptr: u8, hop_cnt: u8, dir: bool| {
        let mut m = mad(
            class::SUBN_DIRECTED_ROUTE,
            method::GET,
            sm_attr::NODE_INFO,
            0,
        );
        m[6] = hop_ptr;
        m[7] = hop_cnt;
        if dir {
            m[4] |= 0x80;
        }
        m[32..36].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        m
    };
    // C14-9:3 then C14-9:4: a 0-hop SMP ends at the local SMA.
    let mut m = fresh(0, 0, false);
    assert!(sma::dr_smp_send(&mut m, 1));
    assert_eq!(m[6], 1);
    assert!(sma::dr_is_local(&m));
    // ... only with a permissive DrDLID.
    let mut m = fresh(0, 0, false);
    m[34..36].copy_from_slice(&[0, 5]);
    assert!(!sma::dr_smp_send(&mut m, 1));
    // C14-9:1: first hop must leave through this port.
    let mut m = fresh(0, 1, false);
    m[129] = 1;
    assert!(sma::dr_smp_send(&mut m, 1));
    assert!(!sma::dr_is_local(&m));
    let mut m = fresh(0, 1, false);
    m[129] = 2;
    assert!(!sma::dr_smp_send(&mut m, 1));
    // C14-9:2: a CA never forwards mid-path; C14-9:5 unreasonable pointer.
    assert!(!sma::dr_smp_send(&mut fresh(1, 3, false), 1));
    assert!(!sma::dr_smp_send(&mut fresh(7, 3, false), 1));
    // Returning: C14-13:1, :2, :3, :4.
    let mut m = fresh(3, 2, true);
    m[194] = 1;
    assert!(sma::dr_smp_send(&mut m, 1));
    assert_eq!(m[6], 2);
    assert!(!sma::dr_smp_send(&mut fresh(2, 3, true), 1));
    let mut m = fresh(1, 1, true);
    assert!(sma::dr_smp_send(&mut m, 1));
    assert_eq!(m[6], 0);
    assert!(sma::dr_smp_send(&mut fresh(0, 1, true), 1));
    // Hop counts beyond the 64-entry paths are discarded, in both directions
    // (fuzz-found: a returning SMP with hop count 255 indexed past the path).
    assert!(!sma::dr_smp_send(&mut fresh(255, 254, true), 1));
    assert!(!sma::dr_smp_send(&mut fresh(64, 64, false), 1));
    assert!(sma::dr_smp_send(&mut fresh(0, 63, true), 1));
}

fn wc_from(src_qp: u32, slid: u16) -> Wc {
    Wc {
        opcode: WcOpcode::Recv,
        qp_num: 1,
        src_qp,
        slid,
        wc_flags: WcFlags::GRH,
        ..Wc::default()
    }
}

fn grh_v4(src: [u8; 4], dst: [u8; 4]) -> GrhArea {
    let mut g = [0u8; 40];
    g[20] = 0x45;
    g[32..36].copy_from_slice(&src);
    g[36..40].copy_from_slice(&dst);
    g
}

fn bm(m: u8, attr_id: u16, key: u64) -> Mad {
    let mut b = mad(class::BM, m, attr_id, 0);
    b[24..32].copy_from_slice(&key.to_be_bytes());
    b
}

fn bkey_info(o: &Mad) -> BKeyInfoRepr {
    BKeyInfoRepr::parse(&BKeyInfo::new_unchecked(&o[64..78])).unwrap()
}

#[test]
fn b_key_rules_and_trap_259() {
    let c = Counters::default();
    let mut p = port();
    p.set_b_key(0xb0b, false);
    let wc = wc_from(0x42, 7);
    let grh = grh_v4([127, 0, 0, 2], [127, 0, 0, 3]);
    let mut set = bm(method::SET, attr::BM_BKEY_INFO, 0xdead);
    set[20..24].copy_from_slice(&0u32.to_be_bytes());
    let r = p.process_mad(0, &c, 0, PORT, Some(&wc), Some(&grh), &set).0;
    assert_eq!(r, CONSUMED);
    assert_eq!(
        (p.b_key_violations(), p.stats.bkey_drops, p.b_key()),
        (1, 1, 0xb0b)
    );
    let t = p.poll_trap().unwrap();
    assert_eq!(
        (t.class(), t.number(), t.mad[3]),
        (class::BM, 259, method::TRAP)
    );
    let n = GsNoticeRepr::parse(&GsNotice::new_unchecked(&t.mad[64..144])).unwrap();
    assert!(n.notice.is_generic);
    assert_eq!(n.notice.notice_type, 2);
    assert_eq!(n.notice.producer_type_or_vendor_id, 1);
    assert_eq!(n.notice.trap_number_or_device_id, 259);
    assert_eq!(u16::from_be_bytes([t.mad[16], t.mad[17]]), attr::NOTICE);
    assert_eq!(
        Gid(n.issuer_gid),
        Gid::from(std::net::Ipv4Addr::new(127, 0, 0, 3))
    );
    let d = Trap259BKeyDetailsRepr::parse(&Trap259BKeyDetails::new_unchecked(
        &n.notice.data_details[..],
    ))
    .unwrap();
    assert_eq!((d.lidaddr, d.qp, d.method), (7, 0x42, method::SET));
    assert_eq!(
        (d.attribute_id, d.attribute_modifier, d.b_key),
        (attr::BM_BKEY_INFO, 0, 0xdead)
    );
    assert_eq!(
        Gid(d.gidaddr),
        Gid::from(std::net::Ipv4Addr::new(127, 0, 0, 2))
    );
    // Byte positions (rdma-core ib_types.h ntc_bkey_259): QP at details 11..14,
    // B_Key at 14..22, GID at 22..38; details start at data byte 10.
    assert_eq!(&t.mad[64 + 10 + 11..64 + 10 + 14], &[0, 0, 0x42]);
    assert_eq!(&t.mad[64 + 10 + 14..64 + 10 + 22], &0xdeadu64.to_be_bytes());
    // No WC or GRH, or IGNORE_BKEY: the check is skipped (and the Set applies).
    let mut s2 = set;
    BKeyInfoRepr {
        b_key: 0xb0b,
        b_key_protect_bit: true,
        b_key_lease_period: 3,
        b_key_violations: 1,
    }
    .emit(&mut BKeyInfo::new_unchecked(&mut s2[64..78]));
    assert_eq!(
        p.process_mad(0, &c, 0, PORT, Some(&wc), None, &s2).0,
        REPLIED
    );
    assert!(p.bma.protect);
    assert_eq!(
        p.process_mad(0, &c, flags::IGNORE_BKEY, PORT, Some(&wc), Some(&grh), &s2)
            .0,
        REPLIED
    );
    // Protect bit set: a Get with a wrong key is answered (opa-ff bmacallb.c: Gets
    // are never violations) but the key reads as 0; nothing counted, no trap.
    while p.poll_trap().is_some() {}
    let get_bad = bm(method::GET, attr::BM_BKEY_INFO, 1);
    let (r, o) = p.process_mad(0, &c, 0, PORT, Some(&wc), Some(&grh), &get_bad);
    assert_eq!(r, REPLIED);
    assert_eq!(
        (bkey_info(&o).b_key, bkey_info(&o).b_key_protect_bit),
        (0, true)
    );
    assert_eq!((p.b_key_violations(), p.stats.bkey_drops), (1, 1));
    assert!(p.poll_trap().is_none());
    // The right key sees it.
    let get_good = bm(method::GET, attr::BM_BKEY_INFO, 0xb0b);
    let o = p
        .process_mad(0, &c, 0, PORT, Some(&wc), Some(&grh), &get_good)
        .1;
    assert_eq!(bkey_info(&o).b_key, 0xb0b);
    // A Set (or a TrapRepress) with a wrong key is a violation and starts the lease.
    let r = p.process_mad(0, &c, 0, PORT, Some(&wc), Some(&grh), &set).0;
    assert_eq!(r, CONSUMED);
    let repress = bm(method::TRAP_REPRESS, attr::NOTICE, 1);
    let r = p
        .process_mad(0, &c, 0, PORT, Some(&wc), Some(&grh), &repress)
        .0;
    assert_eq!(r, CONSUMED);
    assert_eq!(p.b_key_violations(), 3);
    // ... and the key is hidden when the check is skipped.
    assert_eq!(
        bkey_info(&p.process_mad(0, &c, 0, PORT, None, None, &get_bad).1).b_key,
        0
    );
    // The lease (3 s from the violation) expires: protect bit cleared, the key shows.
    let (r, o) = p.process_mad(3 * SEC, &c, 0, PORT, Some(&wc), Some(&grh), &get_bad);
    assert_eq!(r, REPLIED);
    assert!(!bkey_info(&o).b_key_protect_bit);
    assert_eq!(bkey_info(&o).b_key, 0xb0b);
    // The right key: the Set succeeds.
    let mut good = bm(method::SET, attr::BM_BKEY_INFO, 0xb0b);
    BKeyInfoRepr {
        b_key: 0xc0c,
        b_key_protect_bit: false,
        b_key_lease_period: 0,
        b_key_violations: 0,
    }
    .emit(&mut BKeyInfo::new_unchecked(&mut good[64..78]));
    let (r, o) = p.process_mad(4 * SEC, &c, 0, PORT, Some(&wc), Some(&grh), &good);
    assert_eq!(r, REPLIED);
    assert_eq!(
        (bkey_info(&o).b_key, p.b_key(), p.b_key_violations()),
        (0xc0c, 0xc0c, 0)
    );
}

#[test]
fn bm_trap_goes_to_the_class_port_info_destination() {
    let c = Counters::default();
    let mut p = port();
    let dest = Gid::from(std::net::Ipv4Addr::new(127, 0, 0, 9));
    let mut set = bm(method::SET, attr::CLASS_PORT_INFO, 0);
    let mut cpi = pma::zero_cpi();
    cpi.trap_gid = dest.0;
    cpi.trap_qp = 1;
    cpi.trap_q_key = gsi::GSI_QKEY;
    cpi.emit(&mut ClassPortInfo::new_unchecked(&mut set[64..136]));
    let (r, o) = run(&mut p, &c, 0, &set);
    assert_eq!(r, REPLIED);
    let back = ClassPortInfoRepr::parse(&ClassPortInfo::new_unchecked(&o[64..136])).unwrap();
    assert_eq!((Gid(back.trap_gid), back.trap_qp), (dest, 1));
    assert_eq!(back.capability_mask, capability::IS_TRAP_SUPPORTED);
    assert_eq!(p.bm_trap_destination(), Some((dest, 1, gsi::GSI_QKEY)));
    p.set_b_key(5, false);
    let wc = wc_from(9, 0);
    let grh = grh_v4([127, 0, 0, 2], [127, 0, 0, 3]);
    p.process_mad(
        0,
        &c,
        0,
        PORT,
        Some(&wc),
        Some(&grh),
        &bm(method::SET, attr::BM_BKEY_INFO, 6),
    );
    assert_eq!(p.outgoing.len(), 1);
    assert_eq!(p.outgoing[0].0, dest);
    // Unknown BM attributes: 0x000C for Get/Set, left to agents otherwise.
    assert_eq!(
        status_of(&run(&mut p, &c, flags::IGNORE_BKEY, &bm(method::GET, 0x20, 0)).1),
        0x000C
    );
    assert_eq!(
        run(&mut p, &c, flags::IGNORE_BKEY, &bm(method::SEND, 0x20, 0)).0,
        MadResult::SUCCESS
    );
}

#[test]
fn grh_addresses() {
    let g = grh_v4([10, 0, 0, 1], [10, 0, 0, 2]);
    assert_eq!(
        grh_sgid(&g),
        Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1))
    );
    assert_eq!(
        grh_dgid(&g),
        Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 2))
    );
    let mut v6 = [0u8; 40];
    v6[0] = 0x60;
    v6[8] = 0xfe;
    v6[24] = 0xfd;
    assert_eq!(grh_sgid(&v6).0[0], 0xfe);
    assert_eq!(grh_dgid(&v6).0[0], 0xfd);
}

fn pc_set(port_select: u8, cs: u16, cs2: u8) -> Mad {
    let mut m = pc_get(port_select);
    m[3] = method::SET;
    m[66..68].copy_from_slice(&cs.to_be_bytes());
    m[64 + 18] = cs2;
    m
}

fn pcx_set(cs: u16, cs2: u32) -> Mad {
    let mut m = mad(
        class::PERF_MGMT,
        method::SET,
        attr::PMA_PORT_COUNTERS_EXT,
        0,
    );
    m[65] = 1;
    m[66..68].copy_from_slice(&cs.to_be_bytes());
    m[68..72].copy_from_slice(&cs2.to_be_bytes());
    m
}

fn read_pcx(p: &mut MadPort, c: &Counters) -> PortCountersExtendedRepr {
    let mut e = mad(
        class::PERF_MGMT,
        method::GET,
        attr::PMA_PORT_COUNTERS_EXT,
        0,
    );
    e[65] = 1;
    let o = run(p, c, 0, &e).1;
    PortCountersExtendedRepr::parse(&PortCountersExtended::new_unchecked(&o[64..])).unwrap()
}

#[test]
fn counter_select2_clears_qp1_dropped_only_with_its_bit() {
    // perfquery.c `-R`: mask bit 16 = PortXmitWait, bit 17 = QP1Dropped; libibmad
    // performance_reset_via puts mask >> 16 in CounterSelect2 (byte 18).
    let c = Counters::default();
    let mut p = port();
    p.stats.gsi_dropped = 5;
    run(
        &mut p,
        &c,
        0,
        &pc_set(1, 0xffff, pma::select2::PORT_XMIT_WAIT),
    );
    assert_eq!(read_pc(&run(&mut p, &c, 0, &pc_get(1)).1).qp1_dropped, 5);
    run(&mut p, &c, 0, &pc_set(1, 0, pma::select2::QP1_DROPPED));
    assert_eq!(read_pc(&run(&mut p, &c, 0, &pc_get(1)).1).qp1_dropped, 0);
}

#[test]
fn extended_set_clears_only_the_selected_counters() {
    let mut p = port();
    let mut c = traffic();
    p.stats.gsi_dropped = 4;
    // Unicast bits clear the unicast counters, not PortXmitPkts / PortRcvPkts.
    run(
        &mut p,
        &c,
        0,
        &pcx_set(
            pma::ext_select::PORT_UNI_XMIT_PKTS | pma::ext_select::PORT_UNI_RCV_PKTS,
            0,
        ),
    );
    let x = read_pcx(&mut p, &c);
    assert_eq!((x.port_unicast_xmit_pkts, x.port_unicast_rcv_pkts), (0, 0));
    assert_eq!((x.port_xmit_pkts, x.port_rcv_pkts), (10, 7));
    // ... and the packet bits leave the unicast counters alone.
    c.tx_packets += 2;
    run(&mut p, &c, 0, &pcx_set(pma::ext_select::PORT_XMIT_PKTS, 0));
    let x = read_pcx(&mut p, &c);
    assert_eq!((x.port_xmit_pkts, x.port_unicast_xmit_pkts), (0, 2));
    // perfquery -x -R: CounterSelect 0xffff, CounterSelect2 0xfff | QP1Dropped (bit
    // 13) clears the 64-bit error counters the port reports.
    assert_eq!((x.port_rcv_errors, x.qp1_dropped), (3, 4));
    run(
        &mut p,
        &c,
        0,
        &pcx_set(0xffff, 0xfff | pma::ext_select2::QP1_DROPPED),
    );
    let x = read_pcx(&mut p, &c);
    assert_eq!((x.port_rcv_errors, x.qp1_dropped), (0, 0));
    assert_eq!((x.port_xmit_data, x.port_unicast_rcv_pkts), (0, 0));
}

#[test]
fn an_sm_trap_does_not_silence_a_bm_trap() {
    // qib_send_trap's o14-2 limiter belongs to the SMA; Trap 259 goes to the BM trap
    // destination and is limited on its own.
    let c = Counters::default();
    let mut p = port();
    p.set_m_key(0x1111, 2);
    p.set_b_key(0xb0b, false);
    assert_eq!(
        run(&mut p, &c, 0, &smp(method::SET, sm_attr::PORT_INFO, 1)).0,
        MadResult::FAILURE
    );
    let wc = wc_from(0x42, 0);
    let grh = grh_v4([127, 0, 0, 2], [127, 0, 0, 3]);
    let set = bm(method::SET, attr::BM_BKEY_INFO, 0xdead);
    assert_eq!(
        p.process_mad(1, &c, 0, PORT, Some(&wc), Some(&grh), &set).0,
        CONSUMED
    );
    let numbers: Vec<u16> = std::iter::from_fn(|| p.poll_trap())
        .map(|t| t.number())
        .collect();
    assert_eq!(numbers, [256, 259]);
    assert_eq!(p.stats.traps_suppressed, 0);
    // Each class is still limited: a second BM violation at once is suppressed.
    p.process_mad(2, &c, 0, PORT, Some(&wc), Some(&grh), &set);
    assert!(p.poll_trap().is_none());
    assert_eq!(p.stats.traps_suppressed, 1);
}

/// The B_Key lease ends for a local Get(BKeyInfo) too: after a violation started a 3 s
/// lease, a local Get 97 s after it ran out sees the protect bit cleared and the key,
/// as a remote Get does. (The lease was only checked on the remote path, inside the
/// B_Key check that local MADs skip.)
#[test]
fn the_b_key_lease_ends_for_local_gets_too() {
    let c = Counters::default();
    let mut p = port();
    p.set_b_key(0xb0b, true);
    p.bma.lease_period = 3;
    let wc = wc_from(0x42, 7);
    let grh = grh_v4([127, 0, 0, 2], [127, 0, 0, 3]);
    let set = bm(method::SET, attr::BM_BKEY_INFO, 0xdead);
    let r = p.process_mad(0, &c, 0, PORT, Some(&wc), Some(&grh), &set).0;
    assert_eq!(r, CONSUMED);
    let get = bm(method::GET, attr::BM_BKEY_INFO, 1);
    // Within the lease the key stays hidden.
    let o = p.process_mad(SEC, &c, 0, PORT, None, None, &get).1;
    assert_eq!(
        (bkey_info(&o).b_key_protect_bit, bkey_info(&o).b_key),
        (true, 0)
    );
    let o = p.process_mad(100 * SEC, &c, 0, PORT, None, None, &get).1;
    assert_eq!(
        (bkey_info(&o).b_key_protect_bit, bkey_info(&o).b_key),
        (false, 0xb0b)
    );
    let o = p
        .process_mad(100 * SEC, &c, 0, PORT, Some(&wc), Some(&grh), &get)
        .1;
    assert_eq!(
        (bkey_info(&o).b_key_protect_bit, bkey_info(&o).b_key),
        (false, 0xb0b)
    );
}

/// A TrapRepress of one of the BMA's own traps (its TID) is consumed: each trap is sent
/// once, so nothing more is to be done. It went on to the agents, where none owned it
/// and it counted as a dropped QP1 MAD. A repress with another TID still goes on.
#[test]
fn a_trap_repress_of_our_own_bm_trap_is_consumed() {
    let c = Counters::default();
    let mut p = port();
    p.set_b_key(0xb0b, true);
    let wc = wc_from(0x42, 7);
    let grh = grh_v4([127, 0, 0, 2], [127, 0, 0, 3]);
    let set = bm(method::SET, attr::BM_BKEY_INFO, 0xdead);
    assert_eq!(
        p.process_mad(0, &c, 0, PORT, Some(&wc), Some(&grh), &set).0,
        CONSUMED
    );
    let trap = p.poll_trap().expect("trap 259");
    let mut repress = bm(method::TRAP_REPRESS, attr::NOTICE, 0xb0b);
    repress[8..16].copy_from_slice(&trap.mad[8..16]);
    let r = p.process_mad(SEC, &c, 0, PORT, Some(&wc), Some(&grh), &repress);
    assert_eq!(r, (CONSUMED, repress));
    repress[8..16].copy_from_slice(&((5u64 << 32) | 1).to_be_bytes());
    let r = p.process_mad(SEC, &c, 0, PORT, Some(&wc), Some(&grh), &repress);
    assert_eq!(r, (MadResult::SUCCESS, repress));
}
