//! The shared-memory allocator behind `doca_soft_alloc_shared`, and the layout of its segments.
//!
//! Memory from [`alloc_shared`] is a memfd segment whose first page is a header: a magic, a
//! layout version and a small table of key slots (see `keys.rs`). Exports of mmaps over such
//! memory take the shared-memory path: the importer maps the same segment, so reads, writes
//! and atomics need no help from the owner. It is its own file because the allocator and the
//! header layout are shared by both sides: the owner (allocating, claiming slots) and the
//! importer (`remote.rs`, validating a header it mapped from another process).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::lock;
use crate::ffi::{guard_err, out};
use crate::shm::ShmSegment;
use crate::types::*;

/// Layout of the header page at the start of every [`alloc_shared`] segment.
pub(super) const SEG_MAGIC: u64 = u64::from_le_bytes(*b"DSFTMEM1");
pub(super) const SEG_LAYOUT_VERSION: u32 = 1;
/// Header bytes holding the fixed fields; key slots follow.
const SEG_FIXED: usize = 64;
/// Size of the key-slot area (the header page is at least this large).
pub(super) const SEG_KEY_AREA: usize = 4096;
/// Number of key slots per segment (so at most this many live exports per allocation; more
/// exports of the same allocation fall back to the process_vm path).
pub(super) const SEG_NSLOTS: usize = (SEG_KEY_AREA - SEG_FIXED) / 8;
// Header field offsets.
pub(super) const H_MAGIC: usize = 0;
/// Layout version (low 32 bits) and number of key slots (high 32 bits).
pub(super) const H_VERSION: usize = 8;
pub(super) const H_SEG_LEN: usize = 16;
pub(super) const H_HDR_LEN: usize = 24;

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The header length of a segment: the key area rounded up to whole pages, so user memory
/// starts page-aligned.
fn header_len() -> usize {
    SEG_KEY_AREA.max(page_size())
}

/// A segment created by [`alloc_shared`]: header page(s), then user memory.
#[derive(Debug)]
pub(crate) struct SharedSeg {
    pub(super) seg: ShmSegment,
    hdr_len: usize,
}

impl SharedSeg {
    pub(super) fn base(&self) -> usize {
        self.seg.as_ptr() as usize
    }
    fn user_start(&self) -> usize {
        self.base() + self.hdr_len
    }
    fn user_end(&self) -> usize {
        self.base() + self.seg.len()
    }
    /// Key slot `i` (< SEG_NSLOTS) of this segment's header.
    pub(super) fn slot(&self, i: usize) -> &AtomicU64 {
        slot_of(&self.seg, i)
    }
}

/// Key slot `i` of a mapped segment header.
pub(super) fn slot_of(seg: &ShmSegment, i: usize) -> &AtomicU64 {
    assert!(i < SEG_NSLOTS && seg.len() >= SEG_KEY_AREA);
    // SAFETY: the slot lies inside the header page of a live mapping (checked above: the
    // mapping is at least SEG_KEY_AREA bytes), is 8-byte aligned (mapping base is
    // page-aligned, SEG_FIXED and the stride are multiples of 8), and is only ever accessed
    // atomically by this module in every process. It lives as long as `seg`, which the
    // returned reference borrows.
    unsafe { AtomicU64::from_ptr(seg.as_ptr().add(SEG_FIXED + 8 * i).cast::<u64>()) }
}

/// [`slot_of`] without its assert, for a slot and a mapping it accepted before (an imported
/// segment's key slot, checked when the import connected): every remote access checks the
/// key, and the assert was a third of that check.
///
/// # Safety
/// `i < SEG_NSLOTS` and `seg.len() >= SEG_KEY_AREA` (what `slot_of` asserts).
#[inline(always)]
pub(super) unsafe fn slot_of_unchecked(seg: &ShmSegment, i: usize) -> &AtomicU64 {
    debug_assert!(i < SEG_NSLOTS && seg.len() >= SEG_KEY_AREA);
    // SAFETY: as in `slot_of`, whose assert is the caller's contract here.
    unsafe { AtomicU64::from_ptr(seg.as_ptr().add(SEG_FIXED + 8 * i).cast::<u64>()) }
}

