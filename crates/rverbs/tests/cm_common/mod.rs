//! What the RDMA CM tests share: waiting for an event of a kind, a listener on a
//! context's address, a client with its address and route resolved.
#![allow(dead_code)]

use rverbs::cm::{CmEvent, CmId, EventChannel, EventKind, PortSpace};
use rverbs::Context;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a test waits for one event.
pub const T: Option<Duration> = Some(Duration::from_secs(15));
/// Address and route resolution's time limit.
pub const D: Duration = Duration::from_secs(5);

pub fn next(ch: &EventChannel) -> CmEvent {
    ch.get_event(T).expect("an event within 15 s")
}

pub fn expect(ch: &EventChannel, kind: EventKind) -> CmEvent {
    let e = next(ch);
    assert_eq!(e.kind, kind, "{e:?}");
    e
}

/// A listener on `ctx`'s IPv4 address, any free port: it, its channel and the address
/// clients use.
pub fn listen(ctx: &Context, ps: PortSpace, backlog: u32) -> (CmId, EventChannel, SocketAddr) {
    let ch = EventChannel::new().unwrap();
    let l = CmId::create_on(&ch, ctx, ps).unwrap();
    let ip = rverbs::cm::local_ip(ctx, false).expect("an IPv4 address GID");
    l.bind_addr(SocketAddr::new(ip, 0)).unwrap();
    l.listen(backlog).unwrap();
    let addr = l.local_addr().unwrap();
    assert_eq!(addr.ip(), ip);
    assert_ne!(addr.port(), 0);
    (l, ch, addr)
}

/// A client ID on `ctx` with address and route to `addr` resolved.
pub fn client(ctx: &Context, ps: PortSpace, addr: SocketAddr) -> (CmId, EventChannel) {
    let ch = EventChannel::new().unwrap();
    let id = CmId::create_on(&ch, ctx, ps).unwrap();
    id.resolve_addr(None, addr, D).unwrap();
    expect(&ch, EventKind::AddrResolved);
    id.resolve_route(D).unwrap();
    expect(&ch, EventKind::RouteResolved);
    assert_eq!(id.peer_addr(), Some(addr));
    assert_eq!(id.context().unwrap().device().name, ctx.device().name);
    (id, ch)
}
