//! The kernel's uverbs layout of a flow: `struct ib_uverbs_flow_attr` followed by
//! `struct ib_uverbs_flow_spec_*` TLVs (`include/uapi/rdma/ib_user_verbs.h`, as copied in
//! rdma-core `kernel-headers/rdma/ib_user_verbs.h`), written and read field by field.
//!
//! Byte order: the `__u32`/`__u16` fields (types, sizes, priority, flags, tag, handles)
//! are in host order; the `__be16`/`__be32` fields (EtherType, VLAN TCI, IP addresses,
//! ports, flow label, VNI, GRE fields, MPLS entry) in network order. The ESP filter's
//! `spi`/`seq` are declared `__u32` but hold network-order values (rdma-core's man page:
//! "network parameters ... in network order"; mlx5 applies `ntohl` to them), so they are
//! written big-endian too.
//!
//! The plain IPV4 spec (0x30, 8-byte filters) is rdma-core's `ibv_kern_spec_ipv4`
//! (24 bytes); IPV4_EXT becomes type 0x30 with the 12-byte `ib_uverbs_flow_ipv4_filter`
//! (32 bytes), exactly as rdma-core's `ib_spec_to_kern_spec` (`libibverbs/cmd.c`) sends
//! them. [`decode_flow_attr`] applies the kernel's checks (`ib_uverbs_ex_create_flow`,
//! `kern_spec_to_ib_spec_filter`, `kern_spec_to_ib_spec_action`).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::attr::*;
use crate::error::{errno, FlowError};

/// Size of `struct ib_uverbs_flow_attr` (without specs).
pub const FLOW_ATTR_LEN: usize = 16;
/// Size of `struct ib_uverbs_flow_spec_hdr`.
pub const SPEC_HDR_LEN: usize = 8;
/// `sizeof(union ib_uverbs_flow_spec)` in the kernel (`core/uverbs.h`): its largest
/// member, the IPv6 spec. `flow_attr.size` may not exceed `num_of_specs` times this.
pub const MAX_SPEC_LEN: usize = 88;

/// Kernel size of each spec (`sizeof(struct ib_uverbs_flow_spec_*)`).
pub mod spec_len {
    /// `ib_uverbs_flow_spec_eth`.
    pub const ETH: usize = 40;
    /// rdma-core `ibv_kern_spec_ipv4` (plain IPV4).
    pub const IPV4: usize = 24;
    /// `ib_uverbs_flow_spec_ipv4` (IPV4_EXT).
    pub const IPV4_EXT: usize = 32;
    /// `ib_uverbs_flow_spec_ipv6`.
    pub const IPV6: usize = 88;
    /// `ib_uverbs_flow_spec_tcp_udp`.
    pub const TCP_UDP: usize = 16;
    /// `ib_uverbs_flow_spec_tunnel`.
    pub const TUNNEL: usize = 16;
    /// `ib_uverbs_flow_spec_esp`.
    pub const ESP: usize = 24;
    /// `ib_uverbs_flow_spec_gre`.
    pub const GRE: usize = 24;
    /// `ib_uverbs_flow_spec_mpls`.
    pub const MPLS: usize = 16;
    /// `ib_uverbs_flow_spec_action_tag`.
    pub const TAG: usize = 16;
    /// `ib_uverbs_flow_spec_action_drop`.
    pub const DROP: usize = 8;
    /// `ib_uverbs_flow_spec_action_handle`.
    pub const HANDLE: usize = 16;
    /// `ib_uverbs_flow_spec_action_count`.
    pub const COUNT: usize = 16;
}

/// The kernel-side filter size (`offsetof(struct ib_flow_*_filter, real_sz)`,
/// `include/rdma/ib_verbs.h`) of a header spec type (INNER bit clear), or `None` for a
/// type the kernel does not know.
fn kernel_filter_len(base: u32) -> Option<usize> {
    Some(match base {
        spec_type::ETH => 16,
        spec_type::IPV4 => 12,
        spec_type::IPV6 => 39,
        spec_type::TCP | spec_type::UDP => 4,
        spec_type::VXLAN_TUNNEL => 4,
        spec_type::ESP => 8,
        spec_type::GRE => 8,
        spec_type::MPLS => 4,
        _ => return None,
    })
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_ne_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_ne_bytes());
    }
    fn be16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn be32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.0.extend_from_slice(v);
    }
    fn hdr(&mut self, ty: u32, size: usize) {
        self.u32(ty);
        self.u16(size as u16);
        self.u16(0); // reserved
    }
}

