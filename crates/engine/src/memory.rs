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
}
