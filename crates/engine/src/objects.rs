//! PDs, MRs, CQs, SRQs and AHs, and the checks made when a work request or a remote
//! request touches memory.

use crate::memory::Memory;
use crate::types::*;
use std::collections::VecDeque;
use std::sync::Arc;

/// Bits of a key that select the MR slot; the low [`KEY_TAG_BITS`] bits are a tag that
/// changes on every registration of the slot, so a stale key (from a deregistered MR)
/// or a guessed one fails the lookup.
pub const KEY_TAG_BITS: u32 = 12;
const KEY_TAG_MASK: u32 = (1 << KEY_TAG_BITS) - 1;
/// Most MRs the engine holds at once (2^19): an MR key never has bit 31 set, which
/// marks a memory window's R_Key.
pub const MAX_MR: u32 = 1 << (31 - KEY_TAG_BITS);
/// Most memory windows the engine holds at once (rxe's `RXE_MAX_MW`).
pub const MAX_MW: u32 = 1 << 16;
/// Bit of an R_Key's 24-bit index that names a memory window, not an MR: a window's
/// R_Key is `index << 8 | key` with `index = MW_INDEX_BIT | slot` (rxe gives its
/// windows an index range of their own, `rkey_is_mw`).
const MW_INDEX_BIT: u32 = 1 << 23;

/// Window states (rxe `enum rxe_mw_state`; IBTA 10.6.7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MwState {
    /// A type-2 window not bound.
    Free,
    /// Bound (a type-1 window is always valid; length 0 grants nothing).
    Valid,
}

/// A memory window.
pub(crate) struct Mw {
    pub(crate) pd: u32,
    pub(crate) kind: MwType,
    pub(crate) state: MwState,
    /// Its R_Key (`index << 8 | key`).
    pub(crate) rkey: u32,
    /// Type 2: the QP it was bound through, the only one it serves.
    pub(crate) qp: Option<u32>,
    /// The MR it is bound to (its key; the MR counts the binding), while bound with
    /// a length.
    pub(crate) mr: Option<u32>,
    pub(crate) addr: u64,
    pub(crate) length: u64,
    pub(crate) access: Access,
}

/// True when `rkey` names a memory window.
pub(crate) fn is_mw_key(rkey: u32) -> bool {
    rkey & (MW_INDEX_BIT << 8) != 0
}

/// The window slot of a window R_Key.
pub(crate) fn mw_slot(rkey: u32) -> u32 {
    (rkey >> 8) & !MW_INDEX_BIT
}

/// The R_Key of window `slot` with low bits `key`.
pub(crate) fn mw_key(slot: u32, key: u8) -> u32 {
    ((MW_INDEX_BIT | slot) << 8) | u32::from(key)
}

/// The live window an R_Key names (slot and key both match).
pub(crate) fn find_mw(mws: &crate::slab::Slab<Mw>, rkey: u32) -> Option<&Mw> {
    if !is_mw_key(rkey) {
        return None;
    }
    mws.get(mw_slot(rkey)).filter(|w| w.rkey == rkey)
}

pub(crate) struct Pd {
    pub(crate) users: u32,
}

/// A registered memory region.
pub(crate) struct Mr {
    pub(crate) pd: u32,
    pub(crate) iova: u64,
    pub(crate) access: Access,
    pub(crate) key: u32,
    pub(crate) mem: Arc<dyn Memory>,
    /// `mem.len()`, read once at registration (a region's length never changes, and
    /// asking [`Memory::len`] takes the memory's lock: twice per packet otherwise).
    pub(crate) len: u64,
}

impl Mr {
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Offset of `[va, va + len)` inside the region, if it lies inside.
    pub(crate) fn offset_of(&self, va: u64, len: u64) -> Option<usize> {
        let off = va.checked_sub(self.iova)?;
        let end = off.checked_add(len)?;
        (end <= self.len()).then_some(off as usize)
    }
}

/// The slot a key names.
pub(crate) fn key_slot(key: u32) -> u32 {
    key >> KEY_TAG_BITS
}

