//! What rdma_cm adds on top of ib_cm: IP port-space service IDs and the 36-byte header
//! it puts at the front of the REQ's (and SIDR_REQ's) private data (kernel cma.c
//! `struct cma_hdr`, `cma_get_service_id`, `cma_format_hdr`; rdma-core
//! `librdmacm/cma.h`).

use crate::consts::private_len;
use crate::CmError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// rdma_cm port spaces (kernel `enum rdma_ucm_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// RDMA_PS_TCP (RC).
    Tcp,
    /// RDMA_PS_UDP (UD, via SIDR).
    Udp,
    /// RDMA_PS_IB (any QP type).
    Ib,
    /// RDMA_PS_IPOIB.
    Ipoib,
}

impl PortSpace {
    /// The port-space number.
    pub const fn number(self) -> u16 {
        match self {
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ib => 0x013f,
            PortSpace::Ipoib => 0x0002,
        }
    }

    /// The port space of a number.
    pub const fn from_number(n: u16) -> Option<Self> {
        match n {
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            0x013f => Some(PortSpace::Ib),
            0x0002 => Some(PortSpace::Ipoib),
            _ => None,
        }
    }
}

/// The service ID of an IP port: `(port space << 16) + port` (kernel cma.c
/// `cma_get_service_id`; `RDMA_IB_IP_PS_TCP` = 0x0000000001060000).
pub const fn service_id(ps: PortSpace, port: u16) -> u64 {
    ((ps.number() as u64) << 16) | port as u64
}

/// The port space and port of an IP service ID (`RDMA_IB_IP_PS_MASK`), if it is one.
pub const fn split_service_id(sid: u64) -> Option<(PortSpace, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    match PortSpace::from_number((sid >> 16) as u16) {
        Some(ps) => Some((ps, sid as u16)),
        None => None,
    }
}

/// Length of the rdma_cm header.
pub const CMA_HDR_LEN: usize = 36;
/// The header's version byte (kernel cma.c `CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;
/// User private data an rdma_connect REQ carries (92 - 36; librdmacm
/// `rdma_connect` limit for IP port spaces).
pub const CMA_REQ_USER_LEN: usize = private_len::REQ - CMA_HDR_LEN;
/// User private data an rdma_resolve over UD SIDR_REQ carries (216 - 36).
pub const CMA_SIDR_REQ_USER_LEN: usize = private_len::SIDR_REQ - CMA_HDR_LEN;

/// The rdma_cm header: who connects to whom, by IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHeader {
    /// The active side's source port.
    pub src_port: u16,
    /// The active side's IP address.
    pub src: IpAddr,
    /// The address it connects to.
    pub dst: IpAddr,
}

fn put_ip(out: &mut [u8], ip: IpAddr) {
    match ip {
        // union cma_ip_addr: IPv4 lives in the last 4 bytes after 12 bytes of padding.
        IpAddr::V4(v4) => out[12..16].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
    }
}

impl CmaHeader {
    /// Writes the header (version 0, IP version in the high nibble of byte 1) and
    /// `user` after it. `EINVAL` ([`CmError::PrivateDataTooLong`]) past `limit` bytes in
    /// all, and `EINVAL` ([`CmError::InvalidArgument`]) for mixed address families.
    pub fn encode(&self, user: &[u8], limit: usize) -> Result<Vec<u8>, CmError> {
        if CMA_HDR_LEN + user.len() > limit {
            return Err(CmError::PrivateDataTooLong);
        }
        let ipv = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4u8,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6u8,
            _ => {
                return Err(CmError::InvalidArgument(
                    "source and destination families differ",
                ))
            }
        };
        let mut out = vec![0u8; CMA_HDR_LEN + user.len()];
        out[0] = CMA_VERSION;
        out[1] = ipv << 4;
        out[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        put_ip(&mut out[4..20], self.src);
        put_ip(&mut out[20..36], self.dst);
        out[CMA_HDR_LEN..].copy_from_slice(user);
        Ok(out)
    }

