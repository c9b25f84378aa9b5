//! Registered memory: local memory a DOCA device may access ([`Memory`], sliced into owned
//! [`Buf`]s for operations), and memory another process exported to us ([`RemoteMemory`],
//! sliced into [`RemoteSlice`]s).
//!
//! # Allocation
//! [`Device::alloc`] allocates the memory itself, so that a peer can reach it without this
//! process's CPU: on the soft provider it is shared memory (a memfd, through the provider
//! extension `doca_soft_alloc_shared`) that importers map, which is what makes one-sided
//! operations and atomics from another process possible; with the `system` provider it is
//! page-aligned memory that the NIC reaches through the registration. Either way it is
//! zeroed, registered in a `doca_mmap` with the requested [`Access`] and the device, and
//! started.
//!
//! # Ownership
//! A [`Memory`] is a cheap handle (`Rc`); its clones, the [`Buf`]s sliced from it and every
//! operation in flight that uses one of them share the registration. The `doca_mmap` is
//! stopped and destroyed and the memory freed only when the last of them is gone, so dropping
//! a handle (or an operation's future) while DOCA may still access the memory never frees it
//! early. [`RemoteMemory`] works the same way for the imported `doca_mmap`.
//!
//! # Descriptors
//! DOCA tasks name memory through `doca_buf` descriptors. Each registration keeps the
//! descriptors of the exact slices its operations used (up to 128, made at the first
//! operation), and an operation on the same bytes as an earlier one borrows that descriptor
//! instead of making one: reusing a [`Buf`] or a target slice for every message is the
//! cheap pattern. A descriptor serves one task at a time and is dropped with its
//! registration. An operation future keeps its descriptors between operations on the same
//! bytes, so that a loop of `.await`s on one buffer and one target neither looks them up
//! nor re-points its task. (Details and rules: `docs/ARCHITECTURE.md`, "Owned buffers".)
//!
//! # Threads
//! `Memory`, `Buf`, `RemoteMemory` and `RemoteSlice` are `!Send`: DOCA objects and the
//! buffers over them belong to one thread (the executor that uses them). Export blobs are
//! plain bytes and travel anywhere.
//!
//! # Reading and writing
//! The bytes are reached through copies ([`Buf::write`], [`Buf::to_vec`], ...) rather than
//! Rust references, because a remote peer may write the memory at any time (that is the point
//! of registering it). What a read returns while a peer writes concurrently is unspecified,
//! as with any RDMA library; order accesses with the protocol (a message, an immediate, an
//! atomic).

pub(crate) mod descriptors;

use std::fmt;
use std::ops::{BitOr, BitOrAssign, Range, RangeBounds};
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::device::Device;
use crate::error::{check, Error, ErrorKind, Result};
use crate::sys;
use descriptors::DescCache;