/// A key for `slot` with a tag different from `old_tag` (from a small PRNG state).
pub(crate) fn make_key(slot: u32, rng: &mut u64, old_tag: Option<u32>) -> u32 {
    loop {
        // xorshift64*: deterministic for a given engine seed, which keeps simulations
        // reproducible.
        *rng ^= *rng >> 12;
        *rng ^= *rng << 25;
        *rng ^= *rng >> 27;
        let tag = ((rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as u32) & KEY_TAG_MASK;
        if tag != 0 && Some(tag) != old_tag {
            return (slot << KEY_TAG_BITS) | tag;
        }
    }
}

/// A resolved piece of registered memory.
#[derive(Clone)]
pub(crate) struct Seg {
    pub(crate) mem: Arc<dyn Memory>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// Local data of a work request: resolved SGEs, or bytes copied at post time.
#[derive(Clone)]
pub(crate) enum Data {
    Segs(Segs),
    Inline(InlineBytes),
}

/// Inline sends up to this length keep their bytes in the WQE itself.
pub(crate) const INLINE_SMALL: usize = 64;

/// The bytes of an INLINE send, copied at post time: up to [`INLINE_SMALL`] in place
/// (a small inline send allocates nothing), longer ones shared.
#[derive(Clone)]
pub(crate) enum InlineBytes {
    Small { len: u8, buf: [u8; INLINE_SMALL] },
    Large(Arc<[u8]>),
}

impl InlineBytes {
    /// `len` zero bytes, to be filled through [`InlineBytes::as_mut`].
    pub(crate) fn zeroed(len: usize) -> Self {
        if len <= INLINE_SMALL {
            InlineBytes::Small {
                len: len as u8,
                buf: [0; INLINE_SMALL],
            }
        } else {
            InlineBytes::Large(std::iter::repeat_n(0u8, len).collect())
        }
    }

    /// Held in a shared allocation (dropping it may free memory).
    pub(crate) fn shared(&self) -> bool {
        matches!(self, InlineBytes::Large(_))
    }

    /// The bytes, writable while not shared.
    pub(crate) fn as_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            InlineBytes::Small { len, buf } => Some(&mut buf[..usize::from(*len)]),
            InlineBytes::Large(a) => Arc::get_mut(a),
        }
    }
}

impl std::ops::Deref for InlineBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            InlineBytes::Small { len, buf } => &buf[..usize::from(*len)],
            InlineBytes::Large(a) => a,
        }
    }
}

/// Resolved SGEs. Most work requests have one or two (as many as an
/// [`crate::SgList`] holds in place), kept without an allocation (a receive WQE is
/// resolved for every SEND that arrives).
#[derive(Clone)]
pub(crate) enum Segs {
    One(Seg),
    Two([Seg; 2]),
    Many(Vec<Seg>),
}

impl Segs {
    /// No segment.
    pub(crate) const NONE: Segs = Segs::Many(Vec::new());

    /// Appends `seg`: the first two are kept in place, a third moves all to a `Vec`.
    pub(crate) fn push(&mut self, seg: Seg) {
        *self = match std::mem::replace(self, Segs::NONE) {
            Segs::Many(v) if v.is_empty() => Segs::One(seg),
            Segs::One(first) => Segs::Two([first, seg]),
            Segs::Two([a, b]) => Segs::Many(vec![a, b, seg]),
            Segs::Many(mut v) => {
                v.push(seg);
                Segs::Many(v)
            }
        };
    }
}

impl std::ops::Deref for Segs {
    type Target = [Seg];
    fn deref(&self) -> &[Seg] {
        match self {
            Segs::One(s) => std::slice::from_ref(s),
            Segs::Two(two) => two,
            Segs::Many(v) => v,
        }
    }
}