    /// Reads the header at the front of `pd`, returning it and the user's bytes after
    /// it; errors as the kernel's `cma_check_hdr` (wrong version, IP version not 4/6).
    pub fn parse(pd: &[u8]) -> Result<(CmaHeader, &[u8]), CmError> {
        if pd.len() < CMA_HDR_LEN {
            return Err(CmError::InvalidArgument(
                "private data shorter than the rdma_cm header",
            ));
        }
        if pd[0] != CMA_VERSION {
            return Err(CmError::InvalidArgument("rdma_cm header version"));
        }
        let ip = |b: &[u8]| -> [u8; 16] { b.try_into().unwrap_or([0; 16]) };
        let (src, dst) = match pd[1] >> 4 {
            4 => {
                let s: [u8; 4] = [pd[16], pd[17], pd[18], pd[19]];
                let d: [u8; 4] = [pd[32], pd[33], pd[34], pd[35]];
                (IpAddr::V4(Ipv4Addr::from(s)), IpAddr::V4(Ipv4Addr::from(d)))
            }
            6 => (
                IpAddr::V6(Ipv6Addr::from(ip(&pd[4..20]))),
                IpAddr::V6(Ipv6Addr::from(ip(&pd[20..36]))),
            ),
            _ => return Err(CmError::InvalidArgument("rdma_cm header IP version")),
        };
        let src_port = u16::from_be_bytes([pd[2], pd[3]]);
        Ok((CmaHeader { src_port, src, dst }, &pd[CMA_HDR_LEN..]))
    }
}

/// The GID of an IP address on RoCE v2: IPv4-mapped IPv6 for IPv4 (kernel
/// `rdma_ip2gid`).
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_of_the_port_spaces() {
        assert_eq!(service_id(PortSpace::Tcp, 7174), 0x0000_0000_0106_1c06);
        assert_eq!(service_id(PortSpace::Udp, 1), 0x0111_0001);
        assert_eq!(service_id(PortSpace::Ib, 2), 0x013f_0002);
        assert_eq!(split_service_id(0x0106_1c06), Some((PortSpace::Tcp, 7174)));
        assert_eq!(split_service_id(0x0123_0001), None);
        assert_eq!(split_service_id(0x1_0106_0001), None);
    }

    /// The header of the golden rxe REQ (rping 10.77.0.3:44471 -> 10.77.0.2).
    #[test]
    fn header_matches_the_kernel_layout() {
        let h = CmaHeader {
            src_port: 0xadb7,
            src: "10.77.0.3".parse().unwrap(),
            dst: "10.77.0.2".parse().unwrap(),
        };
        let pd = h.encode(&[], private_len::REQ).unwrap();
        assert_eq!(&pd[..4], &[0x00, 0x40, 0xad, 0xb7]);
        assert_eq!(&pd[16..20], &[10, 77, 0, 3]);
        assert_eq!(&pd[32..36], &[10, 77, 0, 2]);
        assert!(pd[4..16].iter().chain(&pd[20..32]).all(|&b| b == 0));
        let mut full = pd.clone();
        full.resize(private_len::REQ, 0);
        let (back, user) = CmaHeader::parse(&full).unwrap();
        assert_eq!(back, h);
        assert_eq!(user.len(), CMA_REQ_USER_LEN);
    }

    #[test]
    fn user_limits_and_bad_headers() {
        let h = CmaHeader {
            src_port: 1,
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
        };
        assert!(h.encode(&[7; CMA_REQ_USER_LEN], private_len::REQ).is_ok());
        assert_eq!(
            h.encode(&[7; CMA_REQ_USER_LEN + 1], private_len::REQ),
            Err(CmError::PrivateDataTooLong)
        );
        let pd = h.encode(b"hi", private_len::REQ).unwrap();
        let (back, user) = CmaHeader::parse(&pd).unwrap();
        assert_eq!((back, user), (h, &b"hi"[..]));
        let mixed = CmaHeader {
            dst: "10.0.0.1".parse().unwrap(),
            ..h
        };
        assert!(mixed.encode(&[], 92).is_err());
        let mut bad = pd.clone();
        bad[0] = 1;
        assert!(CmaHeader::parse(&bad).is_err());
        bad[0] = 0;
        bad[1] = 0x50;
        assert!(CmaHeader::parse(&bad).is_err());
        assert!(CmaHeader::parse(&pd[..35]).is_err());
        assert_eq!(
            ip_to_gid("10.0.0.1".parse().unwrap())[10..],
            [0xff, 0xff, 10, 0, 0, 1]
        );
    }
}