fn eth_filter(w: &mut W, f: &EthFilter) {
    w.bytes(&f.dst_mac);
    w.bytes(&f.src_mac);
    w.be16(f.ether_type);
    w.be16(f.vlan_tag);
}

fn ipv4_filter(w: &mut W, f: &Ipv4Filter) {
    w.bytes(&f.src_ip.octets());
    w.bytes(&f.dst_ip.octets());
}

fn ipv4_ext_filter(w: &mut W, f: &Ipv4ExtFilter) {
    w.bytes(&f.src_ip.octets());
    w.bytes(&f.dst_ip.octets());
    w.u8(f.proto);
    w.u8(f.tos);
    w.u8(f.ttl);
    w.u8(f.flags);
}

fn ipv6_filter(w: &mut W, f: &Ipv6Filter) {
    w.bytes(&f.src_ip.octets());
    w.bytes(&f.dst_ip.octets());
    w.be32(f.flow_label);
    w.u8(f.next_hdr);
    w.u8(f.traffic_class);
    w.u8(f.hop_limit);
    w.u8(0); // reserved
}

fn tcp_udp_filter(w: &mut W, f: &TcpUdpFilter) {
    w.be16(f.dst_port);
    w.be16(f.src_port);
}

fn gre_filter(w: &mut W, f: &GreFilter) {
    w.be16(f.c_ks_res0_ver);
    w.be16(f.protocol);
    w.be32(f.key);
}

fn esp_filter(w: &mut W, f: &EspFilter) {
    w.be32(f.spi);
    w.be32(f.seq);
}

/// Appends one spec in kernel layout.
fn encode_spec(w: &mut W, spec: &FlowSpec) {
    let inner = if spec.is_inner() { spec_type::INNER } else { 0 };
    match spec {
        FlowSpec::Eth(l) => {
            w.hdr(spec_type::ETH | inner, spec_len::ETH);
            eth_filter(w, &l.val);
            eth_filter(w, &l.mask);
        }
        FlowSpec::Ipv4(l) => {
            w.hdr(spec_type::IPV4 | inner, spec_len::IPV4);
            ipv4_filter(w, &l.val);
            ipv4_filter(w, &l.mask);
        }
        FlowSpec::Ipv4Ext(l) => {
            // rdma-core sends IPV4_EXT as the kernel's IPV4 with the long filter.
            w.hdr(spec_type::IPV4 | inner, spec_len::IPV4_EXT);
            ipv4_ext_filter(w, &l.val);
            ipv4_ext_filter(w, &l.mask);
        }
        FlowSpec::Ipv6(l) => {
            w.hdr(spec_type::IPV6 | inner, spec_len::IPV6);
            ipv6_filter(w, &l.val);
            ipv6_filter(w, &l.mask);
        }
        FlowSpec::Tcp(l) | FlowSpec::Udp(l) => {
            w.hdr(spec.type_code(), spec_len::TCP_UDP);
            tcp_udp_filter(w, &l.val);
            tcp_udp_filter(w, &l.mask);
        }
        FlowSpec::VxlanTunnel(l) => {
            w.hdr(spec.type_code(), spec_len::TUNNEL);
            w.be32(l.val.tunnel_id);
            w.be32(l.mask.tunnel_id);
        }
        FlowSpec::Gre(l) => {
            w.hdr(spec.type_code(), spec_len::GRE);
            gre_filter(w, &l.val);
            gre_filter(w, &l.mask);
        }
        FlowSpec::Mpls(l) => {
            w.hdr(spec.type_code(), spec_len::MPLS);
            w.be32(l.val.label);
            w.be32(l.mask.label);
        }
        FlowSpec::Esp(l) => {
            w.hdr(spec.type_code(), spec_len::ESP);
            esp_filter(w, &l.val);
            esp_filter(w, &l.mask);
        }
        FlowSpec::Tag(t) => {
            w.hdr(spec_type::ACTION_TAG, spec_len::TAG);
            w.u32(*t);
            w.u32(0);
        }
        FlowSpec::Drop => w.hdr(spec_type::ACTION_DROP, spec_len::DROP),
        FlowSpec::Count(c) => {
            w.hdr(spec_type::ACTION_COUNT, spec_len::COUNT);
            w.u32(c.handle());
            w.u32(0);
        }
        FlowSpec::ActionHandle(h) => {
            w.hdr(spec_type::ACTION_HANDLE, spec_len::HANDLE);
            w.u32(*h);
            w.u32(0);
        }
    }
}