/// Access rights of registered memory and of an RDMA context (`enum doca_access_flag`).
///
/// ```
/// use async_doca::Access;
/// let a = Access::LOCAL_READ_WRITE | Access::RDMA_WRITE;
/// assert!(a.contains(Access::RDMA_WRITE));
/// assert!(!a.contains(Access::RDMA_READ));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// Local reads only (DOCA's 0: no flag).
    pub const LOCAL_READ_ONLY: Access = Access(sys::DOCA_ACCESS_FLAG_LOCAL_READ_ONLY);
    /// Local reads and writes (needed by destinations of receive, read and atomics).
    pub const LOCAL_READ_WRITE: Access = Access(sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
    /// A peer may read it with RDMA read.
    pub const RDMA_READ: Access = Access(sys::DOCA_ACCESS_FLAG_RDMA_READ);
    /// A peer may write it with RDMA write.
    pub const RDMA_WRITE: Access = Access(sys::DOCA_ACCESS_FLAG_RDMA_WRITE);
    /// A peer may use RDMA atomics on it.
    pub const RDMA_ATOMIC: Access = Access(sys::DOCA_ACCESS_FLAG_RDMA_ATOMIC);
    /// A DMA engine on the other side of PCIe (the DPU, through an import of
    /// [`Memory::export_pci`]) may read it.
    pub const PCI_READ_ONLY: Access = Access(sys::DOCA_ACCESS_FLAG_PCI_READ_ONLY);
    /// A DMA engine on the other side of PCIe may read and write it.
    pub const PCI_READ_WRITE: Access = Access(sys::DOCA_ACCESS_FLAG_PCI_READ_WRITE);
    /// Everything RDMA: local read/write, remote read, write and atomics.
    pub const RDMA_ALL: Access = Access(
        sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
            | sys::DOCA_ACCESS_FLAG_RDMA_READ
            | sys::DOCA_ACCESS_FLAG_RDMA_WRITE
            | sys::DOCA_ACCESS_FLAG_RDMA_ATOMIC,
    );

    /// The raw DOCA mask.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// From a raw DOCA mask.
    pub const fn from_bits(bits: u32) -> Access {
        Access(bits)
    }

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(u32, &str); 5] = [
            (sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, "LOCAL_READ_WRITE"),
            (sys::DOCA_ACCESS_FLAG_RDMA_READ, "RDMA_READ"),
            (sys::DOCA_ACCESS_FLAG_RDMA_WRITE, "RDMA_WRITE"),
            (sys::DOCA_ACCESS_FLAG_RDMA_ATOMIC, "RDMA_ATOMIC"),
            (sys::DOCA_ACCESS_FLAG_PCI_READ_WRITE, "PCI_READ_WRITE"),
        ];
        if self.0 == 0 {
            return f.write_str("LOCAL_READ_ONLY");
        }
        let mut rest = self.0;
        let mut first = true;
        for (bit, name) in NAMES {
            if rest & bit != 0 {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !bit;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{rest:#x}")?;
        }
        Ok(())
    }
}

/// Resolves a range against a length; `None` when it does not fit.
fn resolve(range: impl RangeBounds<usize>, len: usize) -> Option<Range<usize>> {
    use std::ops::Bound::*;
    let start = match range.start_bound() {
        Included(&s) => s,
        Excluded(&s) => s.checked_add(1)?,
        Unbounded => 0,
    };
    let end = match range.end_bound() {
        Included(&e) => e.checked_add(1)?,
        Excluded(&e) => e,
        Unbounded => len,
    };
    (start <= end && end <= len).then_some(start..end)
}

/// Memory the runtime allocated, freed when the registration is gone.
struct Alloc {
    ptr: NonNull<u8>,
    len: usize,
}

impl Alloc {
    fn new(len: usize) -> Result<Alloc> {
        if len == 0 {
            return Err(Error::new(ErrorKind::InvalidArgument, "mem.alloc: length must be at least 1"));
        }
        let ptr = Self::raw_alloc(len)?;
        Ok(Alloc { ptr, len })
    }

    #[cfg(feature = "soft")]
    fn raw_alloc(len: usize) -> Result<NonNull<u8>> {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the provider returns zeroed, page-aligned shared memory
        // of at least `len` bytes, freed only in `Drop` below.
        check(unsafe { sys::doca_soft_alloc_shared(len, &mut p) }, "mem.alloc: doca_soft_alloc_shared")?;
        NonNull::new(p.cast()).ok_or_else(|| Error::new(ErrorKind::Other, "mem.alloc: the provider returned no memory"))
    }

    #[cfg(not(feature = "soft"))]
    fn raw_alloc(len: usize) -> Result<NonNull<u8>> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(64);
        let rounded = len
            .checked_add(page - 1)
            .map(|n| n / page * page)
            .ok_or_else(|| Error::new(ErrorKind::ResourceExhausted, "mem.alloc: length too large"))?;
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer; `page` is a power of two multiple of the pointer size.
        let rc = unsafe { libc::posix_memalign(&mut p, page, rounded) };
        if rc != 0 {
            return Err(Error::os(std::io::Error::from_raw_os_error(rc), "mem.alloc: posix_memalign"));
        }
        // SAFETY: `p` points to `rounded` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, rounded) };
        NonNull::new(p.cast()).ok_or_else(|| Error::new(ErrorKind::Other, "mem.alloc: posix_memalign gave NULL"))
    }
}

