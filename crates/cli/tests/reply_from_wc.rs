//! `rverbs pingpong ud --reply-from-wc` between two processes: the server answers every
//! datagram through an AH built from its work completion, so its AH must name the
//! client's GID, the server's own GID index, and the hop limit and traffic class the
//! client sent with. Over IPv4 loopback (any user), over IPv6 on a namespace's `lo`
//! with extra addresses, and over a veth pair with ULA addresses between two
//! namespaces (root; skipped with a message otherwise).

mod common;

use common::*;
use std::process::Command;

/// Runs the server (`pre` + rverbs args) and the client, retrying until it connects.
fn pair(
    server_pre: &[&str],
    server: &[&str],
    client_pre: &[&str],
    client: &[&str],
) -> (String, String) {
    let bin = env!("CARGO_BIN_EXE_rverbs");
    let run = |pre: &[&str], args: &[&str]| {
        let mut c = if pre.is_empty() {
            Command::new(bin)
        } else {
            let mut c = Command::new(pre[0]);
            c.args(&pre[1..]).arg(bin);
            c
        };
        c.arg("pingpong").args(args);
        c
    };
    server_and_client(run(server_pre, server), || run(client_pre, client), 100)
}

/// The GID of a `local address:` line.
fn local_gid(text: &str) -> String {
    let l = text
        .lines()
        .find(|l| l.contains("local address:"))
        .expect("no local address line");
    l.rsplit("GID ").next().unwrap().trim().to_string()
}

/// The server's `reply AH:` fields.
struct ReplyAh {
    sgid_index: u8,
    dgid: String,
    hop_limit: u8,
    traffic_class: u8,
}

fn reply_ah(text: &str) -> ReplyAh {
    let l = text
        .lines()
        .find(|l| l.contains("reply AH:"))
        .unwrap_or_else(|| panic!("no reply AH line:\n{text}"));
    let field = |k: &str| {
        let s = &l[l.find(&format!("{k} ")).unwrap() + k.len() + 1..];
        s[..s.find(',').unwrap_or(s.len())].to_string()
    };
    ReplyAh {
        sgid_index: field("sgid_index").parse().unwrap(),
        dgid: field("dgid"),
        hop_limit: field("hop_limit").parse().unwrap(),
        traffic_class: field("traffic_class").parse().unwrap(),
    }
}

/// A port for test `n`'s exchange, chosen at run time.
fn port(n: u16) -> String {
    let _ = n;
    common::free_port_s()
}

#[test]
fn ipv4_loopback_reply_from_wc() {
    let p = port(0);
    let (s, c) = pair(
        &[],
        &[
            "ud",
            "--reply-from-wc",
            "-n",
            "50",
            "-s",
            "500",
            "-c",
            "-p",
            &p,
        ],
        &[],
        &[
            "ud",
            "-n",
            "50",
            "-s",
            "500",
            "-c",
            "-p",
            &p,
            "--hop-limit",
            "5",
            "--tclass",
            "32",
            "127.0.0.1",
        ],
    );
    assert!(
        s.contains("50 iters in") && c.contains("50 iters in"),
        "{s}\n{c}"
    );
    let ah = reply_ah(&s);
    assert_eq!(ah.dgid, local_gid(&c), "the AH goes to the client's GID");
    assert!(ah.dgid.starts_with("::ffff:127.0.0."), "{}", ah.dgid);
    // The server's table: default GID, then its 127.0.0.x.
    assert_eq!(ah.sgid_index, 1);
    assert_eq!((ah.hop_limit, ah.traffic_class), (5, 32));
}