/// `struct ib_uverbs_flow_attr` followed by the specs, as the kernel reads them.
/// `size` is the specs' total length, `num_of_specs` their count (truncated to `u8`: a
/// validated attribute has at most [`MAX_SPECS`]).
pub fn encode_flow_attr(attr: &FlowAttr) -> Vec<u8> {
    let mut specs = W(Vec::new());
    for s in &attr.specs {
        encode_spec(&mut specs, s);
    }
    let mut w = W(Vec::with_capacity(FLOW_ATTR_LEN + specs.0.len()));
    w.u32(attr.attr_type as u32);
    w.u16(specs.0.len() as u16);
    w.u16(attr.priority);
    w.u8(attr.specs.len() as u8);
    w.bytes(&[0, 0]); // reserved[2]
    w.u8(attr.port);
    w.u32(attr.flags.bits());
    w.bytes(&specs.0);
    w.0
}

/// `struct ib_uverbs_create_flow` (the payload after the extended command header):
/// comp_mask 0, `qp_handle`, then [`encode_flow_attr`].
pub fn encode_create_flow(attr: &FlowAttr, qp_handle: u32) -> Vec<u8> {
    let mut w = W(Vec::new());
    w.u32(0); // comp_mask
    w.u32(qp_handle);
    w.bytes(&encode_flow_attr(attr));
    w.0
}

struct R<'a>(&'a [u8]);

impl R<'_> {
    fn u8(&self, off: usize) -> u8 {
        self.0[off]
    }
    fn u16(&self, off: usize) -> u16 {
        u16::from_ne_bytes([self.0[off], self.0[off + 1]])
    }
    fn u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes([
            self.0[off],
            self.0[off + 1],
            self.0[off + 2],
            self.0[off + 3],
        ])
    }
    fn be16(&self, off: usize) -> u16 {
        u16::from_be_bytes([self.0[off], self.0[off + 1]])
    }
    fn be32(&self, off: usize) -> u32 {
        u32::from_be_bytes([
            self.0[off],
            self.0[off + 1],
            self.0[off + 2],
            self.0[off + 3],
        ])
    }
    fn arr<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut a = [0; N];
        a.copy_from_slice(&self.0[off..off + N]);
        a
    }
}

/// Resolves the handle of an `ACTION_COUNT` spec to its counters (the kernel looks up an
/// `ibv_counters` object; an unknown handle is EINVAL).
pub type CountersLookup<'a> = &'a dyn Fn(u32) -> Option<Counters>;

