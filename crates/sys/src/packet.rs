//! Packet sockets (`AF_PACKET`, `packet(7)`): binding to an interface, socket
//! filters, `PACKET_AUXDATA` receives and the `TPACKET_V3` memory-mapped receive ring.

use crate::mem::Mapping;
use crate::opt::set_int_opt;
use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

/// `if_nametoindex(3)`.
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a live NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// Binds an AF_PACKET socket to interface `ifindex` for every EtherType (`packet(7)`).
pub fn bind_packet(fd: &impl AsRawFd, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `fd` is an open socket; the address points at a live sockaddr_ll of the
    // size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One classic BPF instruction (`struct sock_filter`, linux/filter.h) of a socket
/// filter program ([`attach_filter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockFilter {
    /// Opcode (`BPF_LD | BPF_H | BPF_ABS`, ...).
    pub code: u16,
    /// Jump offset when the test is true.
    pub jt: u8,
    /// Jump offset when the test is false.
    pub jf: u8,
    /// The instruction's constant.
    pub k: u32,
}

/// Attaches the classic BPF program `prog` to `fd` (`SO_ATTACH_FILTER`, `socket(7)`).
pub fn attach_filter(fd: &impl AsRawFd, prog: &[SockFilter]) -> io::Result<()> {
    let mut ins: Vec<libc::sock_filter> = prog
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let len = u16::try_from(ins.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fprog = libc::sock_fprog {
        len,
        filter: ins.as_mut_ptr(),
    };
    // SAFETY: `fd` is an open socket; `fprog` points at `ins`, which outlives the call
    // (the kernel copies the program).
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets an int-valued `SOL_PACKET` option.
pub fn set_packet_opt(fd: &impl AsRawFd, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    set_int_opt(fd, libc::SOL_PACKET, opt, v)
}

/// What `PACKET_AUXDATA` tells about a received frame (`struct tpacket_auxdata`,
/// linux/if_packet.h).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Aux {
    /// `tp_status` (`TP_STATUS_*`).
    pub status: u32,
    /// Original length on the wire (`tp_len`).
    pub len: u32,
    /// `tp_vlan_tci`.
    pub vlan_tci: u16,
    /// `tp_vlan_tpid`.
    pub vlan_tpid: u16,
}

/// `PACKET_AUXDATA` (linux/if_packet.h).
pub const PACKET_AUXDATA: libc::c_int = 8;

/// `recvmsg(2)` of one frame into `buf`, with the `PACKET_AUXDATA` control message if
/// the kernel sent one. Returns the frame's real length (`MSG_TRUNC`, `packet(7)`):
/// more than `buf.len()` when the frame did not fit and `buf` holds only its start.
pub fn recv_with_aux(fd: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, Option<Aux>)> {
    // Room for one cmsghdr + tpacket_auxdata (20 bytes), generously aligned.
    let mut ctrl = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
    // SAFETY: `msg` points at one live iovec covering `buf` and at the live `ctrl`
    // array of the length given; the kernel writes at most those lengths.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut aux = None;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel just filled, within
    // `msg_controllen`; the data pointer of a PACKET_AUXDATA message points at a
    // tpacket_auxdata that may be unaligned, hence read_unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA {
                let d: libc::tpacket_auxdata = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                aux = Some(Aux {
                    status: d.tp_status,
                    len: d.tp_len,
                    vlan_tci: d.tp_vlan_tci,
                    vlan_tpid: d.tp_vlan_tpid,
                });
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, aux))
}

/// `TPACKET_V3` (linux/if_packet.h `enum tpacket_versions`).
const TPACKET_V3: libc::c_int = 2;
/// `PACKET_VERSION`.
const PACKET_VERSION: libc::c_int = 10;
/// `PACKET_RX_RING`.
const PACKET_RX_RING: libc::c_int = 5;
/// `TP_STATUS_USER`: the block belongs to user space.
const TP_STATUS_USER: u32 = 1;

