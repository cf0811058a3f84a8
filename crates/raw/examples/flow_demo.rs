//! A demo receiver with flow steering you drive by commands: it creates a veth pair
//! between two network namespaces (root only), opens a raw device with four RAW_PACKET
//! QPs (0..=3) on end B and a sender on end A, then reads commands from stdin (or runs
//! the `;`-separated commands given as arguments):
//!
//! ```text
//! add <qp> <rule>      install a flow (rule text: see rverbs_flow::text), prints its id
//! list                 installed flows: id, QP, rule
//! del <id>             destroy a flow
//! send <kind> [port]   inject a frame from A: udp | tcp | vlan | vxlan | ipv6 | arp
//! recv                 what each QP received since the last recv (frames, tags)
//! stats                device counts
//! quit
//! ```
//!
//! Example: `flow_demo 'add 0 prio 1 udp dport 4791 tag 5; add 1 sniffer; send udp 4791;
//! send tcp 80; recv; list'`.

use rverbs_flow::text::{parse_rule, rule_to_string};
use rverbs_raw::netns::VethPair;
use rverbs_raw::{Flow, RawDevice, RawPort, RawQp};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::time::Duration;

fn frame(kind: &str, port: u16) -> Option<Vec<u8>> {
    let eth = |vlan: Option<u16>, et: u16, p: &[u8]| {
        let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa];
        if let Some(v) = vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&v.to_be_bytes());
        }
        f.extend_from_slice(&et.to_be_bytes());
        f.extend_from_slice(p);
        f
    };
    let l4 = |tcp: bool, port: u16, body: &[u8]| {
        let mut h = 1234u16.to_be_bytes().to_vec();
        h.extend_from_slice(&port.to_be_bytes());
        if tcp {
            h.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
        } else {
            h.extend_from_slice(&((8 + body.len()) as u16).to_be_bytes());
            h.extend_from_slice(&[0, 0]);
        }
        h.extend_from_slice(body);
        h
    };
    let ip4 = |dst: [u8; 4], proto: u8, p: &[u8]| {
        let mut h = vec![0x45, 0];
        h.extend_from_slice(&((20 + p.len()) as u16).to_be_bytes());
        h.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1]);
        h.extend_from_slice(&dst);
        h.extend_from_slice(p);
        h
    };
    Some(match kind {
        "udp" => eth(
            None,
            0x0800,
            &ip4([10, 0, 0, 2], 17, &l4(false, port, b"demo")),
        ),
        "tcp" => eth(None, 0x0800, &ip4([10, 0, 0, 2], 6, &l4(true, port, b""))),
        "vlan" => eth(
            Some(100),
            0x0800,
            &ip4([10, 0, 0, 2], 17, &l4(false, port, b"demo")),
        ),
        "vxlan" => {
            let inner = eth(
                None,
                0x0800,
                &ip4([192, 168, 0, 2], 17, &l4(false, port, b"in")),
            );
            let mut vx = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
            vx.extend_from_slice(&inner);
            eth(None, 0x0800, &ip4([10, 0, 0, 2], 17, &l4(false, 4789, &vx)))
        }
        "ipv6" => {
            let body = l4(false, port, b"six");
            let mut h = vec![0x60, 0, 0, 0];
            h.extend_from_slice(&(body.len() as u16).to_be_bytes());
            h.extend_from_slice(&[17, 64]);
            h.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            h.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            h.extend_from_slice(&body);
            eth(None, 0x86dd, &h)
        }
        "arp" => {
            let mut f = eth(None, 0x0806, &[0u8; 28]);
            f[..6].copy_from_slice(&[0xff; 6]);
            f
        }
        _ => return None,
    })
}

struct Demo {
    dev: RawDevice,
    qps: Vec<RawQp>,
    tx: RawPort,
    flows: BTreeMap<u64, Flow>,
}

impl Demo {
    fn run(&mut self, line: &str) -> bool {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => {}
            ["quit"] => return false,
            ["add", qp, rule @ ..] => {
                let Some(qp) = qp.parse::<usize>().ok().and_then(|i| self.qps.get(i)) else {
                    println!("error: QP must be 0..={}", self.qps.len() - 1);
                    return true;
                };
                match parse_rule(&rule.join(" ")).and_then(|a| qp.create_flow(&a)) {
                    Ok(f) => {
                        println!("flow {:#x}", f.id().raw());
                        self.flows.insert(f.id().raw(), f);
                    }
                    Err(e) => println!("error: {e}"),
                }
            }
            ["list"] => {
                for (id, qpn, attr) in self.dev.flows() {
                    let qp = self
                        .qps
                        .iter()
                        .position(|q| q.qp_num() == qpn)
                        .unwrap_or(usize::MAX);
                    println!("{:#x} qp {qp}: {}", id.raw(), rule_to_string(&attr));
                }
            }
            ["del", id] => {
                let id = id
                    .strip_prefix("0x")
                    .map_or_else(|| id.parse().ok(), |h| u64::from_str_radix(h, 16).ok());
                match id.and_then(|id| self.flows.remove(&id)) {
                    Some(f) => match f.destroy() {
                        Ok(()) => println!("destroyed"),
                        Err(e) => println!("error: {e}"),
                    },
                    None => println!("error: EINVAL (22): no such flow"),
                }
            }
            ["send", kind, rest @ ..] => {
                let port = rest.first().and_then(|p| p.parse().ok()).unwrap_or(4791);
                match frame(kind, port) {
                    Some(f) => match self.tx.send(&f) {
                        Ok(()) => println!("sent {kind} ({} bytes)", f.len()),
                        Err(e) => println!("error: {e}"),
                    },
                    None => println!("error: kinds are udp tcp vlan vxlan ipv6 arp"),
                }
            }
            ["recv"] => {
                std::thread::sleep(Duration::from_millis(100));
                for (i, qp) in self.qps.iter().enumerate() {
                    let got = qp.drain();
                    let tags: Vec<String> = got
                        .iter()
                        .map(|c| format!("{}B tag={:?}", c.byte_len(), c.flow_tag))
                        .collect();
                    println!("qp {i}: {} frame(s) {}", got.len(), tags.join(", "));
                }
            }
            ["stats"] => println!("{:?}", self.dev.stats()),
            _ => println!("error: commands are add list del send recv stats quit"),
        }
        true
    }
}

fn main() {
    let Some(pair) = VethPair::new() else {
        std::process::exit(0);
    };
    let if_b = pair.if_b.clone();
    let dev = VethPair::in_ns(&pair.ns_b, move || RawDevice::open(&if_b)).expect("raw device");
    let if_a = pair.if_a.clone();
    let tx = VethPair::in_ns(&pair.ns_a, move || RawPort::open(&if_a)).expect("sender");
    let qps = (0..4).map(|_| dev.create_qp(1024)).collect();
    let mut demo = Demo {
        dev,
        qps,
        tx,
        flows: BTreeMap::new(),
    };
    println!(
        "demo receiver on {} (namespace {}), sender on {}",
        pair.if_b, pair.ns_b, pair.if_a
    );
    let script: Vec<String> = std::env::args().skip(1).collect();
    if !script.is_empty() {
        for cmd in script.join(" ").split(';') {
            println!("> {}", cmd.trim());
            if !demo.run(cmd) {
                break;
            }
        }
        return;
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if !demo.run(&line) {
            break;
        }
    }
}
