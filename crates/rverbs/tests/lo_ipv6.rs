//! The loopback device's IPv6 rule: `::1` is one address for the whole host, so a
//! context takes it only with `RVERBS_LOOPBACK_IPV6=1`, and only one context at a time
//! has it. (Its own test binary: it sets the variable for the process.)

use rverbs::*;

#[test]
fn ipv6_localhost_only_on_request_and_once() {
    let dev = device(None).unwrap();
    std::env::remove_var("RVERBS_LOOPBACK_IPV6");
    let plain = dev.open().unwrap();
    let lo6: Gid = std::net::Ipv6Addr::LOCALHOST.into();
    assert_ne!(plain.gid(2), Some(lo6));
    if std::net::UdpSocket::bind("[::1]:4791").is_err() {
        eprintln!("SKIPPED the ::1 part: [::1]:4791 is taken (another process) or no IPv6");
        return;
    }
    std::env::set_var("RVERBS_LOOPBACK_IPV6", "1");
    let first = dev.open().unwrap();
    let second = dev.open().unwrap();
    std::env::remove_var("RVERBS_LOOPBACK_IPV6");
    let e = first.query_gid_ex(1, 2, 0).unwrap();
    assert_eq!((e.gid, e.gid_type), (lo6, GidType::RoceV2));
    assert_eq!(first.gid_index_for(true), Some(2));
    assert_eq!(second.gid_index_for(true), None, "::1 is taken by `first`");
    drop(first);
}