// struct tpacket_block_desc: version u32, offset_to_priv u32, then tpacket_hdr_v1:
// block_status u32 @8, num_pkts u32 @12, offset_to_first_pkt u32 @16, blk_len u32 @20.
const BD_STATUS: usize = 8;
const BD_NUM_PKTS: usize = 12;
const BD_FIRST: usize = 16;
const BD_LEN: usize = 20;
// struct tpacket3_hdr: tp_next_offset u32 @0, tp_snaplen u32 @12, tp_len u32 @16,
// tp_status u32 @20, tp_mac u16 @24, hv1.tp_vlan_tci u32 @32, hv1.tp_vlan_tpid u16 @36.
const PH_NEXT: usize = 0;
const PH_SNAPLEN: usize = 12;
const PH_LEN: usize = 16;
const PH_STATUS: usize = 20;
const PH_MAC: usize = 24;
const PH_VLAN_TCI: usize = 32;
const PH_VLAN_TPID: usize = 36;

/// A `TPACKET_V3` receive ring mapped from an AF_PACKET socket (`packet_mmap`
/// documentation, Documentation/networking/packet_mmap.rst): `block_nr` blocks of
/// `block_size` bytes; the kernel fills a block with frames and hands it over by
/// setting `TP_STATUS_USER` in its status; user space hands it back with
/// `TP_STATUS_KERNEL`.
pub struct Ring {
    map: Mapping,
    block_size: usize,
    block_nr: usize,
    cur: usize,
}

impl Ring {
    /// Switches `fd` to TPACKET_V3 and maps a receive ring. `retire_ms` bounds how long
    /// a partly filled block waits before the kernel hands it over.
    pub fn new(
        fd: &impl AsRawFd,
        block_size: usize,
        block_nr: usize,
        retire_ms: u32,
    ) -> io::Result<Self> {
        // (The sizes must be what the kernel sees: the walk below indexes by them.)
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        let len = block_size.checked_mul(block_nr).ok_or_else(einval)?;
        if block_nr == 0 || u32::try_from(block_size).is_err() || u32::try_from(block_nr).is_err() {
            return Err(einval());
        }
        set_packet_opt(fd, PACKET_VERSION, TPACKET_V3)?;
        // struct tpacket_req3: block_size, block_nr, frame_size, frame_nr,
        // retire_blk_tov, sizeof_priv, feature_req_word (all u32).
        let frame_size = 2048u32;
        let req: [u32; 7] = [
            block_size as u32,
            block_nr as u32,
            frame_size,
            (len / frame_size as usize) as u32,
            retire_ms,
            0,
            0,
        ];
        // SAFETY: `fd` is an open socket; `req` is a live 28-byte tpacket_req3.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_RX_RING,
                req.as_ptr().cast(),
                std::mem::size_of_val(&req) as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // The ring the kernel just allocated for `fd` (`packet_mmap` maps it only
        // whole: a length other than block_size * block_nr fails).
        let map = Mapping::new(fd, len)?;
        Ok(Self {
            map,
            block_size,
            block_nr,
            cur: 0,
        })
    }

    fn status(&self, block: usize) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: block * block_size + 8 is inside the mapping and 4-byte aligned (the
        // mapping is page aligned, block_size a multiple of the page size); the word
        // is shared with the kernel, so it is only ever accessed atomically.
        unsafe {
            &*(self
                .map
                .ptr()
                .add(block * self.block_size + BD_STATUS)
                .cast::<std::sync::atomic::AtomicU32>())
        }
    }

    /// The current block if the kernel handed it over: its bytes, until `release`.
    pub fn block(&self) -> Option<&[u8]> {
        if self
            .status(self.cur)
            .load(std::sync::atomic::Ordering::Acquire)
            & TP_STATUS_USER
            == 0
        {
            return None;
        }
        // SAFETY: the block is inside the mapping, and user space owns it (status has
        // TP_STATUS_USER, read with Acquire so the kernel's writes are visible) until
        // `release` hands it back; the returned borrow ends before that (`&self` vs
        // `&mut self`).
        Some(unsafe {
            std::slice::from_raw_parts(
                self.map.ptr().add(self.cur * self.block_size),
                self.block_size,
            )
        })
    }

    /// Hands the current block back to the kernel and moves to the next.
    pub fn release(&mut self) {
        self.status(self.cur)
            .store(0, std::sync::atomic::Ordering::Release);
        self.cur = (self.cur + 1) % self.block_nr;
    }
}

