//! A one-line text form of a flow rule, for command lines and listings:
//! [`parse_rule`] reads it, [`rule_to_string`] writes it (and reads back to the same
//! attribute).
//!
//! ```text
//! rule    = [type] {option} {[inner] spec} {action}
//! type    = normal | all-default | mc-default | sniffer
//! option  = prio N | port N | dont-trap | egress
//! spec    = eth   [dst MAC] [src MAC] [type N] [vlan N]
//!         | ipv4  [src IP] [dst IP] [proto N] [tos N] [ttl N] [ipflags N]
//!         | ipv6  [src IP6] [dst IP6] [label N] [next N] [tclass N] [hop N]
//!         | tcp   [sport N] [dport N]      | udp [sport N] [dport N]
//!         | vxlan [vni N] | gre [cks N] [proto N] [key N] | mpls [label N]
//!         | esp   [spi N] [seq N]
//! action  = tag N | drop | count
//! ```
//!
//! Every field value may carry a mask after `/` (`dport 0x1200/0xff00`; an address takes
//! a prefix length or an address mask: `dst 10.0.0.0/8`); without one the mask is all
//! ones. A spec keyword alone (`udp`) matches any packet with that header. Numbers are
//! decimal or `0x` hex. `ipv4` with `proto`, `tos`, `ttl` or `ipflags` is an IPV4_EXT
//! spec. (`ttl`, `ipflags`, `hop`, `cks` and `seq` exist so every attribute has a text
//! form; no NIC matches them, so a rule using them fails `validate` with EOPNOTSUPP.) `count` makes
//! fresh [`Counters`].

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::attr::*;
use crate::error::FlowError;

fn err(msg: impl Into<String>) -> FlowError {
    FlowError::inval(msg.into())
}

fn num<T: TryFrom<u64>>(s: &str) -> Result<T, FlowError> {
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        s.parse::<u64>()
    }
    .map_err(|_| err(format!("`{s}` is not a number")))?;
    T::try_from(v).map_err(|_| err(format!("{s} is out of range")))
}

/// `value[/mask]` for a number field; no mask = all ones.
fn num_mask<T: TryFrom<u64> + Copy>(s: &str, ones: T) -> Result<(T, T), FlowError> {
    match s.split_once('/') {
        Some((v, m)) => Ok((num(v)?, num(m)?)),
        None => Ok((num(s)?, ones)),
    }
}

fn mac(s: &str) -> Result<[u8; 6], FlowError> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(err(format!("`{s}` is not a MAC address")));
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).map_err(|_| err(format!("`{s}` is not a MAC address")))?;
    }
    Ok(m)
}

fn mac_mask(s: &str) -> Result<([u8; 6], [u8; 6]), FlowError> {
    match s.split_once('/') {
        Some((v, m)) => Ok((mac(v)?, mac(m)?)),
        None => Ok((mac(s)?, [0xff; 6])),
    }
}

/// `addr[/len | /mask-addr]`.
fn addr_mask<A: FromStr + Copy>(
    s: &str,
    bits: u32,
    from_bits: impl Fn(u128) -> A,
) -> Result<(A, A), FlowError> {
    let parse = |x: &str| {
        x.parse::<A>()
            .map_err(|_| err(format!("`{x}` is not an address")))
    };
    match s.split_once('/') {
        None => Ok((parse(s)?, from_bits(u128::MAX))),
        Some((v, m)) => {
            let mask = match m.parse::<u32>() {
                Ok(len) if len <= bits => {
                    let ones = if len == 0 {
                        0
                    } else {
                        u128::MAX << (128 - len)
                    };
                    from_bits(ones)
                }
                Ok(_) => return Err(err(format!("prefix /{m} too long"))),
                Err(_) => parse(m)?,
            };
            Ok((parse(v)?, mask))
        }
    }
}

fn v4(s: &str) -> Result<(Ipv4Addr, Ipv4Addr), FlowError> {
    addr_mask(s, 32, |b| Ipv4Addr::from((b >> 96) as u32))
}