impl Drop for Alloc {
    fn drop(&mut self) {
        #[cfg(feature = "soft")]
        {
            // SAFETY: allocated by doca_soft_alloc_shared and freed once, here, after the
            // mmap over it is destroyed (MemInner drops the mmap first).
            let rc = unsafe { sys::doca_soft_free_shared(self.ptr.as_ptr().cast()) };
            if rc != sys::DOCA_SUCCESS {
                crate::trace::report!("doca_soft_free_shared failed: {:?}", crate::DocaCode(rc));
            }
        }
        #[cfg(not(feature = "soft"))]
        // SAFETY: allocated by posix_memalign and freed once, here, after the mmap over it is
        // destroyed.
        unsafe {
            libc::free(self.ptr.as_ptr().cast())
        };
        let _ = self.len;
    }
}

struct MemInner {
    mmap: *mut sys::doca_mmap,
    /// Descriptors of recently used slices, emptied before the mmap is destroyed.
    descs: DescCache,
    /// Freed in `Drop` only after the mmap is destroyed (leaked if destroying fails).
    alloc: std::mem::ManuallyDrop<Alloc>,
    access: Access,
    dev: Device,
}

impl Drop for MemInner {
    fn drop(&mut self) {
        // Nothing references the mmap any more: every Buf and every operation holds this
        // inner, the doca_bufs of operations are released before their Rc, and the cache's
        // go now.
        self.descs.clear();
        // SAFETY: a started local mmap of this thread, stopped and destroyed once, here; the
        // allocation is dropped once, only after the mmap over it is gone.
        unsafe {
            let rc = sys::doca_mmap_stop(self.mmap);
            if rc != sys::DOCA_SUCCESS {
                crate::trace::report!("doca_mmap_stop failed: {:?}", crate::DocaCode(rc));
            }
            let rc = sys::doca_mmap_destroy(self.mmap);
            if rc != sys::DOCA_SUCCESS {
                // Destroying failed: the memory may still be referenced; leak it rather than
                // free memory DOCA might touch.
                crate::trace::report!("doca_mmap_destroy failed: {:?}; leaking the memory", crate::DocaCode(rc));
                #[cfg(test)]
                descriptors::DESTROY_FAILURES.with(|n| n.set(n.get() + 1));
                return;
            }
            // Registration gone: nothing can reach the memory through DOCA any more.
            std::mem::ManuallyDrop::drop(&mut self.alloc);
        }
    }
}

/// Registered local memory (a started `doca_mmap` over memory the runtime allocated).
///
/// Cloning shares the registration; slices ([`Buf`]) are what operations take. See the
/// [module documentation](self) for allocation, ownership and threads.
///
/// ```
/// use async_doca::{Access, Device};
/// let dev = Device::open_default()?;
/// let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE | Access::RDMA_WRITE)?;
/// let mut head = mem.slice(0..5);
/// head.write(0, b"hello");
/// assert_eq!(mem.slice(..5).to_vec(), b"hello");
/// let blob: Vec<u8> = mem.export_rdma()?; // give this to the peer, out of band
/// assert!(!blob.is_empty());
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone)]
pub struct Memory {
    inner: Rc<MemInner>,
}

impl Memory {
    /// How many handles share this memory (`Memory`s and `Buf`s, including those operations
    /// hold): for tests that check an operation gave its buffers back.
    #[cfg(test)]
    pub(crate) fn handles(&self) -> usize {
        Rc::strong_count(&self.inner)
    }
}