impl Data {
    /// Dropping it frees memory: a list of segments, a large INLINE copy, or the last
    /// reference to a region (deregistered while this work request was queued).
    pub(crate) fn frees(&self) -> bool {
        match self {
            Data::Inline(b) => b.shared(),
            Data::Segs(Segs::One(s)) => Arc::strong_count(&s.mem) == 1,
            Data::Segs(Segs::Two(two)) => two.iter().any(|s| Arc::strong_count(&s.mem) == 1),
            Data::Segs(Segs::Many(v)) => v.capacity() > 0,
        }
    }

    /// Copies `dst.len()` bytes from offset `off` of the gathered data.
    pub(crate) fn read(&self, mut off: usize, mut dst: &mut [u8]) {
        match self {
            Data::Inline(b) => dst.copy_from_slice(&b[off..off + dst.len()]),
            Data::Segs(segs) => {
                for s in segs.iter() {
                    if dst.is_empty() {
                        break;
                    }
                    if off >= s.len {
                        off -= s.len;
                        continue;
                    }
                    let n = (s.len - off).min(dst.len());
                    let (now, rest) = dst.split_at_mut(n);
                    s.mem.read(s.offset + off, now);
                    dst = rest;
                    off = 0;
                }
                // Beyond the segments (never asked for): zeros, not what the buffer
                // held (packets are built in recycled buffers).
                dst.fill(0);
            }
        }
    }

    /// The region and offset in it of the `len` bytes at `off` of the gathered data,
    /// when they lie in one segment (a packet's payload left in registered memory,
    /// [`crate::Config::lend_payloads`]).
    pub(crate) fn within_one(
        &self,
        mut off: usize,
        len: usize,
    ) -> Option<(&Arc<dyn Memory>, usize)> {
        let Data::Segs(segs) = self else { return None };
        for s in segs.iter() {
            if off < s.len {
                return (len <= s.len - off).then_some((&s.mem, s.offset + off));
            }
            off -= s.len;
        }
        None
    }

    /// Scatters `src` starting at offset `off`.
    pub(crate) fn write(&self, off: usize, src: &[u8]) {
        self.place(off, src, None)
    }

    /// Scatters a received payload starting at offset `off`: from `src`, or from
    /// where `placing` says its bytes are.
    pub(crate) fn place(
        &self,
        mut off: usize,
        mut src: &[u8],
        placing: Option<crate::memory::Placing<'_>>,
    ) {
        let Data::Segs(segs) = self else { return };
        for s in segs.iter() {
            if src.is_empty() {
                break;
            }
            if off >= s.len {
                off -= s.len;
                continue;
            }
            let n = (s.len - off).min(src.len());
            crate::memory::place(&*s.mem, s.offset + off, &src[..n], placing);
            src = &src[n..];
            off = 0;
        }
    }
}

/// Resolves local SGEs against the MR table: each lkey must name a live MR of `pd`,
/// with `need` rights, covering the SGE (IBTA 10.6.3.1 local protection checks).
pub(crate) fn resolve_sges(
    mrs: &crate::slab::Slab<Mr>,
    pd: u32,
    sges: &[Sge],
    need: Access,
) -> Result<(Data, usize), WcStatus> {
    let mut segs = Segs::NONE;
    let total = for_each_sge(mrs, pd, sges, need, |mr, offset, len| {
        segs.push(Seg {
            mem: mr.mem.clone(),
            offset,
            len,
        });
    })?;
    Ok((Data::Segs(segs), total))
}

/// The checks of [`resolve_sges`], calling `f(mr, offset, len)` for each non-empty SGE
/// that passes them (in order, stopping at the first that fails). Returns the total
/// length.
fn for_each_sge<'m>(
    mrs: &'m crate::slab::Slab<Mr>,
    pd: u32,
    sges: &[Sge],
    need: Access,
    mut f: impl FnMut(&'m Mr, usize, usize),
) -> Result<usize, WcStatus> {
    let mut total = 0usize;
    for s in sges {
        if s.length == 0 {
            continue;
        }
        let mr = mrs
            .get(key_slot(s.lkey))
            .filter(|m| m.key == s.lkey && m.pd == pd)
            .ok_or(WcStatus::LocProtErr)?;
        if !mr.access.contains(need) {
            return Err(WcStatus::LocProtErr);
        }
        let offset = mr
            .offset_of(s.addr, u64::from(s.length))
            .ok_or(WcStatus::LocProtErr)?;
        f(mr, offset, s.length as usize);
        total += s.length as usize;
    }
    Ok(total)
}