/// Reads `struct ib_uverbs_flow_attr` + specs with the kernel's checks. `bytes` is the
/// attribute and its specs (what follows `comp_mask` and `qp_handle` in
/// `ib_uverbs_create_flow`); bytes after `size` are ignored like the kernel's.
pub fn decode_flow_attr(bytes: &[u8], counters: CountersLookup<'_>) -> Result<FlowAttr, FlowError> {
    if bytes.len() < FLOW_ATTR_LEN {
        return Err(FlowError::inval("command shorter than ib_uverbs_flow_attr"));
    }
    let r = R(bytes);
    let raw_type = r.u32(0);
    let size = usize::from(r.u16(4));
    let priority = r.u16(6);
    let num = usize::from(r.u8(8));
    let port = r.u8(11);
    let flags = r.u32(12);
    // ib_uverbs_ex_create_flow, in its order.
    if flags >= 1 << 3 {
        return Err(FlowError::inval(format!(
            "flags {flags:#x} >= IB_FLOW_ATTR_FLAGS_RESERVED"
        )));
    }
    let attr_type = FlowAttrType::from_raw(raw_type);
    if flags & FlowFlags::DONT_TRAP.bits() != 0
        && matches!(
            attr_type,
            Some(FlowAttrType::AllDefault | FlowAttrType::McDefault)
        )
    {
        return Err(FlowError::inval("DONT_TRAP on a default rule"));
    }
    if num > MAX_SPECS {
        return Err(FlowError::inval(format!(
            "num_of_specs {num} > IB_FLOW_SPEC_SUPPORT_LAYERS ({MAX_SPECS})"
        )));
    }
    if size > num * MAX_SPEC_LEN {
        return Err(FlowError::inval(format!(
            "size {size} larger than {num} specs can be"
        )));
    }
    if r.u8(9) != 0 || r.u8(10) != 0 {
        return Err(FlowError::inval("flow_attr.reserved is not zero"));
    }
    let Some(attr_type) = attr_type else {
        // mlx5_ib_create_flow: a type it does not know is EINVAL.
        return Err(FlowError::inval(format!(
            "unknown flow attr type {raw_type}"
        )));
    };
    let Some(specs_bytes) = bytes.get(FLOW_ATTR_LEN..FLOW_ATTR_LEN + size) else {
        return Err(FlowError::inval(format!(
            "size {size} runs past the {}-byte command",
            bytes.len()
        )));
    };
    let mut specs = Vec::with_capacity(num);
    let mut rest = specs_bytes;
    while specs.len() < num && rest.len() >= SPEC_HDR_LEN {
        let sr = R(rest);
        let ty = sr.u32(0);
        let len = usize::from(sr.u16(4));
        if len > rest.len() {
            break;
        }
        if sr.u16(6) != 0 {
            return Err(FlowError::inval("spec reserved field is not zero"));
        }
        specs.push(decode_spec(ty, &rest[..len], counters)?);
        rest = &rest[len..];
    }
    if !rest.is_empty() || specs.len() != num {
        return Err(FlowError::inval(format!(
            "{} bytes left over after {} of {num} specs",
            rest.len(),
            specs.len()
        )));
    }
    Ok(FlowAttr {
        attr_type,
        priority,
        port,
        flags: FlowFlags::from_bits_retain(flags),
        specs,
    })
}