impl Device {
    /// Allocates `len` zeroed bytes and registers them with this device with `access`
    /// (see [`Memory`]). Give [`Access::LOCAL_READ_WRITE`] to memory that receives data
    /// (receive, read, atomic results) and the `RDMA_*` flags to memory peers access.
    ///
    /// # Errors
    /// `len == 0` ([`ErrorKind::InvalidArgument`]); allocation or registration failures
    /// (with DOCA's code).
    pub fn alloc(&self, len: usize, access: Access) -> Result<Memory> {
        let alloc = Alloc::new(len)?;
        let mut mmap = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check(unsafe { sys::doca_mmap_create(&mut mmap) }, "mem.alloc: doca_mmap_create")?;
        // SAFETY: a fresh mmap of this thread; the range is our allocation, which outlives it
        // (MemInner destroys the mmap before freeing the memory); the device is open.
        let configured = unsafe {
            check(
                sys::doca_mmap_set_memrange(mmap, alloc.ptr.as_ptr().cast(), alloc.len),
                "mem.alloc: doca_mmap_set_memrange",
            )
            .and_then(|()| {
                check(sys::doca_mmap_set_permissions(mmap, access.bits()), "mem.alloc: doca_mmap_set_permissions")
            })
            .and_then(|()| check(sys::doca_mmap_add_dev(mmap, self.as_ptr()), "mem.alloc: doca_mmap_add_dev"))
            .and_then(|()| check(sys::doca_mmap_start(mmap), "mem.alloc: doca_mmap_start"))
        };
        if let Err(e) = configured {
            // SAFETY: our mmap, no buffers over it; destroyed once.
            unsafe { sys::doca_mmap_destroy(mmap) };
            return Err(e);
        }
        Ok(Memory {
            inner: Rc::new(MemInner {
                mmap,
                descs: DescCache::new(),
                alloc: std::mem::ManuallyDrop::new(alloc),
                access,
                dev: self.clone(),
            }),
        })
    }

    /// Opens memory another process (or this one) exported with [`Memory::export_rdma`].
    ///
    /// # Errors
    /// A corrupted, truncated or foreign blob: [`ErrorKind::InvalidArgument`]; an exporter
    /// that is gone: [`ErrorKind::NotFound`] or [`ErrorKind::ConnectionLost`].
    pub fn import(&self, blob: &[u8]) -> Result<RemoteMemory> {
        if blob.is_empty() {
            return Err(Error::new(ErrorKind::InvalidArgument, "mem.import: empty blob"));
        }
        let mut mmap = std::ptr::null_mut();
        check(
            // SAFETY: `blob` is readable for its length; NULL user data is allowed; valid
            // out-pointer; the device is open.
            unsafe {
                sys::doca_mmap_create_from_export(
                    std::ptr::null(),
                    blob.as_ptr().cast(),
                    blob.len(),
                    self.as_ptr(),
                    &mut mmap,
                )
            },
            "mem.import: doca_mmap_create_from_export",
        )?;
        let mut addr = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: a live imported mmap of this thread; valid out-pointers.
        let rc = unsafe { sys::doca_mmap_get_memrange(mmap, &mut addr, &mut len) };
        if rc != sys::DOCA_SUCCESS {
            // SAFETY: our mmap, no buffers over it; destroyed once.
            unsafe { sys::doca_mmap_destroy(mmap) };
            return Err(Error::from_doca(rc, "mem.import: doca_mmap_get_memrange"));
        }
        Ok(RemoteMemory {
            inner: Rc::new(RemoteInner { mmap, descs: DescCache::new(), addr: addr as usize, len, _dev: self.clone() }),
        })
    }
}