/// Gathers the bytes of `sges` (with [`resolve_sges`]' checks and `need` rights)
/// into `dst`, which is as long as their total: INLINE data copied at post time,
/// without building a gather list. On a failed check `dst` is partly written.
pub(crate) fn gather_sges(
    mrs: &crate::slab::Slab<Mr>,
    pd: u32,
    sges: &[Sge],
    need: Access,
    dst: &mut [u8],
) -> Result<(), WcStatus> {
    let mut at = 0usize;
    let mut fits = true;
    for_each_sge(mrs, pd, sges, need, |mr, offset, len| {
        match dst.get_mut(at..at + len) {
            Some(d) => mr.mem.read(offset, d),
            None => fits = false,
        }
        at += len;
    })?;
    if fits && at == dst.len() {
        Ok(())
    } else {
        Err(WcStatus::LocLenErr)
    }
}

/// Carries out a BIND_MW work request of QP `qpn` (of PD `qp_pd`), with rxe's checks
/// (`rxe_check_bind_mw`: IBTA o10-36.2.2, o10-37.2.30/40, C10-72..75). `Err` is a
/// bind error (the WQE completes with MW_BIND_ERR).
pub(crate) fn bind_mw(
    mrs: &crate::slab::Slab<Mr>,
    mws: &mut crate::slab::Slab<Mw>,
    qp_pd: u32,
    qpn: u32,
    b: &MwBind,
) -> Result<(), &'static str> {
    let w = mws.get_mut(b.mw.0).ok_or("no such memory window")?;
    let mr = if b.length > 0 {
        Some(
            mrs.get(key_slot(b.mr_lkey))
                .filter(|m| m.key == b.mr_lkey)
                .ok_or("no MR with this key")?,
        )
    } else {
        None
    };
    if b.access.contains(Access::ZERO_BASED) {
        return Err("zero-based windows are not supported");
    }
    match w.kind {
        MwType::Type1 => {}
        MwType::Type2 => {
            if w.state != MwState::Free {
                return Err("a type-2 window is bound already");
            }
            if qp_pd != w.pd {
                return Err("the QP's PD is not the window's");
            }
            if mr.is_none() {
                return Err("a type-2 window needs an MR and a length");
            }
        }
    }
    if let Some(mr) = mr {
        if mr.pd != w.pd {
            return Err("the MR's PD is not the window's");
        }
        if !mr.access.contains(Access::MW_BIND) {
            return Err("the MR does not allow MW_BIND");
        }
        let remote_writes = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0);
        if b.access.0 & remote_writes.0 != 0 && !mr.access.contains(Access::LOCAL_WRITE) {
            return Err("remote write or atomic rights need the MR's local write");
        }
        if mr.offset_of(b.addr, b.length).is_none() {
            return Err("the window is not inside the MR");
        }
    }
    w.rkey = mw_key(b.mw.0, b.key);
    w.access = b.access;
    w.addr = b.addr;
    w.length = b.length;
    w.mr = mr.map(|m| m.key);
    w.state = MwState::Valid;
    if w.kind == MwType::Type2 {
        w.qp = Some(qpn);
    }
    Ok(())
}