fn decode_spec(ty: u32, b: &[u8], counters: CountersLookup<'_>) -> Result<FlowSpec, FlowError> {
    let len = b.len();
    let r = R(b);
    if ty >= spec_type::ACTION_TAG {
        // kern_spec_to_ib_spec_action
        return match ty {
            spec_type::ACTION_TAG if len == spec_len::TAG => Ok(FlowSpec::Tag(r.u32(8))),
            spec_type::ACTION_DROP if len == spec_len::DROP => Ok(FlowSpec::Drop),
            spec_type::ACTION_HANDLE if len != spec_len::HANDLE => {
                Err(FlowError::notsupp("ACTION_HANDLE spec of the wrong size"))
            }
            spec_type::ACTION_HANDLE => Err(FlowError::inval(format!(
                "no flow action with handle {}",
                r.u32(8)
            ))),
            spec_type::ACTION_COUNT if len == spec_len::COUNT => {
                let h = r.u32(8);
                counters(h)
                    .map(FlowSpec::Count)
                    .ok_or_else(|| FlowError::inval(format!("no counters with handle {h}")))
            }
            spec_type::ACTION_TAG | spec_type::ACTION_DROP | spec_type::ACTION_COUNT => Err(
                FlowError::inval(format!("action spec {ty:#x} of size {len}")),
            ),
            _ => Err(FlowError::inval(format!(
                "unknown action spec type {ty:#x}"
            ))),
        };
    }
    // kern_spec_to_ib_spec_filter / ib_uverbs_kern_spec_to_ib_spec_filter
    let Some(fsz) = len.checked_sub(SPEC_HDR_LEN).map(|n| n / 2) else {
        return Err(FlowError::inval("spec shorter than its header"));
    };
    if fsz % 4 != 0 {
        return Err(FlowError::inval(format!(
            "filter size {fsz} is not a multiple of 4"
        )));
    }
    if ty == spec_type::INNER | spec_type::VXLAN_TUNNEL {
        return Err(FlowError::inval("VXLAN_TUNNEL cannot be INNER"));
    }
    let inner = ty & spec_type::INNER != 0;
    let base = ty & !spec_type::INNER;
    let Some(real) = kernel_filter_len(base).filter(|_| ty & !(spec_type::INNER | 0xff) == 0)
    else {
        return Err(FlowError::inval(format!("unknown flow spec type {ty:#x}")));
    };
    let (val_off, mask_off) = (SPEC_HDR_LEN, SPEC_HDR_LEN + fsz);
    // spec_filter_size: mask bytes the kernel does not know must be zero.
    if fsz > real && b[mask_off + real..mask_off + fsz].iter().any(|&x| x != 0) {
        return Err(FlowError::inval(
            "mask bits beyond the kernel's filter are set",
        ));
    }
    let actual = fsz.min(real);
    if actual == 0 {
        return Err(FlowError::inval("empty filter"));
    }
    // The kernel copies `actual` bytes into a zeroed filter.
    let mut val = [0u8; 40];
    let mut mask = [0u8; 40];
    val[..actual].copy_from_slice(&b[val_off..val_off + actual]);
    mask[..actual].copy_from_slice(&b[mask_off..mask_off + actual]);
    let (v, m) = (R(&val), R(&mask));
    fn lay<F>(inner: bool, val: F, mask: F) -> Layer<F> {
        Layer { inner, val, mask }
    }
    let spec = match base {
        spec_type::ETH => {
            let f = |x: &R| EthFilter {
                dst_mac: x.arr(0),
                src_mac: x.arr(6),
                ether_type: x.be16(12),
                vlan_tag: x.be16(14),
            };
            FlowSpec::Eth(lay(inner, f(&v), f(&m)))
        }
        spec_type::IPV4 if len == spec_len::IPV4 => {
            let f = |x: &R| Ipv4Filter {
                src_ip: Ipv4Addr::from(x.arr::<4>(0)),
                dst_ip: Ipv4Addr::from(x.arr::<4>(4)),
            };
            FlowSpec::Ipv4(lay(inner, f(&v), f(&m)))
        }
        spec_type::IPV4 => {
            let f = |x: &R| Ipv4ExtFilter {
                src_ip: Ipv4Addr::from(x.arr::<4>(0)),
                dst_ip: Ipv4Addr::from(x.arr::<4>(4)),
                proto: x.u8(8),
                tos: x.u8(9),
                ttl: x.u8(10),
                flags: x.u8(11),
            };
            FlowSpec::Ipv4Ext(lay(inner, f(&v), f(&m)))
        }
        spec_type::IPV6 => {
            let f = |x: &R| Ipv6Filter {
                src_ip: Ipv6Addr::from(x.arr::<16>(0)),
                dst_ip: Ipv6Addr::from(x.arr::<16>(16)),
                flow_label: x.be32(32),
                next_hdr: x.u8(36),
                traffic_class: x.u8(37),
                hop_limit: x.u8(38),
            };
            let l = lay(inner, f(&v), f(&m));
            if l.val.flow_label >= 1 << 20 || l.mask.flow_label >= 1 << 20 {
                return Err(FlowError::inval("IPv6 flow label wider than 20 bits"));
            }
            FlowSpec::Ipv6(l)
        }
        spec_type::TCP | spec_type::UDP => {
            let f = |x: &R| TcpUdpFilter {
                dst_port: x.be16(0),
                src_port: x.be16(2),
            };
            let l = lay(inner, f(&v), f(&m));
            if base == spec_type::TCP {
                FlowSpec::Tcp(l)
            } else {
                FlowSpec::Udp(l)
            }
        }
        spec_type::VXLAN_TUNNEL => {
            let l = lay(
                inner,
                TunnelFilter {
                    tunnel_id: v.be32(0),
                },
                TunnelFilter {
                    tunnel_id: m.be32(0),
                },
            );
            if l.val.tunnel_id >= 1 << 24 || l.mask.tunnel_id >= 1 << 24 {
                return Err(FlowError::inval("VXLAN tunnel id wider than 24 bits"));
            }
            FlowSpec::VxlanTunnel(l)
        }
        spec_type::ESP => {
            let f = |x: &R| EspFilter {
                spi: x.be32(0),
                seq: x.be32(4),
            };
            FlowSpec::Esp(lay(inner, f(&v), f(&m)))
        }
        spec_type::GRE => {
            let f = |x: &R| GreFilter {
                c_ks_res0_ver: x.be16(0),
                protocol: x.be16(2),
                key: x.be32(4),
            };
            FlowSpec::Gre(lay(inner, f(&v), f(&m)))
        }
        spec_type::MPLS => FlowSpec::Mpls(lay(
            inner,
            MplsFilter { label: v.be32(0) },
            MplsFilter { label: m.be32(0) },
        )),
        _ => {
            return Err(FlowError::new(
                errno::EINVAL,
                format!("unknown flow spec type {ty:#x}"),
            ))
        }
    };
    Ok(spec)
}