#[test]
fn ipv6_tcp_reaches_the_dual_stack_server() {
    // Over ::1 TCP to the dual-stack listener. The server opts in to ::1
    // (RVERBS_LOOPBACK_IPV6=1) and may get it; the client does not, so it says it has
    // no IPv6 GID and both use IPv4 RoCE (the server answers in the client's family).
    let p = port(1);
    let (s, c) = pair(
        &["env", "RVERBS_LOOPBACK_IPV6=1"],
        &["ud", "--reply-from-wc", "-n", "20", "-s", "100", "-p", &p],
        &[],
        &[
            "ud",
            "-n",
            "20",
            "-s",
            "100",
            "-p",
            &p,
            "--hop-limit",
            "7",
            "::1",
        ],
    );
    let ah = reply_ah(&s);
    assert_eq!(ah.dgid, local_gid(&c));
    assert!(ah.dgid.starts_with("::ffff:127."), "{c}");
    assert!(c.contains("no IPv6 GID on rv_lo; using IPv4"), "{c}");
    assert_eq!(ah.hop_limit, 7);
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn ipv6_loopback_in_a_netns_reply_from_wc() {
    assert!(
        is_root(),
        "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"
    );
    // A namespace whose lo has ::1 and two more IPv6 addresses, so both processes get
    // an IPv6 GID of their own.
    let ns = Netns::new("rvwcl");
    ns.ip(&["link", "set", "lo", "up"]);
    ns.ip(&["-6", "addr", "add", "fd00:1::1/128", "dev", "lo", "nodad"]);
    ns.ip(&["-6", "addr", "add", "fd00:1::2/128", "dev", "lo", "nodad"]);
    let p = port(2);
    let (s, c) = pair(
        &ns.exec(),
        &[
            "ud",
            "--reply-from-wc",
            "-n",
            "50",
            "-s",
            "1000",
            "-c",
            "-p",
            &p,
        ],
        &ns.exec(),
        &[
            "ud",
            "-n",
            "50",
            "-s",
            "1000",
            "-c",
            "-p",
            &p,
            "--hop-limit",
            "3",
            "--tclass",
            "184",
            "::1",
        ],
    );
    let ah = reply_ah(&s);
    let client_gid = local_gid(&c);
    assert!(!client_gid.contains("ffff"), "the client uses IPv6: {c}");
    assert!(!local_gid(&s).contains("ffff"), "the server uses IPv6: {s}");
    assert_eq!(ah.dgid, client_gid);
    // The server's table: default GID, 127.0.0.x, then its IPv6 address.
    assert_eq!(ah.sgid_index, 2);
    assert_eq!((ah.hop_limit, ah.traffic_class), (3, 184));
}

#[test]
#[ignore = "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"]
fn veth_ula_between_namespaces_reply_from_wc() {
    assert!(
        is_root(),
        "needs root (network namespaces, CAP_NET_RAW); CI runs it with --ignored"
    );
    let a = Netns::new("rvwca");
    let b = Netns::new("rvwcb");
    a.ip(&[
        "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", &b.0,
    ]);
    a.ip(&["-6", "addr", "add", "fd00:5::1/64", "dev", "veth0", "nodad"]);
    b.ip(&["-6", "addr", "add", "fd00:5::2/64", "dev", "veth1", "nodad"]);
    a.ip(&["link", "set", "veth0", "up"]);
    b.ip(&["link", "set", "veth1", "up"]);
    let p = port(3);
    let (s, c) = pair(
        &a.exec(),
        &[
            "ud",
            "--reply-from-wc",
            "-d",
            "rv_veth0",
            "-n",
            "50",
            "-s",
            "1000",
            "-c",
            "-p",
            &p,
        ],
        &b.exec(),
        &[
            "ud",
            "-d",
            "rv_veth1",
            "-n",
            "50",
            "-s",
            "1000",
            "-c",
            "-p",
            &p,
            "--hop-limit",
            "9",
            "--tclass",
            "72",
            "fd00:5::1",
        ],
    );
    let ah = reply_ah(&s);
    assert_eq!(ah.dgid, "fd00:5::2");
    assert_eq!(local_gid(&s), "fd00:5::1");
    assert_eq!(local_gid(&c), "fd00:5::2");
    // veth0's table: default GID (fe80::EUI-64), then fd00:5::1.
    assert_eq!(ah.sgid_index, 1);
    assert_eq!((ah.hop_limit, ah.traffic_class), (9, 72));
}

#[test]
fn rc_over_ipv6_tcp_falls_back_to_the_gid_family_both_have() {
    // The client reaches the server over ::1 and, having no IPv6 GID, connects the
    // QPs over IPv4.
    let p = port(4);
    let (s, c) = pair(
        &[],
        &["rc", "-n", "20", "-s", "100", "-c", "-p", &p],
        &[],
        &["rc", "-n", "20", "-s", "100", "-c", "-p", &p, "::1"],
    );
    assert!(
        s.contains("20 iters in") && c.contains("20 iters in"),
        "{s}\n{c}"
    );
    let (gs, gc) = (local_gid(&s), local_gid(&c));
    assert_eq!(
        gs.contains("ffff"),
        gc.contains("ffff"),
        "same family: {gs} {gc}"
    );
}
