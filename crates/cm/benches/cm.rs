//! Connections per second: one listener accepting connections from one client over
//! a clean simulated link (the CM's own cost; virtual time does not advance the wall
//! clock).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rverbs_cm::sim::{node_gid, LinkConfig, Sim};
use rverbs_cm::{AcceptParams, Config, ConnectParams, Event, Path};

fn connect_many(n: u32) {
    let mut sim = Sim::new(
        2,
        |i| Config {
            ca_guid: 0x100 + i as u64,
            id_xor: 0x5a5a_0000 * (i as u32 + 1),
            ..Config::default()
        },
        LinkConfig::default(),
        7,
    );
    let l = sim.node(1).create_id();
    sim.node(1).listen(l, 0x0106_4e20, 0).unwrap();
    for i in 0..n {
        let id = sim.node(0).create_id();
        let p = ConnectParams::rdma_cm(
            0x0106_4e20,
            100 + i,
            i,
            Path::roce(node_gid(0), node_gid(1)),
        );
        let now = sim.now();
        sim.node(0).connect(now, id, &p).unwrap();
    }
    let mut established = 0;
    while established < n {
        sim.run_for(1_000_000);
        let now = sim.now();
        for e in sim.events(1) {
            match e {
                Event::ConnectRequest { id, req } => {
                    let a = AcceptParams {
                        qpn: 5000 + req.remote_qpn,
                        starting_psn: 1,
                        responder_resources: 1,
                        initiator_depth: 1,
                        rnr_retry_count: 7,
                        failover_accepted: 0,
                        srq: false,
                        flow_control: false,
                        private_data: Vec::new(),
                    };
                    sim.node(1).accept(now, id, &a).unwrap();
                }
                Event::Established { .. } => established += 1,
                _ => {}
            }
        }
        for e in sim.events(0) {
            if let Event::ConnectResponse { id, .. } = e {
                sim.node(0).rtu(now, id, &[]).unwrap();
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("cm");
    g.throughput(Throughput::Elements(1000));
    g.sample_size(10);
    g.bench_function("accept_1000_connections", |b| b.iter(|| connect_many(1000)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