/// One frame of a ring block, as the kernel described it.
pub struct RingFrame<'a> {
    /// The bytes the ring kept, from the link-layer header (`tp_mac`).
    pub data: &'a [u8],
    /// `tp_len`: the frame's length on the wire; more than `data.len()` (`tp_snaplen`)
    /// when the ring kept only its start.
    pub len: u32,
    /// `tp_status` (`TP_STATUS_*`).
    pub status: u32,
    /// `tp_vlan_tci`.
    pub vlan_tci: u16,
    /// `tp_vlan_tpid`.
    pub vlan_tpid: u16,
}

fn rd32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off + 4)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn rd16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off + 2)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

/// The frames of a block handed over by the kernel. Offsets come from the kernel and are
/// still bounds-checked: a frame that does not fit the block ends the walk.
pub fn block_frames(block: &[u8]) -> impl Iterator<Item = RingFrame<'_>> {
    let num = rd32(block, BD_NUM_PKTS).unwrap_or(0);
    // blk_len counts from the block start; the block's own length bounds it anyway.
    let end = (rd32(block, BD_LEN).unwrap_or(0) as usize).clamp(0, block.len());
    let end = if end == 0 { block.len() } else { end };
    let mut off = rd32(block, BD_FIRST).unwrap_or(0) as usize;
    let mut left = num;
    std::iter::from_fn(move || {
        if left == 0 || off >= end {
            return None;
        }
        left -= 1;
        let h = block.get(off..end)?;
        let next = rd32(h, PH_NEXT)? as usize;
        let snaplen = rd32(h, PH_SNAPLEN)? as usize;
        let len = rd32(h, PH_LEN)?;
        let status = rd32(h, PH_STATUS)?;
        let mac = usize::from(rd16(h, PH_MAC)?);
        let vlan_tci = rd32(h, PH_VLAN_TCI)? as u16;
        let vlan_tpid = rd16(h, PH_VLAN_TPID)?;
        let data = h.get(mac..mac.checked_add(snaplen)?)?;
        off = if next == 0 { end } else { off + next };
        Some(RingFrame {
            data,
            len,
            status,
            vlan_tci,
            vlan_tpid,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }

    /// A block as the kernel lays it out: two frames, the second VLAN-tagged.
    #[test]
    fn block_walk() {
        let mut b = vec![0u8; 4096];
        put32(&mut b, BD_NUM_PKTS, 2);
        put32(&mut b, BD_FIRST, 48);
        put32(&mut b, BD_LEN, 48 + 128 + 128);
        for (k, off) in [48usize, 48 + 128].into_iter().enumerate() {
            put32(&mut b, off + PH_NEXT, if k == 0 { 128 } else { 0 });
            put32(&mut b, off + PH_SNAPLEN, 20 + k as u32);
            put32(&mut b, off + PH_LEN, 20 + k as u32 + 100 * k as u32);
            put32(&mut b, off + PH_STATUS, if k == 1 { 1 << 4 } else { 0 });
            b[off + PH_MAC..off + PH_MAC + 2].copy_from_slice(&64u16.to_ne_bytes());
            put32(&mut b, off + PH_VLAN_TCI, 100);
            for i in 0..20 + k {
                b[off + 64 + i] = (k * 100 + i) as u8;
            }
        }
        let frames: Vec<_> = block_frames(&b).collect();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].data, &(0..20).collect::<Vec<u8>>()[..]);
        assert_eq!(frames[1].data.len(), 21);
        assert_eq!((frames[0].len, frames[1].len), (20, 121));
        assert_eq!((frames[1].status, frames[1].vlan_tci), (1 << 4, 100));
    }

    /// Whatever the block holds, the walk stays inside it and ends (it reads kernel
    /// memory, but is written as if the bytes were hostile).
    #[test]
    fn block_walk_never_leaves_the_block() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let len = (rnd() % 512) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            if len > 24 {
                // Plausible headers more often than chance would give.
                put32(&mut b, BD_NUM_PKTS, (rnd() % 8) as u32);
                put32(&mut b, BD_FIRST, (rnd() % len as u64) as u32);
            }
            let n = block_frames(&b).take(100).count();
            assert!(n <= 8 || len <= 24);
        }
    }
}