fn v6(s: &str) -> Result<(Ipv6Addr, Ipv6Addr), FlowError> {
    addr_mask(s, 128, Ipv6Addr::from)
}

struct Tokens<'a> {
    toks: Vec<&'a str>,
    pos: usize,
}

impl<'a> Tokens<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.pos).copied()
    }
    fn next(&mut self) -> Option<&'a str> {
        let t = self.peek();
        self.pos += usize::from(t.is_some());
        t
    }
    fn value(&mut self, key: &str) -> Result<&'a str, FlowError> {
        self.next()
            .ok_or_else(|| err(format!("`{key}` needs a value")))
    }
}

const SPEC_WORDS: [&str; 10] = [
    "eth", "ipv4", "ipv6", "tcp", "udp", "vxlan", "gre", "mpls", "esp", "inner",
];

/// Parses the text form of a rule (see the module docs). The result still has to pass
/// [`validate`]; this only checks the syntax.
pub fn parse_rule(line: &str) -> Result<FlowAttr, FlowError> {
    let mut t = Tokens {
        toks: line.split_whitespace().collect(),
        pos: 0,
    };
    let mut attr = FlowAttr::normal(0, Vec::new());
    let ty = match t.peek() {
        Some("normal") => Some(FlowAttrType::Normal),
        Some("all-default") => Some(FlowAttrType::AllDefault),
        Some("mc-default") => Some(FlowAttrType::McDefault),
        Some("sniffer") => Some(FlowAttrType::Sniffer),
        _ => None,
    };
    if let Some(ty) = ty {
        attr.attr_type = ty;
        t.pos += 1;
    }
    while let Some(word) = t.next() {
        match word {
            "prio" => attr.priority = num(t.value(word)?)?,
            "port" => attr.port = num(t.value(word)?)?,
            "dont-trap" => attr.flags = attr.flags | FlowFlags::DONT_TRAP,
            "egress" => attr.flags = attr.flags | FlowFlags::EGRESS,
            "tag" => attr.specs.push(FlowSpec::Tag(num(t.value(word)?)?)),
            "drop" => attr.specs.push(FlowSpec::Drop),
            "count" => attr.specs.push(FlowSpec::Count(Counters::new())),
            "inner" => {
                let kw = t.value(word)?;
                let spec = parse_spec(kw, &mut t)?;
                attr.specs.push(spec.into_inner());
            }
            kw if SPEC_WORDS.contains(&kw) => {
                let spec = parse_spec(kw, &mut t)?;
                attr.specs.push(spec);
            }
            other => return Err(err(format!("unknown word `{other}`"))),
        }
    }
    Ok(attr)
}