/// Invalidates the type-2 window `rkey` names (LOCAL_INV, or SEND with invalidate
/// received): it becomes free (rxe `rxe_invalidate_mw`; IBTA o10-37.2.26: a type-1
/// window cannot be invalidated). `Err` when the key names no window, or a type-1 one.
pub(crate) fn invalidate_mw(
    mws: &mut crate::slab::Slab<Mw>,
    rkey: u32,
) -> Result<(), &'static str> {
    if !is_mw_key(rkey) {
        return Err("not a memory window's key");
    }
    let w = mws
        .get_mut(mw_slot(rkey))
        .filter(|w| w.rkey == rkey)
        .ok_or("no memory window with this key")?;
    if w.kind == MwType::Type1 {
        return Err("type-1 windows cannot be invalidated");
    }
    w.state = MwState::Free;
    w.qp = None;
    w.mr = None;
    w.access = Access::NONE;
    w.addr = 0;
    w.length = 0;
    Ok(())
}

/// Checks an R_Key for `[va, va + len)` with `need` rights (IBTA 9.7.4.1.3/4/5): a
/// live MR of the QP's PD, with the right, covering the range; or a valid memory
/// window of the PD (a type-2 one bound through QP `qpn`) whose bound range covers it
/// and whose rights include `need` (IBTA 10.6.7.2; rxe `rxe_lookup_mw`, here the range
/// is the window's). `None` means a remote access error.
#[allow(clippy::too_many_arguments)] // (the requester's PD and QP, the key, the range, the right)
pub(crate) fn check_rkey(
    mrs: &crate::slab::Slab<Mr>,
    mws: &crate::slab::Slab<Mw>,
    pd: u32,
    qpn: u32,
    rkey: u32,
    va: u64,
    len: u64,
    need: Access,
) -> Option<Seg> {
    let (mr, offset) = if is_mw_key(rkey) {
        let w = find_mw(mws, rkey)?;
        let served = match w.kind {
            MwType::Type1 => true,
            MwType::Type2 => w.qp == Some(qpn),
        };
        if !served || w.pd != pd || w.state != MwState::Valid || w.length == 0 {
            return None;
        }
        if !w.access.contains(need) {
            return None;
        }
        let off = va.checked_sub(w.addr)?;
        if off.checked_add(len)? > w.length {
            return None;
        }
        let mr = mrs.get(key_slot(w.mr?)).filter(|m| Some(m.key) == w.mr)?;
        (mr, mr.offset_of(va, len)?)
    } else {
        let mr = mrs
            .get(key_slot(rkey))
            .filter(|m| m.key == rkey && m.pd == pd)?;
        if !mr.access.contains(need) {
            return None;
        }
        (mr, mr.offset_of(va, len)?)
    };
    Some(Seg {
        mem: mr.mem.clone(),
        offset,
        len: len as usize,
    })
}

/// A completion queue.
pub(crate) struct Cq {
    pub(crate) capacity: usize,
    pub(crate) entries: VecDeque<Wc>,
    pub(crate) overflowed: bool,
    /// Armed for one notification; `Some(true)` = solicited (or error) completions only.
    pub(crate) armed: Option<bool>,
    pub(crate) users: u32,
}

/// A received WQE as stored in an RQ or SRQ.
#[derive(Clone)]
pub(crate) struct RecvWqe {
    pub(crate) wr_id: u64,
    pub(crate) sges: crate::SgList,
}

/// A shared receive queue.
pub(crate) struct Srq {
    pub(crate) pd: u32,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) limit: u32,
    pub(crate) queue: VecDeque<RecvWqe>,
    pub(crate) users: u32,
}

/// An address handle.
pub(crate) struct Ah {
    pub(crate) pd: u32,
    pub(crate) av: AddressVector,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;
    use crate::slab::Slab;

    fn table() -> (Slab<Mr>, u32, Arc<VecMemory>) {
        let mut mrs = Slab::default();
        let mem = Arc::new(VecMemory::from_vec((0u8..64).collect()));
        let slot = mrs.insert(Mr {
            pd: 1,
            iova: 0x1000,
            access: Access::LOCAL_WRITE | Access::REMOTE_READ,
            key: 0,
            mem: mem.clone(),
            len: 64,
        });
        let mut rng = 7;
        let key = make_key(slot, &mut rng, None);
        mrs.get_mut(slot).unwrap().key = key;
        (mrs, key, mem)
    }

