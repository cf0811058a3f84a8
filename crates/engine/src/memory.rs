//! Registered memory as the engine sees it: a byte range it may read, write and update
//! atomically. The engine never holds a pointer into user memory; the API layer above
//! decides how a region is backed (see the `rverbs` crate), tests use [`VecMemory`].

use std::sync::Mutex;

/// An 8-byte atomic operation on registered memory (IBTA 9.4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Store `swap` if the value equals `compare`.
    CmpSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Add, wrapping.
    FetchAdd(u64),
}

impl AtomicOp {
    /// Applies the operation to the native-endian u64 in `word` and returns the value
    /// it held before: the one definition every [`Memory`] implementation can share.
    pub fn apply(self, word: &mut [u8; 8]) -> u64 {
        let old = u64::from_ne_bytes(*word);
        let new = match self {
            AtomicOp::CmpSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd(add) => old.wrapping_add(add),
        };
        *word = new.to_ne_bytes();
        old
    }
}

/// Memory backing a memory region. Offsets are relative to the region's start and the
/// engine only calls with `offset + len <= self.len()`.
pub trait Memory: Send + Sync {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for a zero-length region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]);
    /// Copies `src` to `offset`.
    fn write(&self, offset: usize, src: &[u8]);
    /// Performs `op` on the native-endian u64 at `offset` (8-byte aligned in the
    /// region's virtual address space) and returns the value it held before.
    fn atomic(&self, offset: usize, op: AtomicOp) -> u64;
    /// Lends the whole region for reading in place until the returned guard drops
    /// (writers wait meanwhile): a driver sends a packet's payload straight from
    /// registered memory ([`crate::net::Body`]) instead of copying it into the
    /// datagram first. `None` (the default) when the memory cannot lend; the driver
    /// then copies through [`Memory::read`] ([`crate::Transmit::materialize`]).
    ///
    /// A thread must not lend a region twice at once, nor call the other methods of a
    /// region it has lent (for [`VecMemory`], both would deadlock).
    fn lend(&self) -> Option<Lent<'_>> {
        None
    }
    /// Writes `len` bytes at `offset` that `fill` produces in place: it is handed
    /// pieces of the destination in order, each with its position from `offset`
    /// (a receive places a payload left in the carrier's memory this way,
    /// [`PayloadSource`]). The default fills a stack buffer per piece and writes it.
    fn fill(&self, offset: usize, len: usize, fill: &mut dyn FnMut(usize, &mut [u8])) {
        let mut piece = [0u8; 4096];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(piece.len());
            fill(at, &mut piece[..n]);
            self.write(offset + at, &piece[..n]);
            at += n;
        }
    }
}

/// Where the payload of a received datagram really is when its carrier did not copy
/// it into the datagram's buffer (the same-host rings leave it in the ring): the
/// engine's placement of a SEND, WRITE or READ response payload copies from here
/// straight into the region, once, instead of from the buffer, whose payload bytes
/// are then not the packet's. The engine reads a payload only to place it, or to keep
/// a whole copy of a request that selective repeat holds past a gap.
pub trait PayloadSource {
    /// Copies the datagram's bytes at `offset..offset + dst.len()` (offsets in the
    /// datagram handed with this source) into `dst`.
    fn copy_to(&self, offset: usize, dst: &mut [u8]);
}

/// A received datagram's payload source and the address of the datagram's buffer
/// (a payload slice's offset in the datagram is its address minus this).
#[derive(Clone, Copy)]
pub struct Placing<'a> {
    src: &'a dyn PayloadSource,
    base: usize,
}

impl<'a> Placing<'a> {
    /// `src` stands for the payload bytes of `datagram` (the slice the engine gets).
    pub fn new(src: &'a dyn PayloadSource, datagram: &[u8]) -> Self {
        Placing {
            src,
            base: datagram.as_ptr() as usize,
        }
    }

    /// Makes `kept`, a copy of the datagram's buffer, the whole datagram with its real
    /// payload: for a packet kept to be carried out later (selective repeat holds
    /// requests past a gap), when this source is gone.
    pub(crate) fn copy_whole(&self, datagram: &[u8], kept: &mut [u8]) {
        self.copy_part(datagram, kept);
    }

    /// Copies into `dst` what `part` (a piece of the datagram's buffer) stands for.
    fn copy_part(&self, part: &[u8], dst: &mut [u8]) {
        let off = (part.as_ptr() as usize).wrapping_sub(self.base);
        self.src.copy_to(off, dst);
    }
}

/// Writes a received `payload` to `mem` at `offset`: from the buffer, or from where
/// `placing` says its bytes are.
pub(crate) fn place(mem: &dyn Memory, offset: usize, payload: &[u8], placing: Option<Placing<'_>>) {
    match placing {
        None => mem.write(offset, payload),
        Some(p) => mem.fill(offset, payload.len(), &mut |at, dst| {
            p.copy_part(&payload[at..at + dst.len()], dst)
        }),
    }
}

/// A region's bytes lent for reading in place ([`Memory::lend`]).
pub struct Lent<'a>(Box<dyn std::ops::Deref<Target = [u8]> + 'a>);

impl<'a> Lent<'a> {
    /// Lends `bytes` for as long as `guard` (whatever keeps them still) lives.
    pub fn new(guard: impl std::ops::Deref<Target = [u8]> + 'a) -> Self {
        Lent(Box::new(guard))
    }
}

impl std::ops::Deref for Lent<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Lent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lent").field("len", &self.0.len()).finish()
    }
}