fn parse_spec(kw: &str, t: &mut Tokens<'_>) -> Result<FlowSpec, FlowError> {
    // Field words of each spec; a word that is not one of them ends the spec.
    let fields: &[&str] = match kw {
        "eth" => &["dst", "src", "type", "vlan"],
        "ipv4" => &["src", "dst", "proto", "tos", "ttl", "ipflags"],
        "ipv6" => &["src", "dst", "label", "next", "tclass", "hop"],
        "tcp" | "udp" => &["sport", "dport"],
        "vxlan" => &["vni"],
        "gre" => &["cks", "proto", "key"],
        "mpls" => &["label"],
        "esp" => &["spi", "seq"],
        other => return Err(err(format!("`{other}` is not a header spec"))),
    };
    let mut eth = Layer::outer(EthFilter::default(), EthFilter::default());
    let mut ip4 = Layer::outer(Ipv4ExtFilter::default(), Ipv4ExtFilter::default());
    let mut ext = false;
    let mut ip6 = Layer::outer(Ipv6Filter::default(), Ipv6Filter::default());
    let mut ports = Layer::outer(TcpUdpFilter::default(), TcpUdpFilter::default());
    let (mut a32, mut m32, mut a16, mut m16) = (0u32, 0u32, 0u16, 0u16);
    let (mut cks, mut cks_m, mut seq, mut seq_m) = (0u16, 0u16, 0u32, 0u32);
    while let Some(f) = t.peek().filter(|w| fields.contains(w)) {
        t.pos += 1;
        let v = t.value(f)?;
        match (kw, f) {
            ("eth", "dst") => (eth.val.dst_mac, eth.mask.dst_mac) = mac_mask(v)?,
            ("eth", "src") => (eth.val.src_mac, eth.mask.src_mac) = mac_mask(v)?,
            ("eth", "type") => (eth.val.ether_type, eth.mask.ether_type) = num_mask(v, u16::MAX)?,
            ("eth", "vlan") => (eth.val.vlan_tag, eth.mask.vlan_tag) = num_mask(v, 0x0fff)?,
            ("ipv4", "src") => (ip4.val.src_ip, ip4.mask.src_ip) = v4(v)?,
            ("ipv4", "dst") => (ip4.val.dst_ip, ip4.mask.dst_ip) = v4(v)?,
            ("ipv4", "proto") => {
                ext = true;
                (ip4.val.proto, ip4.mask.proto) = num_mask(v, u8::MAX)?;
            }
            ("ipv4", "tos") => {
                ext = true;
                (ip4.val.tos, ip4.mask.tos) = num_mask(v, u8::MAX)?;
            }
            ("ipv4", "ttl") => {
                ext = true;
                (ip4.val.ttl, ip4.mask.ttl) = num_mask(v, u8::MAX)?;
            }
            ("ipv4", "ipflags") => {
                ext = true;
                (ip4.val.flags, ip4.mask.flags) = num_mask(v, u8::MAX)?;
            }
            ("ipv6", "hop") => (ip6.val.hop_limit, ip6.mask.hop_limit) = num_mask(v, u8::MAX)?,
            ("gre", "cks") => (cks, cks_m) = num_mask(v, u16::MAX)?,
            ("esp", "seq") => (seq, seq_m) = num_mask(v, u32::MAX)?,
            ("ipv6", "src") => (ip6.val.src_ip, ip6.mask.src_ip) = v6(v)?,
            ("ipv6", "dst") => (ip6.val.dst_ip, ip6.mask.dst_ip) = v6(v)?,
            ("ipv6", "label") => (ip6.val.flow_label, ip6.mask.flow_label) = num_mask(v, 0xf_ffff)?,
            ("ipv6", "next") => (ip6.val.next_hdr, ip6.mask.next_hdr) = num_mask(v, u8::MAX)?,
            ("ipv6", "tclass") => {
                (ip6.val.traffic_class, ip6.mask.traffic_class) = num_mask(v, u8::MAX)?
            }
            ("tcp" | "udp", "sport") => {
                (ports.val.src_port, ports.mask.src_port) = num_mask(v, u16::MAX)?
            }
            ("tcp" | "udp", "dport") => {
                (ports.val.dst_port, ports.mask.dst_port) = num_mask(v, u16::MAX)?
            }
            ("vxlan", "vni") => (a32, m32) = num_mask(v, 0xff_ffff)?,
            ("gre", "proto") => (a16, m16) = num_mask(v, u16::MAX)?,
            ("gre", "key") | ("mpls", "label") | ("esp", "spi") => {
                let ones = if kw == "mpls" { 0xffff_f000 } else { u32::MAX };
                let (n, m) = num_mask::<u32>(v, ones)?;
                // An MPLS label alone is the 20-bit label; with a mask, the whole entry.
                (a32, m32) = if kw == "mpls" && !v.contains('/') {
                    if n >= 1 << 20 {
                        return Err(err(format!("MPLS label {n} wider than 20 bits")));
                    }
                    (n << 12, m)
                } else {
                    (n, m)
                };
            }
            _ => return Err(err(format!("`{f}` is not a field of {kw}"))),
        }
    }
    Ok(match kw {
        "eth" => FlowSpec::Eth(eth),
        "ipv4" if ext => FlowSpec::Ipv4Ext(ip4),
        "ipv4" => FlowSpec::Ipv4(Layer::outer(
            Ipv4Filter {
                src_ip: ip4.val.src_ip,
                dst_ip: ip4.val.dst_ip,
            },
            Ipv4Filter {
                src_ip: ip4.mask.src_ip,
                dst_ip: ip4.mask.dst_ip,
            },
        )),
        "ipv6" => FlowSpec::Ipv6(ip6),
        "tcp" => FlowSpec::Tcp(ports),
        "udp" => FlowSpec::Udp(ports),
        "vxlan" => FlowSpec::VxlanTunnel(Layer::outer(
            TunnelFilter { tunnel_id: a32 },
            TunnelFilter { tunnel_id: m32 },
        )),
        "gre" => FlowSpec::Gre(Layer::outer(
            GreFilter {
                c_ks_res0_ver: cks,
                protocol: a16,
                key: a32,
            },
            GreFilter {
                c_ks_res0_ver: cks_m,
                protocol: m16,
                key: m32,
            },
        )),
        "mpls" => FlowSpec::Mpls(Layer::outer(
            MplsFilter { label: a32 },
            MplsFilter { label: m32 },
        )),
        _ => FlowSpec::Esp(Layer::outer(
            EspFilter { spi: a32, seq },
            EspFilter {
                spi: m32,
                seq: seq_m,
            },
        )),
    })
}