    /// What a finished work request keeps for `Engine::reclaim`: only what frees
    /// memory when dropped.
    #[test]
    fn only_data_that_owns_memory_is_kept_to_be_freed_later() {
        let mem: Arc<dyn Memory> = Arc::new(VecMemory::from_vec(vec![0; 64]));
        let seg = |m: &Arc<dyn Memory>| Seg {
            mem: m.clone(),
            offset: 0,
            len: 8,
        };
        // A region the MR table still references: dropping the segment frees nothing.
        let one = Data::Segs(Segs::One(seg(&mem)));
        assert!(!one.frees());
        // ...unless it is the last reference (deregistered while queued).
        let last = Seg {
            mem: Arc::new(VecMemory::from_vec(vec![0; 64])),
            offset: 0,
            len: 8,
        };
        assert!(Data::Segs(Segs::One(last)).frees());
        let mut many = Segs::NONE;
        many.push(seg(&mem));
        many.push(seg(&mem));
        assert!(!Data::Segs(many.clone()).frees(), "two: in place");
        many.push(seg(&mem));
        assert!(Data::Segs(many).frees(), "three: a list");
        // INLINE bytes: up to INLINE_SMALL in place, longer ones allocated.
        for (n, frees) in [(0, false), (INLINE_SMALL, false), (INLINE_SMALL + 1, true)] {
            let mut b = InlineBytes::zeroed(n);
            b.as_mut().unwrap().fill(7);
            assert_eq!((b.len(), b.iter().all(|&x| x == 7)), (n, true));
            assert_eq!(Data::Inline(b).frees(), frees, "{n} bytes");
        }
    }

    #[test]
    fn keys_differ_per_registration() {
        let mut rng = 1;
        let a = make_key(3, &mut rng, None);
        let b = make_key(3, &mut rng, Some(a & KEY_TAG_MASK));
        assert_eq!(key_slot(a), 3);
        assert_ne!(a, b);
        assert_ne!(a & KEY_TAG_MASK, 0);
    }

    #[test]
    fn rkey_checks() {
        let (mrs, key, _) = table();
        let no_mws = Slab::default();
        let ok = |pd, key, va, len, access| {
            check_rkey(&mrs, &no_mws, pd, 0, key, va, len, access).is_some()
        };
        assert!(ok(1, key, 0x1000, 64, Access::REMOTE_READ));
        assert!(!ok(1, key, 0x1000, 65, Access::REMOTE_READ), "past the end");
        assert!(
            !ok(1, key, 0xfff, 1, Access::REMOTE_READ),
            "before the start"
        );
        assert!(!ok(2, key, 0x1000, 1, Access::REMOTE_READ), "another PD");
        assert!(
            !ok(1, key ^ 1, 0x1000, 1, Access::REMOTE_READ),
            "another key"
        );
        assert!(!ok(1, key, 0x1000, 1, Access::REMOTE_WRITE), "not granted");
        assert!(!ok(1, key, u64::MAX, 2, Access::REMOTE_READ), "wraps");
    }

    #[test]
    fn gather_and_scatter_across_sges() {
        let (mrs, key, mem) = table();
        let sges = [
            Sge {
                addr: 0x1000,
                length: 3,
                lkey: key,
            },
            Sge {
                addr: 0x1010,
                length: 0,
                lkey: 0xdead,
            },
            Sge {
                addr: 0x1020,
                length: 4,
                lkey: key,
            },
        ];
        let (data, total) = resolve_sges(&mrs, 1, &sges, Access::LOCAL_WRITE).unwrap();
        assert_eq!(total, 7);
        let mut out = [0u8; 5];
        data.read(1, &mut out);
        assert_eq!(out, [1, 2, 32, 33, 34]);
        data.write(2, &[0xaa, 0xbb]);
        assert_eq!(&mem.snapshot()[2..3], &[0xaa]);
        assert_eq!(&mem.snapshot()[32..33], &[0xbb]);
        let bad = [Sge {
            addr: 0x1000,
            length: 65,
            lkey: key,
        }];
        assert_eq!(
            resolve_sges(&mrs, 1, &bad, Access::NONE).err(),
            Some(WcStatus::LocProtErr)
        );
        let wrong_right = [Sge {
            addr: 0x1000,
            length: 1,
            lkey: key,
        }];
        assert!(resolve_sges(&mrs, 1, &wrong_right, Access::REMOTE_WRITE).is_err());
    }