impl Memory {
    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.inner.alloc.len
    }

    /// Always false (registered memory has at least one byte); for symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        self.inner.alloc.len == 0
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> Access {
        self.inner.access
    }

    /// The start address (for protocols that exchange addresses; do not create references
    /// to memory a peer may write).
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.alloc.ptr.as_ptr()
    }

    /// The device it is registered with.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// The blob that lets a peer open this memory with [`Device::import`]. It carries a key:
    /// send it only to the intended peer. The peer's rights are the [`Access`] given at
    /// allocation.
    pub fn export_rdma(&self) -> Result<Vec<u8>> {
        let mut p = std::ptr::null();
        let mut n = 0usize;
        check(
            // SAFETY: a started mmap of this thread with the device added; valid out-pointers.
            unsafe { sys::doca_mmap_export_rdma(self.inner.mmap, self.inner.dev.as_ptr(), &mut p, &mut n) },
            "mem.export_rdma",
        )?;
        if p.is_null() {
            return Err(Error::new(ErrorKind::Other, "mem.export_rdma: DOCA returned no data"));
        }
        // SAFETY: DOCA returned `n` readable bytes owned by the mmap, which is alive; copied
        // at once.
        Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }.to_vec())
    }

    /// The blob that lets the other side of PCIe (the DPU side of a host program, see
    /// [`crate::dma`]) open this memory with [`Device::import`] and copy in and out of it
    /// with DMA. Like [`Memory::export_rdma`] it carries a key; the importer's rights are
    /// the `PCI_*` flags of the [`Access`] given at allocation.
    pub fn export_pci(&self) -> Result<Vec<u8>> {
        let mut p = std::ptr::null();
        let mut n = 0usize;
        check(
            // SAFETY: a started mmap of this thread with the device added; valid out-pointers.
            unsafe { sys::doca_mmap_export_pci(self.inner.mmap, self.inner.dev.as_ptr(), &mut p, &mut n) },
            "mem.export_pci",
        )?;
        if p.is_null() {
            return Err(Error::new(ErrorKind::Other, "mem.export_pci: DOCA returned no data"));
        }
        // SAFETY: DOCA returned `n` readable bytes owned by the mmap, which is alive; copied
        // at once.
        Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }.to_vec())
    }

    /// An owned buffer over `range` (panics if it is out of bounds, like slice indexing).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Buf {
        self.try_slice(range).unwrap_or_else(|e| panic!("{e}"))
    }

    /// An owned buffer over `range`, or [`ErrorKind::InvalidArgument`] when out of bounds.
    pub fn try_slice(&self, range: impl RangeBounds<usize>) -> Result<Buf> {
        let len = self.len();
        let r = resolve(range, len).ok_or_else(|| {
            Error::new(ErrorKind::InvalidArgument, format!("mem.slice: range out of bounds of {len} bytes"))
        })?;
        Ok(Buf { mem: self.clone(), off: r.start, len: r.end - r.start })
    }

    /// A buffer over the whole memory.
    pub fn buf(&self) -> Buf {
        self.slice(..)
    }

    pub(crate) fn raw_mmap(&self) -> *mut sys::doca_mmap {
        self.inner.mmap
    }

    pub(crate) fn desc_cache(&self) -> &DescCache {
        &self.inner.descs
    }
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memory")
            .field("addr", &self.as_ptr())
            .field("len", &self.len())
            .field("access", &self.inner.access)
            .finish()
    }
}

/// An owned slice of registered [`Memory`]: what RDMA operations take and give back.
///
/// A `Buf` keeps its memory registered while it lives. Operations take it by value and
/// return it with their result (`(Result<T>, Buf)`), so a buffer is never freed or reused
/// while DOCA may access it, even when the operation's future is dropped.
///
/// ```
/// use async_doca::{Access, Device};
/// let dev = Device::open_default()?;
/// let mem = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
/// let mut b = mem.slice(8..16);
/// b.write_u64(0, 42);
/// assert_eq!(b.read_u64(0), 42);
/// assert_eq!((b.offset(), b.len()), (8, 8));
/// # Ok::<(), async_doca::Error>(())
/// ```
pub struct Buf {
    mem: Memory,
    off: usize,
    len: usize,
}

// The accessors are `#[inline]`: the crate is not built with LTO, so a caller in another
// crate otherwise calls each of them out of line (`read_u64` and `write_u64` were ~21
// instructions a call in perf's lanes latency loop, for an 8-byte load or store).
impl Buf {
    /// The length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The offset in its memory.
    #[inline]
    pub fn offset(&self) -> usize {
        self.off
    }

    /// The memory it is a slice of.
    #[inline]
    pub fn memory(&self) -> &Memory {
        &self.mem
    }