/// A locked [`VecMemory`] as a byte slice.
struct VecLent<'a>(std::sync::MutexGuard<'a, Vec<u8>>);

impl std::ops::Deref for VecLent<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// Heap memory behind a mutex: the backing of the `rverbs` device's memory regions,
/// and of tests and simulations.
#[derive(Debug, Default)]
pub struct VecMemory {
    bytes: Mutex<Vec<u8>>,
}

impl VecMemory {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        VecMemory {
            bytes: Mutex::new(vec![0; len]),
        }
    }

    /// Memory holding `bytes`.
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        VecMemory {
            bytes: Mutex::new(bytes),
        }
    }

    /// A copy of the current contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.lock().clone()
    }

    /// Runs `f` with the bytes, locked: the engine waits meanwhile.
    pub fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(&mut self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // A panic while holding the lock cannot leave the bytes inconsistent in a way
        // that matters to a byte buffer, so a poisoned lock is still usable.
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Memory for VecMemory {
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.lock()[offset..offset + dst.len()]);
    }

    fn write(&self, offset: usize, src: &[u8]) {
        self.lock()[offset..offset + src.len()].copy_from_slice(src);
    }

    fn atomic(&self, offset: usize, op: AtomicOp) -> u64 {
        let mut b = self.lock();
        let word: &mut [u8; 8] = (&mut b[offset..offset + 8]).try_into().expect("8 bytes");
        op.apply(word)
    }

    fn lend(&self) -> Option<Lent<'_>> {
        Some(Lent::new(VecLent(self.lock())))
    }

    fn fill(&self, offset: usize, len: usize, fill: &mut dyn FnMut(usize, &mut [u8])) {
        fill(0, &mut self.lock()[offset..offset + len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomics() {
        let m = VecMemory::zeroed(16);
        assert_eq!(m.atomic(8, AtomicOp::FetchAdd(5)), 0);
        assert_eq!(
            m.atomic(
                8,
                AtomicOp::CmpSwap {
                    compare: 4,
                    swap: 9
                }
            ),
            5
        );
        assert_eq!(
            m.atomic(
                8,
                AtomicOp::CmpSwap {
                    compare: 5,
                    swap: 9
                }
            ),
            5
        );
        assert_eq!(m.atomic(8, AtomicOp::FetchAdd(0)), 9);
        m.write(0, b"abc");
        let mut out = [0u8; 3];
        m.read(0, &mut out);
        assert_eq!(&out, b"abc");
        assert_eq!(m.len(), 16);
    }

    /// A lent region reads as it is, and a writer waits until it is given back.
    #[test]
    fn a_lent_region_holds_still() {
        let m = std::sync::Arc::new(VecMemory::from_vec(b"abcdef".to_vec()));
        let lent = m.lend().expect("a VecMemory lends");
        assert_eq!(&lent[..], b"abcdef");
        let (m2, wrote) = (
            m.clone(),
            std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
        let w = wrote.clone();
        let writer = std::thread::spawn(move || {
            m2.write(0, b"X");
            w.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !wrote.load(std::sync::atomic::Ordering::SeqCst),
            "the writer waits"
        );
        assert_eq!(&lent[..], b"abcdef");
        drop(lent);
        writer.join().unwrap();
        assert_eq!(m.snapshot(), b"Xbcdef");
        struct NoLend;
        impl Memory for NoLend {
            fn len(&self) -> usize {
                0
            }
            fn read(&self, _: usize, _: &mut [u8]) {}
            fn write(&self, _: usize, _: &[u8]) {}
            fn atomic(&self, _: usize, _: AtomicOp) -> u64 {
                0
            }
        }
        assert!(NoLend.lend().is_none(), "by default a memory does not lend");
    }

    /// The payload's real bytes: the datagram's offset `i` holds `i % 251`.
    struct Real;
    impl PayloadSource for Real {
        fn copy_to(&self, offset: usize, dst: &mut [u8]) {
            for (k, b) in dst.iter_mut().enumerate() {
                *b = ((offset + k) % 251) as u8;
            }
        }
    }

    #[test]
    fn a_placed_payload_comes_from_its_source_not_the_buffer() {
        // A datagram buffer whose payload bytes (from 40) are stale.
        let datagram = vec![0xeeu8; 40 + 9000 + 4];
        let payload = &datagram[40..40 + 9000];
        let p = Placing::new(&Real, &datagram);
        let want: Vec<u8> = (40..40 + 9000).map(|i| (i % 251) as u8).collect();
        // A region that fills in place, and one with only read and write (the
        // default `fill`, in pieces).
        let v = VecMemory::zeroed(10_000);
        place(&v, 500, payload, Some(p));
        assert_eq!(v.snapshot()[500..9500], want[..]);
        struct Plain(VecMemory);
        impl Memory for Plain {
            fn len(&self) -> usize {
                self.0.len()
            }
            fn read(&self, o: usize, d: &mut [u8]) {
                self.0.read(o, d)
            }
            fn write(&self, o: usize, s: &[u8]) {
                self.0.write(o, s)
            }
            fn atomic(&self, o: usize, op: AtomicOp) -> u64 {
                self.0.atomic(o, op)
            }
        }
        let plain = Plain(VecMemory::zeroed(10_000));
        place(&plain, 1, &payload[100..], Some(p));
        assert_eq!(plain.0.snapshot()[1..8901], want[100..]);
        // Without a source, the buffer's bytes.
        place(&v, 0, payload, None);
        assert!(v.snapshot()[..9000].iter().all(|&b| b == 0xee));
    }
}