    #[test]
    fn segments_keep_their_order_and_one_stays_in_place() {
        let (mrs, key, _) = table();
        let sge = |addr, length| Sge {
            addr,
            length,
            lkey: key,
        };
        let offsets = |d: &Data| match d {
            Data::Segs(s) => s.iter().map(|g| (g.offset, g.len)).collect::<Vec<_>>(),
            Data::Inline(_) => panic!("resolved data is segments"),
        };
        let (none, _) = resolve_sges(&mrs, 1, &[sge(0x1000, 0)], Access::NONE).unwrap();
        assert!(offsets(&none).is_empty());
        let (one, _) = resolve_sges(&mrs, 1, &[sge(0x1004, 2)], Access::NONE).unwrap();
        assert!(matches!(one, Data::Segs(Segs::One(_))));
        assert_eq!(offsets(&one), [(4, 2)]);
        let two = [sge(0x1001, 1), sge(0x1010, 2)];
        let (pair, _) = resolve_sges(&mrs, 1, &two, Access::NONE).unwrap();
        assert!(matches!(pair, Data::Segs(Segs::Two(_))));
        assert_eq!(offsets(&pair), [(1, 1), (16, 2)]);
        let three = [sge(0x1001, 1), sge(0x1010, 2), sge(0x1020, 3)];
        let (many, total) = resolve_sges(&mrs, 1, &three, Access::NONE).unwrap();
        assert_eq!(total, 6);
        assert_eq!(offsets(&many), [(1, 1), (16, 2), (32, 3)]);
    }

    #[test]
    fn gather_copies_what_resolve_reads_and_fails_alike() {
        let (mrs, key, _) = table();
        let sge = |addr, length, lkey| Sge { addr, length, lkey };
        let sges = [
            sge(0x1004, 2, key),
            sge(0x1010, 0, 0xdead),
            sge(0x1030, 3, key),
        ];
        let (data, total) = resolve_sges(&mrs, 1, &sges, Access::NONE).unwrap();
        let mut want = vec![0u8; total];
        data.read(0, &mut want);
        let mut got = vec![0u8; total];
        gather_sges(&mrs, 1, &sges, Access::NONE, &mut got).unwrap();
        assert_eq!(got, want);
        assert_eq!(got, [4, 5, 48, 49, 50]);
        // The same checks as resolve_sges: region bounds, key, PD, rights.
        let mut one = [0u8; 1];
        for (bad, pd, need) in [
            (sge(0x103f, 2, key), 1, Access::NONE),
            (sge(0x1000, 1, key ^ 1), 1, Access::NONE),
            (sge(0x1000, 1, key), 2, Access::NONE),
            (sge(0x1000, 1, key), 1, Access::REMOTE_WRITE),
        ] {
            let mut dst = vec![0u8; bad.length as usize];
            assert_eq!(
                gather_sges(&mrs, pd, &[bad], need, &mut dst),
                Err(WcStatus::LocProtErr)
            );
            assert!(resolve_sges(&mrs, pd, &[bad], need).is_err());
        }
        // A destination of another length than the SGEs' total is refused.
        assert_eq!(
            gather_sges(&mrs, 1, &sges, Access::NONE, &mut one),
            Err(WcStatus::LocLenErr)
        );
        let mut long = [0u8; 6];
        assert_eq!(
            gather_sges(&mrs, 1, &sges, Access::NONE, &mut long),
            Err(WcStatus::LocLenErr)
        );
    }
}