    /// The start address.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY: `off <= len` of the allocation (checked at slicing).
        unsafe { self.mem.as_ptr().add(self.off) }
    }

    /// Panics unless `n` bytes at `at` are inside the buffer (`what` names the method).
    #[inline(always)]
    fn check(&self, at: usize, n: usize, what: &str) {
        if at.checked_add(n).is_none_or(|end| end > self.len) {
            self.out_of_bounds(at, n, what);
        }
    }

    #[cold]
    #[inline(never)]
    fn out_of_bounds(&self, at: usize, n: usize, what: &str) -> ! {
        panic!("Buf::{what}: {n} bytes at {at} out of bounds of a {}-byte buffer", self.len)
    }

    /// Copies `data` into the buffer at `at` (panics when out of bounds).
    #[inline]
    pub fn write(&mut self, at: usize, data: &[u8]) {
        self.check(at, data.len(), "write");
        // SAFETY: in bounds (checked) of live memory; raw copy, no reference to the
        // destination is created (a peer may access it).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(at), data.len()) };
    }

    /// Fills the buffer with `byte`.
    #[inline]
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the whole buffer is live memory; raw write.
        unsafe { std::ptr::write_bytes(self.as_ptr(), byte, self.len) };
    }

    /// Copies `out.len()` bytes at `at` into `out` (panics when out of bounds).
    #[inline]
    pub fn read(&self, at: usize, out: &mut [u8]) {
        self.check(at, out.len(), "read");
        // SAFETY: in bounds (checked) of live memory; raw copy.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr().add(at), out.as_mut_ptr(), out.len()) };
    }

    /// A copy of the whole buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.read(0, &mut v);
        v
    }

    /// Reads the 8 bytes at `at` (native byte order, as atomics use). Aligned: an atomic load,
    /// so it sees peers' atomics whole.
    #[inline]
    pub fn read_u64(&self, at: usize) -> u64 {
        self.check(at, 8, "read_u64");
        // SAFETY: in bounds; an aligned address is read atomically (peers use atomics on it),
        // an unaligned one with an unaligned raw read.
        unsafe {
            let p = self.as_ptr().add(at);
            if p.align_offset(8) == 0 {
                AtomicU64::from_ptr(p.cast()).load(Ordering::Acquire)
            } else {
                p.cast::<u64>().read_unaligned()
            }
        }
    }

    /// Writes 8 bytes at `at` (native byte order); atomically when aligned.
    #[inline]
    pub fn write_u64(&mut self, at: usize, v: u64) {
        self.check(at, 8, "write_u64");
        // SAFETY: as in read_u64.
        unsafe {
            let p = self.as_ptr().add(at);
            if p.align_offset(8) == 0 {
                AtomicU64::from_ptr(p.cast()).store(v, Ordering::Release)
            } else {
                p.cast::<u64>().write_unaligned(v)
            }
        }
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buf").field("offset", &self.off).field("len", &self.len).finish()
    }
}

struct RemoteInner {
    mmap: *mut sys::doca_mmap,
    /// Descriptors of recently targeted slices, emptied before the mmap is destroyed.
    descs: DescCache,
    /// The exported range, in the exporter's address space.
    addr: usize,
    len: usize,
    _dev: Device,
}

impl Drop for RemoteInner {
    fn drop(&mut self) {
        // The cache's descriptors first: DOCA does not destroy an mmap they reference.
        self.descs.clear();
        // SAFETY: an imported mmap of this thread with no buffers left (every RemoteSlice in
        // an operation holds this inner, operations release their doca_bufs first, and the
        // cache's are gone); destroyed once.
        let rc = unsafe { sys::doca_mmap_destroy(self.mmap) };
        if rc != sys::DOCA_SUCCESS {
            crate::trace::report!("destroying an imported mmap failed: {:?}", crate::DocaCode(rc));
            #[cfg(test)]
            descriptors::DESTROY_FAILURES.with(|n| n.set(n.get() + 1));
        }
    }
}

/// Memory a peer exported ([`Memory::export_rdma`]) and this process imported
/// ([`Device::import`]): the target of one-sided RDMA operations.
///
/// Cloning shares the import; slices ([`RemoteSlice`]) name the bytes an operation targets.
/// Bounds are checked here; permissions (the peer's [`Access`]) by the peer's memory when
/// an operation runs.
///
/// ```
/// use async_doca::{Access, Device};
/// let dev = Device::open_default()?;
/// let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE | Access::RDMA_WRITE)?;
/// let remote = dev.import(&mem.export_rdma()?)?; // normally in another process
/// assert_eq!(remote.len(), 4096);
/// let target = remote.slice(64..72);
/// assert_eq!((target.offset(), target.len()), (64, 8));
/// assert!(remote.try_slice(4090..4100).is_err());
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone)]
pub struct RemoteMemory {
    inner: Rc<RemoteInner>,
}