fn put_num(out: &mut String, key: &str, v: u64, m: u64, ones: u64) {
    if m == 0 && v == 0 {
        return;
    }
    if m == ones {
        let _ = write!(out, " {key} {v}");
    } else {
        let _ = write!(out, " {key} {v:#x}/{m:#x}");
    }
}

fn put_mac(out: &mut String, key: &str, v: [u8; 6], m: [u8; 6]) {
    let f = |a: [u8; 6]| {
        a.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    if m == [0; 6] && v == [0; 6] {
        return;
    }
    if m == [0xff; 6] {
        let _ = write!(out, " {key} {}", f(v));
    } else {
        let _ = write!(out, " {key} {}/{}", f(v), f(m));
    }
}

fn put_addr(
    out: &mut String,
    key: &str,
    v: u128,
    m: u128,
    bits: u32,
    show: impl Fn(u128) -> String,
) {
    if v == 0 && m == 0 {
        return;
    }
    // The mask's bits at the top of a u128, so the prefix length is its leading ones.
    let top = m << (128 - bits);
    let plen = top.leading_ones();
    if plen >= bits {
        let _ = write!(out, " {key} {}", show(v));
    } else if top.checked_shl(plen).unwrap_or(0) == 0 {
        let _ = write!(out, " {key} {}/{}", show(v), plen);
    } else {
        let _ = write!(out, " {key} {}/{}", show(v), show(m));
    }
}

/// [`put_num`] of one field of a spec, read alike from its value and its mask.
fn field<F, T: Into<u64>>(
    out: &mut String,
    key: &str,
    l: &Layer<F>,
    get: impl Fn(&F) -> T,
    ones: u64,
) {
    put_num(out, key, get(&l.val).into(), get(&l.mask).into(), ones);
}

/// [`put_addr`] of one address field of a spec, read alike from its value and its mask.
fn field_addr<F>(
    out: &mut String,
    key: &str,
    l: &Layer<F>,
    get: impl Fn(&F) -> u128,
    bits: u32,
    show: impl Fn(u128) -> String,
) {
    put_addr(out, key, get(&l.val), get(&l.mask), bits, show);
}

/// ` ipv4` and the source and destination address of an IPv4 or IPv4_EXT spec.
fn put_ipv4<F>(out: &mut String, l: &Layer<F>, get: impl Fn(&F) -> (Ipv4Addr, Ipv4Addr)) {
    out.push_str(" ipv4");
    let v4s = |x: u128| Ipv4Addr::from(x as u32).to_string();
    field_addr(out, "src", l, |h| u32::from(get(h).0).into(), 32, v4s);
    field_addr(out, "dst", l, |h| u32::from(get(h).1).into(), 32, v4s);
}

/// The text form of `attr`; [`parse_rule`] reads it back to the same attribute (COUNT
/// actions get fresh counters, ACTION_HANDLE has no text form and is written as
/// `handle N`, which does not parse).
pub fn rule_to_string(attr: &FlowAttr) -> String {
    let mut out = String::new();
    out.push_str(match attr.attr_type {
        FlowAttrType::Normal => "normal",
        FlowAttrType::AllDefault => "all-default",
        FlowAttrType::McDefault => "mc-default",
        FlowAttrType::Sniffer => "sniffer",
    });
    let _ = write!(out, " prio {}", attr.priority);
    if attr.port != 1 {
        let _ = write!(out, " port {}", attr.port);
    }
    if attr.flags.contains(FlowFlags::DONT_TRAP) {
        out.push_str(" dont-trap");
    }
    if attr.flags.contains(FlowFlags::EGRESS) {
        out.push_str(" egress");
    }
    for s in &attr.specs {
        if s.is_inner() {
            out.push_str(" inner");
        }
        match s {
            FlowSpec::Eth(l) => {
                out.push_str(" eth");
                put_mac(&mut out, "dst", l.val.dst_mac, l.mask.dst_mac);
                put_mac(&mut out, "src", l.val.src_mac, l.mask.src_mac);
                field(&mut out, "type", l, |h| h.ether_type, 0xffff);
                field(&mut out, "vlan", l, |h| h.vlan_tag, 0x0fff);
            }
            FlowSpec::Ipv4(l) => put_ipv4(&mut out, l, |h| (h.src_ip, h.dst_ip)),
            FlowSpec::Ipv4Ext(l) => {
                put_ipv4(&mut out, l, |h| (h.src_ip, h.dst_ip));
                // Written even when zero: that is what makes it IPV4_EXT.
                let _ = write!(out, " proto {:#x}/{:#x}", l.val.proto, l.mask.proto);
                field(&mut out, "tos", l, |h| h.tos, 0xff);
                field(&mut out, "ttl", l, |h| h.ttl, 0xff);
                field(&mut out, "ipflags", l, |h| h.flags, 0xff);
            }
            FlowSpec::Ipv6(l) => {
                out.push_str(" ipv6");
                let v6s = |x: u128| Ipv6Addr::from(x).to_string();
                field_addr(&mut out, "src", l, |h| h.src_ip.into(), 128, v6s);
                field_addr(&mut out, "dst", l, |h| h.dst_ip.into(), 128, v6s);
                field(&mut out, "label", l, |h| h.flow_label, 0xf_ffff);
                field(&mut out, "next", l, |h| h.next_hdr, 0xff);
                field(&mut out, "tclass", l, |h| h.traffic_class, 0xff);
                field(&mut out, "hop", l, |h| h.hop_limit, 0xff);
            }
            FlowSpec::Tcp(l) | FlowSpec::Udp(l) => {
                out.push_str(if matches!(s, FlowSpec::Tcp(_)) {
                    " tcp"
                } else {
                    " udp"
                });
                field(&mut out, "sport", l, |h| h.src_port, 0xffff);
                field(&mut out, "dport", l, |h| h.dst_port, 0xffff);
            }
            FlowSpec::VxlanTunnel(l) => {
                out.push_str(" vxlan");
                field(&mut out, "vni", l, |h| h.tunnel_id, 0xff_ffff);
            }
            FlowSpec::Gre(l) => {
                out.push_str(" gre");
                field(&mut out, "cks", l, |h| h.c_ks_res0_ver, 0xffff);
                field(&mut out, "proto", l, |h| h.protocol, 0xffff);
                field(&mut out, "key", l, |h| h.key, 0xffff_ffff);
            }
            FlowSpec::Mpls(l) => {
                out.push_str(" mpls");
                if l.val.label != 0 || l.mask.label != 0 {
                    let _ = write!(out, " label {:#x}/{:#x}", l.val.label, l.mask.label);
                }
            }
            FlowSpec::Esp(l) => {
                out.push_str(" esp");
                field(&mut out, "spi", l, |h| h.spi, 0xffff_ffff);
                field(&mut out, "seq", l, |h| h.seq, 0xffff_ffff);
            }
            FlowSpec::Tag(t) => {
                let _ = write!(out, " tag {t}");
            }
            FlowSpec::Drop => out.push_str(" drop"),
            FlowSpec::Count(_) => out.push_str(" count"),
            FlowSpec::ActionHandle(h) => {
                let _ = write!(out, " handle {h}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &FlowAttr, b: &FlowAttr) -> bool {
        // Counters are fresh objects on every parse.
        let strip = |x: &FlowAttr| {
            let mut x = x.clone();
            for s in &mut x.specs {
                if let FlowSpec::Count(_) = s {
                    *s = FlowSpec::Tag(u32::MAX);
                }
            }
            x
        };
        strip(a) == strip(b)
    }

    #[test]
    fn rules_round_trip() {
        for line in [
            "prio 1 ipv4 dst 10.0.0.2 udp dport 4791 tag 1",
            "normal prio 0 dont-trap udp tag 7 count",
            "sniffer",
            "all-default",
            "mc-default prio 3 port 2",
            "egress prio 2 udp dport 9 drop",
            "eth dst 01:00:5e:00:00:01/ff:ff:ff:00:00:00 src 02:00:00:00:00:0a type 0x800 vlan 100",
            "ipv4 src 10.0.0.0/8 dst 10.1.0.0/255.255.0.255 proto 17 tos 0x10/0xfc",
            "ipv4 proto 0x0/0x0",
            "ipv6 src fd00::/16 dst fd00::2 label 0x12345 next 17 tclass 0xb8",
            "tcp sport 0x1200/0xff00 dport 80",
            "vxlan vni 42 inner ipv4 dst 192.168.0.2 inner tcp dport 22",
            "gre proto 0x6558 key 7",
            "udp dport 6635 mpls label 300",
            "mpls label 0x12c100/0xfffff100",
            "esp spi 0x1000",
            "inner esp spi 5",
            "inner eth vlan 0x123/0xfff",
        ] {
            let a = parse_rule(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let text = rule_to_string(&a);
            let b = parse_rule(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(same(&a, &b), "{line} -> {text} -> {b:?}");
        }
    }

    #[test]
    fn meaning_of_the_words() {
        let a = parse_rule("prio 3 ipv4 dst 10.0.0.0/24 udp dport 4791 tag 9").unwrap();
        assert_eq!(a.priority, 3);
        assert_eq!(
            a.specs[0],
            FlowSpec::Ipv4(Layer::outer(
                Ipv4Filter {
                    dst_ip: Ipv4Addr::new(10, 0, 0, 0),
                    ..Default::default()
                },
                Ipv4Filter {
                    dst_ip: Ipv4Addr::new(255, 255, 255, 0),
                    ..Default::default()
                },
            ))
        );
        assert_eq!(a.specs[1], FlowSpec::udp_dst(Some(4791)));
        assert_eq!(a.tag(), Some(9));
        let m = parse_rule("mpls label 300").unwrap();
        assert_eq!(
            m.specs[0],
            FlowSpec::Mpls(Layer::outer(
                MplsFilter { label: 300 << 12 },
                MplsFilter { label: 0xffff_f000 }
            ))
        );
        assert!(matches!(
            parse_rule("ipv4 tos 4").unwrap().specs[0],
            FlowSpec::Ipv4Ext(_)
        ));
    }

    #[test]
    fn bad_text_is_einval() {
        for bad in [
            "bogus",
            "prio",
            "prio x",
            "prio 70000",
            "udp dport",
            "udp dport 65536",
            "ipv4 dst 10.0.0.300",
            "ipv4 dst 10.0.0.0/33",
            "eth dst 1:2:3",
            "tag",
            "inner",
            "inner tag 1",
            "mpls label 0x100000",
            "udp vni 3",
            "vxlan dport 3",
        ] {
            let e = parse_rule(bad).expect_err(bad);
            assert_eq!(e.errno(), crate::error::errno::EINVAL, "{bad}");
        }
    }
}
