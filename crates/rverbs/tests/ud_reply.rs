//! UD over the loopback soft device with real IP metadata: the sender's AH hop limit
//! and traffic class reach the wire (sendmsg control messages), the receiver's GRH area
//! reports them (recvmsg control messages), `create_ah_from_wc` answers through them,
//! and the pcap capture shows the TTL/TOS that were on the wire.

mod common;
use common::*;
use rverbs::*;
use std::time::Duration;

fn wait(cq: &Cq) -> Wc {
    let mut out = [Wc::default()];
    assert_eq!(cq.poll_wait(&mut out, Duration::from_secs(10)).unwrap(), 1);
    assert_eq!(out[0].status, WcStatus::Success, "{:?}", out[0]);
    out[0]
}

#[test]
fn ttl_and_tos_travel_and_come_back_through_create_ah_from_wc() {
    let dir = std::env::temp_dir().join(format!("rverbs-udreply-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("b.pcap");
    let dev = device(None).unwrap();
    let a = ud_end(dev.open().unwrap(), 16);
    let opts = OpenOptions {
        pcap: Some(pcap.clone()),
        ..OpenOptions::default()
    };
    let b = ud_end(Context::open_with(dev.clone(), &opts).unwrap(), 16);
    let (ga, gb) = (a.ctx.gid(1).unwrap(), b.ctx.gid(1).unwrap());
    b.qp.post_recv(1, &[b.mr.all()]).unwrap();
    a.qp.post_recv(1, &[a.mr.all()]).unwrap();
    // a → b with TTL 7 and TOS 0x48.
    let ah =
        a.pd.create_ah(&AhAttr {
            av: AddressVector {
                dgid: gb,
                sgid_index: 1,
                hop_limit: 7,
                traffic_class: 0x48,
                flow_label: 0,
            },
            port_num: 1,
        })
        .unwrap();
    a.mr.write(40, b"ping");
    a.qp.post_send(&SendRequest::send(2, &[a.mr.slice(40..44)]).to(
        &ah,
        b.qp.qp_num(),
        0x1111_1111,
    ))
    .unwrap();
    assert_eq!(wait(&a.cq).wr_id, 2);
    let wc = wait(&b.cq);
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    assert_eq!(wc.byte_len, 44);
    let grh = b.mr.with(|m| m[..40].to_vec());
    // rxe's layout for IPv4: 20 zero bytes, then the header with TTL 7, TOS 0x48.
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!((grh[20 + 8], grh[20 + 1]), (7, 0x48));
    let attr = b.ctx.init_ah_from_wc(1, &wc, &grh).unwrap();
    assert_eq!(attr.av.dgid, ga);
    assert_eq!(b.ctx.gid(attr.av.sgid_index), Some(gb));
    assert_eq!((attr.av.hop_limit, attr.av.traffic_class), (7, 0x48));
    assert_eq!(
        b.ctx.init_ah_from_wc(2, &wc, &grh).unwrap_err().errno(),
        22,
        "only port 1"
    );
    // b answers through an AH built from the completion: a hears it from b, with the
    // same TTL/TOS.
    let reply = b.pd.create_ah_from_wc(1, &wc, &grh).unwrap();
    b.mr.write(40, b"pong");
    b.qp.post_send(&SendRequest::send(3, &[b.mr.slice(40..44)]).to(&reply, wc.src_qp, 0x1111_1111))
        .unwrap();
    assert_eq!(wait(&b.cq).wr_id, 3);
    let wc_a = wait(&a.cq);
    assert_eq!(wc_a.src_qp, b.qp.qp_num());
    assert_eq!(&a.mr.to_vec()[40..44], b"pong");
    let grh_a = a.mr.with(|m| m[..40].to_vec());
    let back = a.ctx.init_ah_from_wc(1, &wc_a, &grh_a).unwrap();
    assert_eq!(
        (back.av.dgid, back.av.hop_limit, back.av.traffic_class),
        (gb, 7, 0x48)
    );
    drop(reply);
    drop(b);
    // The capture has both packets with TTL 7 / TOS 0x48 in their IPv4 headers.
    let cap = std::fs::read(&pcap).unwrap();
    let mut off = 24;
    let mut seen = 0;
    while off + 16 <= cap.len() {
        let n = u32::from_le_bytes(cap[off + 8..off + 12].try_into().unwrap()) as usize;
        let ip = &cap[off + 16..off + 16 + n];
        assert_eq!((ip[0] >> 4, ip[8], ip[1]), (4, 7, 0x48), "packet {seen}");
        seen += 1;
        off += 16 + n;
    }
    assert_eq!(seen, 2, "one received, one sent");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gid_queries_on_an_open_context() {
    let ctx = device(None).unwrap().open().unwrap();
    let e = ctx.query_gid_ex(1, 1, 0).unwrap();
    assert_eq!(
        (e.gid_type, e.port_num, e.gid_index),
        (GidType::RoceV2, 1, 1)
    );
    assert_eq!(Some(e.gid), ctx.gid(1));
    assert_eq!(ctx.query_gid(1, 1).unwrap(), e.gid);
    assert_eq!(ctx.query_gid_ex(1, 0, 1).unwrap_err().errno(), 22);
    assert_eq!(ctx.query_gid_ex(2, 0, 0).unwrap_err().errno(), 22);
    assert_eq!(ctx.query_gid_ex(1, 1024, 0).unwrap_err().errno(), 22);
    assert_eq!(ctx.query_gid_ex(1, 1000, 0).unwrap_err().errno(), 61);
    assert_eq!(ctx.query_gid(1, 1000).unwrap(), Gid::ZERO);
    let all = ctx.query_gid_table(GID_TABLE_LEN).unwrap();
    assert!(all.len() >= 2);
    assert_eq!(ctx.query_gid_table(1).unwrap_err().errno(), 22);
    assert_eq!(ctx.gid_table_len(), 1024);
    assert_eq!(ctx.find_gid_index(&e.gid, GidType::RoceV2), Some(1));
    assert_eq!(ctx.find_gid_index(&e.gid, GidType::RoceV1), None);
    // An AH or a QP path may not use an empty slot.
    let pd = ctx.alloc_pd().unwrap();
    let bad = AhAttr {
        av: AddressVector {
            dgid: e.gid,
            sgid_index: 200,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        },
        port_num: 1,
    };
    assert_eq!(pd.create_ah(&bad).err().map(|e| e.errno()), Some(22));
}

/// The receiver asks the kernel for TTL / TOS only while it has a UD QP (or a MAD
/// agent, or a capture): its last UD QP destroyed and a new one created, the new
/// one's GRH still reports them; RC traffic in between, with no UD QP, is unaffected.
#[test]
fn ttl_and_tos_are_reported_again_after_the_last_ud_qp_is_recreated() {
    let dev = device(None).unwrap();
    let a = ud_end(dev.open().unwrap(), 16);
    let ctx_b = dev.open().unwrap();
    let gb = ctx_b.gid(1).unwrap();
    let send_to = |qpn: u32, tag: u64| {
        let ah =
            a.pd.create_ah(&AhAttr {
                av: AddressVector {
                    dgid: gb,
                    sgid_index: 1,
                    hop_limit: 9,
                    traffic_class: 0x20,
                    flow_label: 0,
                },
                port_num: 1,
            })
            .unwrap();
        a.qp.post_send(&SendRequest::send(tag, &[a.mr.slice(40..44)]).to(&ah, qpn, 0x1111_1111))
            .unwrap();
        assert_eq!(wait(&a.cq).wr_id, tag);
    };
    for round in 0..3u64 {
        let b = ud_end(ctx_b.clone(), 16);
        b.qp.post_recv(round, &[b.mr.all()]).unwrap();
        send_to(b.qp.qp_num(), 100 + round);
        assert!(wait(&b.cq).wc_flags.contains(WcFlags::GRH));
        let grh = b.mr.with(|m| m[..40].to_vec());
        assert_eq!((grh[20 + 8], grh[20 + 1]), (9, 0x20), "round {round}");
        drop(b);
        // Between rounds the context has no UD QP: RC still works.
        let (x, y) = (end(ctx_b.clone(), 64), end(dev.open().unwrap(), 64));
        connect(&x, &y, &ConnectOpts::default());
        y.qp.post_recv(1, &[y.mr.slice(0..8)]).unwrap();
        x.qp.post_send(&SendRequest::send(2, &[x.mr.slice(0..8)]))
            .unwrap();
        assert_eq!(wait(&x.cq).wr_id, 2);
        assert_eq!(wait(&y.cq).opcode, WcOpcode::Recv);
    }
}
