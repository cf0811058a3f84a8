//! Shared memory: the one `mmap(2)` wrapper of the workspace (`Mapping`, also under
//! the AF_PACKET ring), sealed memfds, and [`SharedMap`], a region another process
//! maps too, reached only through checked atomic words and checked copies.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A shared read-write mapping of `len` bytes of a file (`MAP_SHARED`), unmapped when
/// dropped. It only owns the address range: the types built on it decide how the
/// bytes are reached.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is an address range owned by this value alone (unmapped once, in
// Drop); it hands out no references itself, so moving or sharing it between threads
// is sound. Its users justify their own accesses.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0, shared, read and write.
    pub(crate) fn new(fd: &impl AsRawFd, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a new mapping at an address of the kernel's choosing (never over
        // memory this process already uses); the result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, len })
    }

    /// The first byte (page aligned).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mapped in `new`, unmapped once; every borrow of it
        // borrows the owner of this value, so none outlives it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A new memfd of `len` zero bytes whose size is sealed (`F_SEAL_SHRINK`,
/// `F_SEAL_GROW`, then `F_SEAL_SEAL`): whoever it is handed to can map it knowing no
/// access inside `len` will fault (`memfd_create(2)`, "File sealing").
pub fn sealed_memfd(name: &CStr, len: usize) -> io::Result<OwnedFd> {
    memfd(
        name,
        len,
        libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
    )
}

/// A new memfd of `len` zero bytes (close-on-exec, sealing allowed) with exactly the
/// `seals` given (`F_SEAL_*`; 0 adds none, and the size stays free to change). What
/// a peer must check before mapping it; [`SharedMap::map_sealed`] refuses one whose
/// size is not sealed.
pub fn memfd(name: &CStr, len: usize, seals: libc::c_int) -> io::Result<OwnedFd> {
    let size =
        libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a live NUL-terminated string; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor memfd_create just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate and fcntl take no memory arguments; `fd` is ours.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if seals != 0 && unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// An access outside a [`SharedMap`] (or a misaligned atomic word): nothing was read
/// or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange {
    /// The offset asked for.
    pub offset: usize,
    /// The bytes asked for.
    pub len: usize,
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes at offset {} are outside the shared region (or misaligned)",
            self.len, self.offset
        )
    }
}

impl std::error::Error for OutOfRange {}

