//! Classifier lookups per second: the tuple-space lookup against the linear scan of the
//! same table, with 1, 100 and 10,000 NORMAL rules.
//!
//! The rules are spread over four shapes (masks), like a real rule set: IPv4 destination
//! with UDP destination port; IPv4 source /24; VLAN id with TCP destination port; VXLAN
//! VNI with inner IPv4 destination; priorities 0..=15. The frames are 64 pre-parsed field vectors,
//! half of them hitting some rule and half hitting none (a miss is the linear scan's worst
//! case: every rule is tested). Parsing is measured once on its own (`parse`).
//!
//! * `classifier/{tuple,linear}/{1,100,10000}`: one lookup per element.
//! * `classifier/parse`: `FieldVector::parse` of the same frames.
//!
//! After the criterion groups a summary prints lookups/s of both and their ratio, from
//! its own timed loop in the same run (skipped under `--profile-time`;
//! `cargo bench -p rverbs-flow --bench classifier -- summary` runs it alone).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rverbs_flow::attr::*;
use rverbs_flow::classify::{Classifier, Direction, Verdict};
use rverbs_flow::fields::FieldVector;
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [1, 100, 10_000];

fn eth(vlan: Option<u16>, et: u16, p: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa];
    if let Some(v) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(p);
    f
}

fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, p: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&((20 + p.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(p);
    h
}

fn l4(sport: u16, dport: u16, tcp: bool) -> Vec<u8> {
    let mut h = sport.to_be_bytes().to_vec();
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&if tcp {
        [0u8; 16].to_vec()
    } else {
        vec![0, 8, 0, 0]
    });
    h
}

fn vxlan_frame(vni: u32, inner_dst: Ipv4Addr) -> Vec<u8> {
    let inner = eth(
        None,
        0x0800,
        &ipv4(
            Ipv4Addr::new(192, 168, 0, 1),
            inner_dst,
            17,
            &l4(1, 2, false),
        ),
    );
    let mut vx = vec![0x08, 0, 0, 0];
    vx.extend_from_slice(&(vni << 8).to_be_bytes());
    vx.extend_from_slice(&inner);
    let mut udp = l4(49152, 4789, false);
    udp.extend_from_slice(&vx);
    eth(
        None,
        0x0800,
        &ipv4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            17,
            &udp,
        ),
    )
}

fn addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 | (i as u32 & 0x00ff_ffff))
}

/// Rule `i` of a table and a frame that hits it.
fn rule_and_hit(i: usize) -> (FlowAttr, Vec<u8>) {
    let prio = (i % 16) as u16;
    match i % 4 {
        0 => (
            FlowAttr::normal(
                prio,
                vec![
                    FlowSpec::ipv4_dst(addr(i)),
                    FlowSpec::udp_dst(Some((i % 60000) as u16 + 1)),
                ],
            ),
            eth(
                None,
                0x0800,
                &ipv4(
                    Ipv4Addr::new(1, 1, 1, 1),
                    addr(i),
                    17,
                    &l4(9, (i % 60000) as u16 + 1, false),
                ),
            ),
        ),
        1 => (
            FlowAttr::normal(
                prio,
                vec![FlowSpec::Ipv4(Layer::outer(
                    Ipv4Filter {
                        src_ip: addr(i << 8),
                        ..Default::default()
                    },
                    Ipv4Filter {
                        src_ip: Ipv4Addr::new(255, 255, 255, 0),
                        ..Default::default()
                    },
                ))],
            ),
            eth(
                None,
                0x0800,
                &ipv4(
                    addr((i << 8) | 7),
                    Ipv4Addr::new(9, 9, 9, 9),
                    6,
                    &l4(9, 9, true),
                ),
            ),
        ),
        2 => (
            FlowAttr::normal(
                prio,
                vec![
                    FlowSpec::vlan_id((i % 4094) as u16 + 1),
                    FlowSpec::tcp_dst(Some((i / 4094) as u16 + 1)),
                ],
            ),
            eth(
                Some((i % 4094) as u16 + 1),
                0x0800,
                &ipv4(
                    Ipv4Addr::new(1, 1, 1, 1),
                    Ipv4Addr::new(2, 2, 2, 2),
                    6,
                    &l4(9, (i / 4094) as u16 + 1, true),
                ),
            ),
        ),
        _ => (
            FlowAttr::normal(
                prio,
                vec![
                    FlowSpec::vxlan_vni(i as u32 & 0xff_ffff),
                    FlowSpec::ipv4_dst(addr(i)).into_inner(),
                ],
            ),
            vxlan_frame(i as u32 & 0xff_ffff, addr(i)),
        ),
    }
}

