//! RAW_PACKET QPs and flow steering through the verbs API, on a veth pair between two
//! network namespaces this program creates (root; removed on exit).
//!
//! ```sh
//! cargo run -p rverbs --example raw_flow -- 'prio 0 udp dport 4791 tag 1' 'prio 1 udp tag 2' sniffer
//! ```
//!
//! Each argument is one rule (`rverbs_flow::text` syntax) on its own RAW_PACKET QP. A
//! sender in the other namespace injects a few UDP and TCP frames; the program prints
//! which QP received which frame, with the flow tag and checksum flag of each completion.

use rverbs::flow::text::parse_rule;
use rverbs::{
    AccessFlags, ConnectOpts, Context, OpenOptions, PeerInfo, QpCap, QpInitAttr, QpType, Wc,
    WcFlags,
};
use rverbs_raw::netns::VethPair;
use std::time::Duration;

const SLOT: usize = 2048;
const SLOTS: usize = 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rules: Vec<String> = std::env::args().skip(1).collect();
    let rules = if rules.is_empty() {
        vec![
            "prio 0 udp dport 4791 tag 1".to_string(),
            "prio 1 udp tag 2".to_string(),
            "all-default".to_string(),
        ]
    } else {
        rules
    };
    let Some(pair) = VethPair::new() else {
        return Err("needs root (ip netns, veth)".into());
    };
    let if_a = pair.if_a.clone();
    let tx = VethPair::in_ns(&pair.ns_a, move || rverbs_raw::RawPort::open(&if_a))?;
    let if_b = pair.if_b.clone();
    let ctx = VethPair::in_ns(&pair.ns_b, move || {
        Context::open_with(
            rverbs::device(None)?,
            &OpenOptions {
                raw_interface: Some(if_b),
                ..Default::default()
            },
        )
    })?;
    let pd = ctx.alloc_pd()?;
    let mut qps = Vec::new();
    for rule in &rules {
        let cq = ctx.create_cq(64)?;
        let mr = pd.reg_mr(SLOT * SLOTS, AccessFlags::LOCAL_WRITE)?;
        let qp = pd.create_qp(&QpInitAttr::new(QpType::RawPacket, &cq).cap(QpCap {
            max_send_wr: 16,
            max_recv_wr: SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }))?;
        let peer = PeerInfo {
            qpn: 0,
            psn: 0,
            gid: rverbs::Gid::ZERO,
        };
        qp.connect(&peer, &ConnectOpts::default())?;
        for i in 0..SLOTS {
            qp.post_recv(i as u64, &[mr.slice(i * SLOT..(i + 1) * SLOT)])?;
        }
        let flow = qp.create_flow(&parse_rule(rule)?)?;
        println!("QP {:#x}: {rule}", qp.qp_num());
        qps.push((qp, cq, mr, flow));
    }
    for (i, dport) in [4791u16, 53, 4791, 80].into_iter().enumerate() {
        let proto = if dport == 80 { 6 } else { 17 };
        tx.send(&frame(proto, 1000 + i as u16, dport))?;
    }
    std::thread::sleep(Duration::from_millis(300));
    for (qp, cq, mr, _flow) in &qps {
        let mut wcs = [Wc::default(); SLOTS];
        let n = cq.poll(&mut wcs)?;
        for wc in &wcs[..n] {
            let mut head = [0u8; 38];
            mr.read(wc.wr_id as usize * SLOT, &mut head);
            let dport = u16::from_be_bytes([head[36], head[37]]);
            println!(
                "QP {:#x}: {:?} {} bytes, proto {} dport {dport}, tag {:?}, ip_csum_ok {}",
                qp.qp_num(),
                wc.status,
                wc.byte_len,
                head[23],
                wc.wc_flags
                    .contains(WcFlags::WITH_FLOW_TAG)
                    .then_some(wc.flow_tag),
                wc.wc_flags.contains(WcFlags::IP_CSUM_OK),
            );
        }
    }
    if let Some(s) = ctx.raw_stats() {
        println!("{s:?}");
    }
    Ok(())
}

/// An IPv4 frame with a UDP or TCP header to 10.0.0.2:`dport` (checksums left 0).
fn frame(proto: u8, sport: u16, dport: u16) -> Vec<u8> {
    let l4 = if proto == 6 { 20 } else { 8 };
    let mut f = vec![0u8; 14 + 20 + l4];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0b]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0a]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((20 + l4) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = proto;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    if proto == 6 {
        f[46] = 0x50; // data offset 5
    } else {
        f[38..40].copy_from_slice(&8u16.to_be_bytes());
    }
    f
}