/// Reads a header field of a mapped segment (fixed fields are written once, before the
/// segment is shared, so plain reads through atomics are fine).
pub(super) fn hdr_u64(seg: &ShmSegment, off: usize) -> u64 {
    // SAFETY: `off` is one of the H_* offsets (< SEG_FIXED, 8-aligned) inside a mapping of at
    // least SEG_KEY_AREA bytes (callers check the length first).
    unsafe { AtomicU64::from_ptr(seg.as_ptr().add(off).cast::<u64>()) }.load(Ordering::Acquire)
}

/// Live allocations, keyed by the start of their user memory.
static SHARED: Mutex<BTreeMap<usize, Arc<SharedSeg>>> = Mutex::new(BTreeMap::new());

/// Allocates `len` bytes of zeroed memory backed by a memfd segment, so that exports of
/// mmaps over it take the shared-memory path (other processes map it; atomics work).
/// The pointer is page-aligned. Free it with [`free_shared`].
pub fn alloc_shared(len: usize) -> Result<*mut u8, doca_error_t> {
    if len == 0 {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let page = page_size();
    let hdr_len = header_len();
    let user = len.checked_add(page - 1).ok_or(DOCA_ERROR_NO_MEMORY)? / page * page;
    let total = user.checked_add(hdr_len).ok_or(DOCA_ERROR_NO_MEMORY)?;
    let seg = ShmSegment::create(total, "doca-soft-mem")?;
    // SAFETY: the fresh mapping is at least SEG_KEY_AREA bytes, page-aligned, and nobody else
    // has seen it yet; the fixed header fields are written once here. Written as atomics so
    // that readers in other processes (which use atomics) never mix access kinds.
    unsafe {
        let b = seg.as_ptr();
        AtomicU64::from_ptr(b.add(H_MAGIC).cast()).store(SEG_MAGIC, Ordering::Relaxed);
        let ver_slots = u64::from(SEG_LAYOUT_VERSION) | ((SEG_NSLOTS as u64) << 32);
        AtomicU64::from_ptr(b.add(H_VERSION).cast()).store(ver_slots, Ordering::Relaxed);
        AtomicU64::from_ptr(b.add(H_SEG_LEN).cast()).store(total as u64, Ordering::Relaxed);
        AtomicU64::from_ptr(b.add(H_HDR_LEN).cast()).store(hdr_len as u64, Ordering::Release);
    }
    let s = Arc::new(SharedSeg { seg, hdr_len });
    let p = s.user_start();
    lock(&SHARED).insert(p, s);
    Ok(p as *mut u8)
}

/// Frees memory from [`alloc_shared`]. Unknown pointers are `DOCA_ERROR_INVALID_VALUE` (never
/// a double free). If a started, exported mmap still covers the memory, the mapping stays
/// alive until that mmap is destroyed (importers keep their own mappings regardless).
pub fn free_shared(p: *mut u8) -> Result<(), doca_error_t> {
    lock(&SHARED).remove(&(p as usize)).map(drop).ok_or(DOCA_ERROR_INVALID_VALUE)
}

/// True when `[addr, addr+len)` lies inside one [`alloc_shared`] allocation.
pub fn is_shared(addr: *const u8, len: usize) -> bool {
    find_shared(addr as usize, len).is_some()
}

/// The allocation holding `[addr, addr+len)`, if any.
pub(super) fn find_shared(addr: usize, len: usize) -> Option<Arc<SharedSeg>> {
    let map = lock(&SHARED);
    let (_, s) = map.range(..=addr).next_back()?;
    let end = addr.checked_add(len)?;
    (addr >= s.user_start() && end <= s.user_end()).then(|| s.clone())
}

/// Soft-provider extension (not part of NVIDIA's DOCA): allocates `len` bytes of zeroed,
/// page-aligned shared memory (memfd) whose mmaps export through the shared-memory path.
/// Free with `doca_soft_free_shared`.
#[no_mangle]
pub unsafe extern "C" fn doca_soft_alloc_shared(len: usize, out_ptr: *mut *mut c_void) -> doca_error_t {
    guard_err(|| {
        if out_ptr.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let p = alloc_shared(len)?;
        // SAFETY: non-NULL checked; the caller guarantees the out-pointer is writable.
        unsafe { out(out_ptr, p.cast::<c_void>()) }
    })
}

/// Soft-provider extension: frees memory from `doca_soft_alloc_shared`
/// (`DOCA_ERROR_INVALID_VALUE` for any other pointer).
#[no_mangle]
pub unsafe extern "C" fn doca_soft_free_shared(p: *mut c_void) -> doca_error_t {
    guard_err(|| free_shared(p.cast()))
}