enum Backing {
    Mapped(#[allow(dead_code)] Mapping),
    /// Private memory (tests, fuzzing): 8-aligned, and interior-mutable by type (a
    /// Vec, not a Box: moving it does not reassert unique access to the words).
    Heap(#[allow(dead_code)] Vec<AtomicU64>),
}

/// Memory another process may map and write at any time: a sealed memfd mapped
/// shared ([`SharedMap::map_sealed`]), or private memory laid out the same way
/// ([`SharedMap::heap`]).
///
/// It never hands out a `&[u8]` into the region: the peer could change those bytes
/// under the reference. Words shared with the peer are reached as atomics
/// ([`SharedMap::atomic_u64`], [`SharedMap::atomic_u32`]); everything else is copied
/// in ([`SharedMap::write`], [`SharedMap::write_with`], which need `&mut self`) or
/// out ([`SharedMap::read`]) with plain `memcpy`, so what is read is a snapshot the
/// caller must check. Every access is bounds-checked with one comparison against the
/// region's length and fails with [`OutOfRange`] instead of touching memory outside.
///
/// Use each byte range one way: as atomic words, or as bytes copied in and out. A
/// copy out over words another thread stores atomically at the same moment reads
/// them as the peer's writes are read (torn, any value); the same-host ring keeps
/// its atomics in the header and copies only the data area.
pub struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
    _backing: Backing,
}

// SAFETY: the region lives as long as the value (its backing is owned); from safe code
// it is reached only through atomics (`&self`), copies out (`&self`, of plain bytes,
// any value valid) and copies in or a `&mut [u8]` (`&mut self`, so never while this
// process holds an atomic reference into it or another copy is in progress).
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Maps `len` bytes of a memfd another process handed over, only if its size
    /// is exactly `len` and sealed against shrinking (`F_SEAL_SHRINK`): a peer that
    /// could truncate it would make our accesses fault (SIGBUS).
    pub fn map_sealed(fd: &impl AsRawFd, len: usize) -> io::Result<SharedMap> {
        // SAFETY: stat is plain data; all-zero is a valid value, fstat overwrites it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fcntl takes no memory argument; fstat writes one stat into `st`.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        // SAFETY: as above.
        let rc = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
        if rc != 0
            || u64::try_from(st.st_size).ok() != Some(len as u64)
            || seals < 0
            || seals & libc::F_SEAL_SHRINK == 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a shared region whose size is not sealed",
            ));
        }
        let map = Mapping::new(fd, len)?;
        Ok(SharedMap {
            ptr: map.ptr,
            len,
            _backing: Backing::Mapped(map),
        })
    }

    /// `len` bytes (rounded up to a multiple of 8) of zeroed private memory, 8-byte
    /// aligned.
    pub fn heap(len: usize) -> SharedMap {
        let words: Vec<AtomicU64> = (0..len.div_ceil(8).max(1))
            .map(|_| AtomicU64::new(0))
            .collect();
        let len = len.div_ceil(8) * 8;
        // (From the whole slice, so the pointer may reach every word.)
        let ptr = NonNull::from(&words[..]).cast::<u8>();
        SharedMap {
            ptr,
            len,
            _backing: Backing::Heap(words),
        }
    }

    /// Bytes in the region.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn check(&self, offset: usize, len: usize) -> Result<*mut u8, OutOfRange> {
        if len <= self.len && offset <= self.len - len {
            // SAFETY: offset <= self.len, so the result is inside (or one past) the
            // region's allocation.
            Ok(unsafe { self.ptr.as_ptr().add(offset) })
        } else {
            Err(OutOfRange { offset, len })
        }
    }

    /// The 8-byte word at `offset` (a multiple of 8) as an atomic.
    #[inline]
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, OutOfRange> {
        let p = self.check(offset, 8)?;
        if offset % 8 != 0 {
            return Err(OutOfRange { offset, len: 8 });
        }
        // SAFETY: 8 bytes inside the region, 8-aligned (the region starts page- or
        // 8-aligned); the region outlives the borrow of `self`. Non-atomic writes from
        // this process need `&mut self`, which cannot coexist with the returned
        // reference; the peer reaches shared words atomically too (the ring format).
        Ok(unsafe { &*p.cast::<AtomicU64>() })
    }

    /// The 4-byte word at `offset` (a multiple of 4) as an atomic.
    #[inline]
    pub fn atomic_u32(&self, offset: usize) -> Result<&AtomicU32, OutOfRange> {
        let p = self.check(offset, 4)?;
        if offset % 4 != 0 {
            return Err(OutOfRange { offset, len: 4 });
        }
        // SAFETY: as `atomic_u64`, for 4 bytes 4-aligned.
        Ok(unsafe { &*p.cast::<AtomicU32>() })
    }

    /// Copies the bytes at `offset..offset + dst.len()` into `dst`.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfRange> {
        let p = self.check(offset, dst.len())?;
        // SAFETY: the source is inside the region (checked above) and cannot overlap
        // `dst`, which is memory this process owns exclusively. The peer may be
        // writing those bytes meanwhile (it should not: the ring gives it no reason
        // to); any byte value is a valid u8, and the caller checks what it read
        // before trusting it. This is the plain memcpy the ring always used.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` to `offset..offset + src.len()`.
    #[inline]
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), OutOfRange> {
        let p = self.check(offset, src.len())?;
        // SAFETY: the destination is inside the region (checked above) and cannot
        // overlap `src` (a `&[u8]` into the region is never handed out); `&mut self`
        // excludes any other access from this process. The peer reads these bytes
        // only after the writer publishes them.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    /// Hands `f` the bytes at `offset..offset + len` to fill in place (no staging
    /// copy), and returns what it returns.
    #[inline]
    pub fn write_with<R>(
        &mut self,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, OutOfRange> {
        let p = self.check(offset, len)?;
        // SAFETY: inside the region (checked above); the slice borrows `self`
        // mutably, so this process makes no other access while it lives. The peer
        // reads these bytes only after the writer publishes them; u8 has no invalid
        // values.
        let slot = unsafe { std::slice::from_raw_parts_mut(p, len) };
        Ok(f(slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn accesses_outside_the_region_are_errors() {
        let mut m = SharedMap::heap(64);
        assert_eq!(m.len(), 64);
        assert!(m.atomic_u64(56).is_ok());
        assert_eq!(
            m.atomic_u64(64).err(),
            Some(OutOfRange { offset: 64, len: 8 })
        );
        assert!(m.atomic_u64(60).is_err(), "straddles the end");
        assert!(
            m.atomic_u64(usize::MAX - 3).is_err(),
            "offset + 8 overflows"
        );
        assert!(m.atomic_u64(4).is_err(), "misaligned");
        assert!(m.atomic_u32(60).is_ok());
        assert!(m.atomic_u32(62).is_err(), "misaligned");
        assert!(m.atomic_u32(64).is_err());
        let mut b = [0u8; 16];
        assert!(m.read(48, &mut b).is_ok());
        assert!(m.read(49, &mut b).is_err());
        assert!(m.read(usize::MAX, &mut b[..1]).is_err());
        assert!(m.read(64, &mut []).is_ok(), "an empty range at the end");
        assert!(m.write(60, &[1; 5]).is_err());
        assert!(m.write(usize::MAX - 1, &[1; 5]).is_err());
        assert!(m.write_with(0, 65, |_| ()).is_err());
        assert!(m.write_with(usize::MAX, 2, |_| ()).is_err());
        // Nothing was written by the failed calls.
        let mut all = [0xffu8; 64];
        m.read(0, &mut all).unwrap();
        assert_eq!(all, [0u8; 64]);
    }

    #[test]
    fn copies_and_atomics_see_the_same_bytes() {
        let mut m = SharedMap::heap(30);
        assert_eq!(m.len(), 32, "rounded up to whole words");
        m.write(8, &7u64.to_ne_bytes()).unwrap();
        assert_eq!(m.atomic_u64(8).unwrap().load(Ordering::Acquire), 7);
        m.atomic_u32(16)
            .unwrap()
            .store(0x0102_0304, Ordering::Release);
        let mut b = [0u8; 4];
        m.read(16, &mut b).unwrap();
        assert_eq!(u32::from_ne_bytes(b), 0x0102_0304);
        let n = m.write_with(24, 8, |s| {
            s.fill(9);
            s.len()
        });
        assert_eq!(n, Ok(8));
        m.read(28, &mut b).unwrap();
        assert_eq!(b, [9; 4]);
    }

    /// Two mappings of one sealed memfd share their bytes (as the writer's and the
    /// reader's do); a memfd whose size is not sealed, or of another size, is refused.
    #[test]
    fn a_sealed_memfd_maps_twice_and_an_unsealed_one_not_at_all() {
        let fd = sealed_memfd(c"rverbs-sys-test", 8192).unwrap();
        let mut a = SharedMap::map_sealed(&fd, 8192).unwrap();
        let b = SharedMap::map_sealed(&fd, 8192).unwrap();
        a.write(4096, b"shared").unwrap();
        let mut got = [0u8; 6];
        b.read(4096, &mut got).unwrap();
        assert_eq!(&got, b"shared");
        a.atomic_u64(0).unwrap().store(42, Ordering::Release);
        assert_eq!(b.atomic_u64(0).unwrap().load(Ordering::Acquire), 42);
        assert!(b.read(8190, &mut got).is_err());
        assert!(SharedMap::map_sealed(&fd, 4096).is_err(), "wrong size");
        // A plain file: no seals.
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(SharedMap::map_sealed(&f, 4096).is_err());
    }

    /// A memfd gets exactly the seals asked for: none leaves its size free (and
    /// `map_sealed` refuses it), `F_SEAL_SHRINK` alone still lets it grow; a sealed
    /// memfd's size is fixed both ways.
    #[test]
    fn a_memfd_has_the_seals_it_was_given() {
        let free = std::fs::File::from(memfd(c"rverbs-sys-test", 8192, 0).unwrap());
        assert_eq!(free.metadata().unwrap().len(), 8192);
        assert!(SharedMap::map_sealed(&free, 8192).is_err(), "not sealed");
        free.set_len(4096).unwrap();
        let shrink = memfd(c"rverbs-sys-test", 8192, libc::F_SEAL_SHRINK).unwrap();
        assert!(SharedMap::map_sealed(&shrink, 8192).is_ok());
        let shrink = std::fs::File::from(shrink);
        assert!(shrink.set_len(4096).is_err(), "shrinking is sealed");
        shrink.set_len(16384).unwrap();
        let sealed = std::fs::File::from(sealed_memfd(c"rverbs-sys-test", 8192).unwrap());
        assert!(sealed.set_len(4096).is_err());
        assert!(sealed.set_len(16384).is_err(), "growing is sealed");
        assert!(memfd(c"rverbs-sys-test", usize::MAX, 0).is_err());
        assert!(
            memfd(c"rverbs-sys-test", 4096, -1).is_err(),
            "unknown seals"
        );
    }
}