struct Setup {
    table: Classifier,
    frames: Vec<Vec<u8>>,
    fields: Vec<FieldVector>,
}

fn setup(n: usize) -> Setup {
    let mut table = Classifier::new();
    let mut hits = Vec::new();
    for i in 0..n {
        let (attr, hit) = rule_and_hit(i);
        validate(&attr, &FlowContext::raw_packet()).expect("bench rule is valid");
        table.insert(i as u32, &attr).expect("bench rule compiles");
        hits.push(hit);
    }
    let mut frames = Vec::new();
    for k in 0..32 {
        frames.push(hits[(k * 7919) % n].clone());
        // Misses: same shapes, values no rule has.
        frames.push(rule_and_hit(n + 1000 + k).1);
    }
    let fields = frames
        .iter()
        .map(|f| FieldVector::parse(f).unwrap())
        .collect();
    Setup {
        table,
        frames,
        fields,
    }
}

fn lookups(s: &Setup, linear: bool, v: &mut Verdict) -> usize {
    let mut delivered = 0;
    for (fv, f) in s.fields.iter().zip(&s.frames) {
        if linear {
            s.table.classify_linear(fv, f.len(), Direction::Ingress, v);
        } else {
            s.table.classify_fields(fv, f.len(), Direction::Ingress, v);
        }
        delivered += v.deliveries.len();
    }
    delivered
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("classifier");
    g.measurement_time(Duration::from_secs(2));
    g.warm_up_time(Duration::from_millis(500));
    for n in SIZES {
        let s = setup(n);
        g.throughput(Throughput::Elements(s.fields.len() as u64));
        let mut v = Verdict::default();
        assert_eq!(lookups(&s, false, &mut v), lookups(&s, true, &mut v));
        for (name, linear) in [("tuple", false), ("linear", true)] {
            g.bench_with_input(BenchmarkId::new(name, n), &s, |b, s| {
                let mut v = Verdict::default();
                b.iter(|| black_box(lookups(s, linear, &mut v)))
            });
        }
    }
    let s = setup(100);
    g.throughput(Throughput::Elements(s.frames.len() as u64));
    g.bench_function("parse", |b| {
        b.iter(|| {
            for f in &s.frames {
                black_box(FieldVector::parse(black_box(f)).unwrap());
            }
        })
    });
    g.finish();
}

/// Lookups/s of both, timed in one loop each, alternating, same table and frames.
fn summary(c: &mut Criterion) {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--profile-time") {
        return;
    }
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| f != "summary") {
        return;
    }
    let _ = c;
    println!("\nclassifier summary (lookups/s, same run):");
    println!(
        "{:>7} {:>8} {:>14} {:>14} {:>8}",
        "rules", "groups", "tuple", "linear", "ratio"
    );
    for n in SIZES {
        let s = setup(n);
        let mut v = Verdict::default();
        let mut rate = [0f64; 2];
        for round in 0..3 {
            for (k, linear) in [false, true].into_iter().enumerate() {
                let start = Instant::now();
                let mut iters = 0u64;
                while start.elapsed() < Duration::from_millis(300) {
                    black_box(lookups(&s, linear, &mut v));
                    iters += 1;
                }
                let r = (iters * s.fields.len() as u64) as f64 / start.elapsed().as_secs_f64();
                if round > 0 {
                    rate[k] = rate[k].max(r);
                }
            }
        }
        println!(
            "{:>7} {:>8} {:>14.0} {:>14.0} {:>7.1}x",
            n,
            s.table.ingress_groups(),
            rate[0],
            rate[1],
            rate[0] / rate[1]
        );
    }
}

criterion_group!(benches, bench, summary);
criterion_main!(benches);
