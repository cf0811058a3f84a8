//! A memory region over C caller memory: the engine's [`Memory`] through a raw pointer.
//!
//! The caller of `ibv_reg_mr` promises, as with any verbs library, that the range stays
//! mapped until `ibv_dereg_mr` and that it does not race the device on bytes it has
//! handed over (it waits for the completion). Under that promise the copies below are
//! plain `memcpy`s; the 8-byte atomics use the CPU's atomics when the word is aligned
//! in memory, else one process-wide lock.

use rverbs_engine::{AtomicOp, Memory};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// `len` bytes of caller memory at `ptr`.
pub struct CMemory {
    ptr: usize,
    len: usize,
}

impl CMemory {
    /// # Safety
    /// `ptr..ptr+len` stays valid for reads and writes while the engine holds this
    /// (until the region is deregistered and its in-flight work is done).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> CMemory {
        CMemory {
            ptr: ptr as usize,
            len,
        }
    }
}

/// Serialises the unaligned atomics (the aligned ones use the CPU's).
static UNALIGNED: Mutex<()> = Mutex::new(());

impl Memory for CMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "read outside the region");
        // SAFETY: inside the registered range (checked above), valid per `new`'s promise.
        unsafe {
            std::ptr::copy(
                (self.ptr + offset) as *const u8,
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
    }

    fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len, "write outside the region");
        // SAFETY: as in `read`.
        unsafe { std::ptr::copy(src.as_ptr(), (self.ptr + offset) as *mut u8, src.len()) };
    }

    fn atomic(&self, offset: usize, op: AtomicOp) -> u64 {
        assert!(offset + 8 <= self.len, "atomic outside the region");
        let at = self.ptr + offset;
        if at % 8 == 0 {
            // SAFETY: 8 aligned bytes inside the registered range; AtomicU64 has u64's
            // layout, and every access the device makes to the word is atomic.
            let word = unsafe { &*(at as *const AtomicU64) };
            let mut old = word.load(Ordering::SeqCst);
            loop {
                let mut bytes = old.to_ne_bytes();
                op.apply(&mut bytes);
                match word.compare_exchange(
                    old,
                    u64::from_ne_bytes(bytes),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => return old,
                    Err(now) => old = now,
                }
            }
        }
        let _g = UNALIGNED.lock().unwrap_or_else(|e| e.into_inner());
        let mut bytes = [0u8; 8];
        self.read(offset, &mut bytes);
        let old = op.apply(&mut bytes);
        self.write(offset, &bytes);
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_writes_and_atomics_reach_the_callers_bytes() {
        let mut buf = vec![0u8; 32];
        // SAFETY: `buf` outlives `m` and is only read after `m`'s last use.
        let m = unsafe { CMemory::new(buf.as_mut_ptr(), buf.len()) };
        m.write(3, b"abc");
        let mut out = [0u8; 3];
        m.read(3, &mut out);
        assert_eq!(&out, b"abc");
        assert_eq!(m.atomic(8, AtomicOp::FetchAdd(5)), 0);
        assert_eq!(m.atomic(8, AtomicOp::FetchAdd(1)), 5);
        // Unaligned word: the locked path.
        assert_eq!(
            m.atomic(
                17,
                AtomicOp::CmpSwap {
                    compare: 0,
                    swap: 9
                }
            ),
            0
        );
        assert_eq!(
            m.atomic(
                17,
                AtomicOp::CmpSwap {
                    compare: 1,
                    swap: 7
                }
            ),
            9
        );
        assert_eq!(u64::from_ne_bytes(buf[8..16].try_into().unwrap()), 6);
        assert_eq!(u64::from_ne_bytes(buf[17..25].try_into().unwrap()), 9);
    }
}