impl RemoteMemory {
    /// The length of the exported range.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the exported range is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The exported range's start address in the exporter's address space.
    pub fn remote_addr(&self) -> u64 {
        self.inner.addr as u64
    }

    /// The bytes `range` of the remote memory (panics when out of bounds).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> RemoteSlice {
        self.try_slice(range).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The bytes `range`, or [`ErrorKind::InvalidArgument`] when out of bounds.
    pub fn try_slice(&self, range: impl RangeBounds<usize>) -> Result<RemoteSlice> {
        let len = self.len();
        let r = resolve(range, len).ok_or_else(|| {
            Error::new(ErrorKind::InvalidArgument, format!("remote_mem.slice: range out of bounds of {len} bytes"))
        })?;
        Ok(RemoteSlice { mem: self.clone(), off: r.start, len: r.end - r.start })
    }
}

impl fmt::Debug for RemoteMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteMemory").field("remote_addr", &self.inner.addr).field("len", &self.inner.len).finish()
    }
}

/// A range of [`RemoteMemory`]: the remote side of a write, read or atomic. Cheap to clone;
/// an operation keeps its slice (and so the import) alive until DOCA is done with it.
#[derive(Clone)]
pub struct RemoteSlice {
    mem: RemoteMemory,
    off: usize,
    len: usize,
}

impl RemoteSlice {
    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The offset in the remote memory.
    pub fn offset(&self) -> usize {
        self.off
    }

    /// The remote memory it is a slice of.
    pub fn memory(&self) -> &RemoteMemory {
        &self.mem
    }

    pub(crate) fn raw_mmap(&self) -> *mut sys::doca_mmap {
        self.mem.inner.mmap
    }

    pub(crate) fn desc_cache(&self) -> &DescCache {
        &self.mem.inner.descs
    }

    /// The start address in the exporter's address space.
    pub(crate) fn raw_addr(&self) -> usize {
        self.mem.inner.addr + self.off
    }
}

impl fmt::Debug for RemoteSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteSlice").field("offset", &self.off).field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(resolve(.., 10), Some(0..10));
        assert_eq!(resolve(2..=3, 10), Some(2..4));
        assert_eq!(resolve(5..11, 10), None);
        #[allow(clippy::reversed_empty_ranges)]
        let r = resolve(6..5, 10);
        assert_eq!(r, None);
        assert_eq!(resolve(10.., 10), Some(10..10));
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn alloc_slice_copy_and_drop_order() {
        let dev = Device::open_default().unwrap();
        let mem = dev.alloc(100, Access::LOCAL_READ_WRITE).unwrap();
        assert_eq!(mem.as_ptr() as usize % 4096, 0, "page-aligned");
        let mut b = mem.slice(10..20);
        drop(mem); // the slice keeps the registration
        b.write(0, b"0123456789");
        assert_eq!(b.to_vec(), b"0123456789");
        assert_eq!(b.memory().slice(..12).to_vec()[10..], *b"01");
        assert_eq!(b.memory().try_slice(90..101).unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(dev.alloc(0, Access::LOCAL_READ_WRITE).unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(format!("{:?}", Access::RDMA_ALL), "LOCAL_READ_WRITE | RDMA_READ | RDMA_WRITE | RDMA_ATOMIC");
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn import_bad_blobs() {
        let dev = Device::open_default().unwrap();
        assert_eq!(dev.import(&[]).unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(dev.import(&[1, 2, 3]).unwrap_err().kind(), ErrorKind::InvalidArgument);
        let mem = dev.alloc(64, Access::RDMA_ALL).unwrap();
        let blob = mem.export_rdma().unwrap();
        let remote = dev.import(&blob).unwrap();
        assert_eq!(remote.len(), 64);
        assert_eq!(remote.remote_addr(), mem.as_ptr() as u64);
        assert!(dev.import(&blob[..blob.len() - 1]).is_err());
    }
}
