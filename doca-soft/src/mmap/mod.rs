//! Memory maps: `doca_mmap_*`, shared-memory allocation, export/import, and remote access.
//!
//! # Model
//!
//! A local `doca_mmap` registers a range of this process's memory (`set_memrange`), with an
//! access mask (`set_permissions`, default `LOCAL_READ_WRITE`) and the devices allowed to use
//! it (`add_dev`). After `doca_mmap_start` the configuration is frozen and buffers
//! (`doca_buf`, see `buf.rs`) can be taken over the range. The mmap counts its outstanding
//! buffers: `doca_mmap_stop` and `doca_mmap_destroy` fail with `DOCA_ERROR_IN_USE` while any
//! exists, so a buffer never outlives its mmap.
//!
//! ## Export and import
//!
//! `doca_mmap_export_rdma` / `doca_mmap_export_pci` produce a blob (format: `blob.rs`, kind
//! [`BlobKind::Mmap`]) that another process — or this one — passes to
//! `doca_mmap_create_from_export`. The blob is owned by the exporting mmap and stays valid
//! until that mmap is destroyed. It carries the owner's pid, the range (the owner's virtual
//! addresses, which is also the memrange of the imported mmap, as in DOCA), the permissions, a
//! random 64-bit key, and how to reach the memory:
//!
//! * **Shared-memory path.** If the range lies inside memory allocated with
//!   [`alloc_shared`] (also exported to C as `doca_soft_alloc_shared`), the memory is a memfd
//!   segment ([`ShmSegment`]). The blob carries (pid, fd, offset); the importer maps the
//!   segment itself, so reads, writes and atomics need no help from the owner's CPU. This is
//!   the path the runtime uses for registered memory.
//! * **process_vm path.** Any other memory is reached with `process_vm_readv` /
//!   `process_vm_writev` on the owner's pid (same user, ptrace permission: under Yama
//!   `ptrace_scope >= 1` the owner must allow it, e.g. with `prctl(PR_SET_PTRACER)`).
//!   Atomics are impossible on this path: they fail with `DOCA_ERROR_NOT_SUPPORTED`.
//!
//! ## Keys
//!
//! Every export has a random non-zero key, written into the blob *and* into a key cell that
//! the importer can read without the owner's help:
//!
//! * on the shared-memory path, a slot in the segment's header page (the first page of every
//!   [`alloc_shared`] segment holds a small table of live keys);
//! * on the process_vm path, an 8-byte cell in the owner's heap (taken from a pool that is
//!   never freed, so the address stays mapped), read with `process_vm_readv`.
//!
//! Every remote access first checks that the cell still holds the blob's key (reads check
//! after the copy, on the process_vm path, to save a system call; the data is discarded on
//! mismatch). `doca_mmap_stop` and `doca_mmap_destroy` clear the cell, revoking the export: later
//! accesses fail with `DOCA_ERROR_NOT_PERMITTED`, like an invalidated rkey on hardware. The
//! check and the access are not one atomic step, so an access racing with revocation may
//! still land (as with in-flight RDMA on hardware).
//!
//! Honest limits: this is a cooperative model between processes of the same user, not a
//! security boundary. An importer with a writable mapping of a segment could forge keys in its
//! header; and anyone with ptrace rights over the owner can read its memory anyway. The key
//! protects against stale and mismatched blobs (a destroyed or restarted export, a recycled
//! pid, a blob for another range), not against a hostile peer.
//!
//! ## Errors of remote access (`RemoteRegion`)
//! * outside the exported range, misaligned atomic: `DOCA_ERROR_INVALID_VALUE`;
//! * permission missing, key revoked: `DOCA_ERROR_NOT_PERMITTED`;
//! * atomics on the process_vm path: `DOCA_ERROR_NOT_SUPPORTED`;
//! * the owner process is gone (`ESRCH`): `DOCA_ERROR_CONNECTION_ABORTED`;
//! * the owner's memory is no longer mapped (`EFAULT`) or a short copy: `DOCA_ERROR_IO_FAILED`.
//!
//! On the shared-memory path the memory outlives the owner (the importer holds its own
//! mapping), so accesses after the owner died still succeed on the orphaned memory; use
//! `RemoteRegion::owner_alive` (a pidfd poll) where that matters (the RDMA connection layer
//! detects dead peers itself).
//!
//! ## Threads
//! The configuration and the outstanding-buffer count are behind a mutex and atomics, so an
//! mmap may be shared by buffers of several threads (as registered memory is). The C contract
//! still applies: do not destroy an mmap while another thread uses it.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::blob::{BlobKind, BlobReader, BlobWriter};
use crate::dev::{dev_ref, doca_dev, DevRef};
use crate::ffi::{guard_err, out};
use crate::shm::{errno_to_doca, own_pid, random_nonzero_u64, ShmSegment};
use crate::types::*;

/// Every access bit DOCA defines.
pub(crate) const ACCESS_MASK_ALL: u32 = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
    | DOCA_ACCESS_FLAG_RDMA_READ
    | DOCA_ACCESS_FLAG_RDMA_WRITE
    | DOCA_ACCESS_FLAG_RDMA_ATOMIC
    | DOCA_ACCESS_FLAG_PCI_READ_ONLY
    | DOCA_ACCESS_FLAG_PCI_READ_WRITE
    | DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING;

/// Bits that let a peer modify the memory (the importer maps the segment writable only then).
const REMOTE_WRITE_BITS: u32 =
    DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC | DOCA_ACCESS_FLAG_PCI_READ_WRITE;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Shared-memory allocations
// ---------------------------------------------------------------------------------------------

/// Layout of the header page at the start of every [`alloc_shared`] segment.
const SEG_MAGIC: u64 = u64::from_le_bytes(*b"DSFTMEM1");
const SEG_LAYOUT_VERSION: u32 = 1;
/// Header bytes holding the fixed fields; key slots follow.
const SEG_FIXED: usize = 64;
/// Size of the key-slot area (the header page is at least this large).
const SEG_KEY_AREA: usize = 4096;
/// Number of key slots per segment (so at most this many live exports per allocation; more
/// exports of the same allocation fall back to the process_vm path).
const SEG_NSLOTS: usize = (SEG_KEY_AREA - SEG_FIXED) / 8;
// Header field offsets.
const H_MAGIC: usize = 0;
/// Layout version (low 32 bits) and number of key slots (high 32 bits).
const H_VERSION: usize = 8;
const H_SEG_LEN: usize = 16;
const H_HDR_LEN: usize = 24;

fn page_size() -> usize {
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
    seg: ShmSegment,
    hdr_len: usize,
}

impl SharedSeg {
    fn base(&self) -> usize {
        self.seg.as_ptr() as usize
    }
    fn user_start(&self) -> usize {
        self.base() + self.hdr_len
    }
    fn user_end(&self) -> usize {
        self.base() + self.seg.len()
    }
    /// Key slot `i` (< SEG_NSLOTS) of this segment's header.
    fn slot(&self, i: usize) -> &AtomicU64 {
        slot_of(&self.seg, i)
    }
}

/// Key slot `i` of a mapped segment header.
fn slot_of(seg: &ShmSegment, i: usize) -> &AtomicU64 {
    assert!(i < SEG_NSLOTS && seg.len() >= SEG_KEY_AREA);
    // SAFETY: the slot lies inside the header page of a live mapping (checked above: the
    // mapping is at least SEG_KEY_AREA bytes), is 8-byte aligned (mapping base is
    // page-aligned, SEG_FIXED and the stride are multiples of 8), and is only ever accessed
    // atomically by this module in every process. It lives as long as `seg`, which the
    // returned reference borrows.
    unsafe { AtomicU64::from_ptr(seg.as_ptr().add(SEG_FIXED + 8 * i).cast::<u64>()) }
}

/// Reads a header field of a mapped segment (fixed fields are written once, before the
/// segment is shared, so plain reads through atomics are fine).
fn hdr_u64(seg: &ShmSegment, off: usize) -> u64 {
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
fn find_shared(addr: usize, len: usize) -> Option<Arc<SharedSeg>> {
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

// ---------------------------------------------------------------------------------------------
// Key cells
// ---------------------------------------------------------------------------------------------

/// Free key cells for the process_vm path. Cells are leaked on purpose and recycled, so
/// their addresses stay mapped for the life of the process (an importer reading a revoked
/// cell reads 0 or another export's key, never unmapped memory).
static KEY_CELLS: Mutex<Vec<&'static AtomicU64>> = Mutex::new(Vec::new());

/// Where an export's key lives in this (the owner's) process; dropping it revokes the key.
#[derive(Debug)]
enum KeyHolder {
    Shm { seg: Arc<SharedSeg>, slot: usize },
    Cell(&'static AtomicU64),
}

impl KeyHolder {
    /// Claims a key cell for `key` over `[addr, addr+len)`.
    fn claim(addr: usize, len: usize, key: u64) -> KeyHolder {
        if let Some(seg) = find_shared(addr, len) {
            for i in 0..SEG_NSLOTS {
                if seg.slot(i).compare_exchange(0, key, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    return KeyHolder::Shm { seg, slot: i };
                }
            }
            // All slots taken: fall through to the process_vm path (works, minus atomics).
        }
        let cell = lock(&KEY_CELLS).pop().unwrap_or_else(|| Box::leak(Box::new(AtomicU64::new(0))));
        cell.store(key, Ordering::Release);
        KeyHolder::Cell(cell)
    }
}

impl Drop for KeyHolder {
    fn drop(&mut self) {
        match self {
            KeyHolder::Shm { seg, slot } => seg.slot(*slot).store(0, Ordering::Release),
            KeyHolder::Cell(c) => {
                c.store(0, Ordering::Release);
                lock(&KEY_CELLS).push(c);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Export blobs
// ---------------------------------------------------------------------------------------------

/// Which export call made a blob (decides which permission bits govern remote access).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExportType {
    Rdma = 1,
    Pci = 2,
}

const TRANSPORT_SHM: u8 = 1;
const TRANSPORT_PVM: u8 = 2;

/// How an importer reaches the memory (parsed from a blob).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Transport {
    Shm { fd: i32, seg_len: usize, offset: usize, slot: usize },
    ProcessVm { key_cell: u64 },
}

/// A parsed, validated export blob.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ExportDesc {
    export_type: ExportType,
    pid: u32,
    addr: u64,
    len: usize,
    perms: u32,
    key: u64,
    transport: Transport,
}

impl ExportDesc {
    fn encode(&self) -> Vec<u8> {
        let mut w = BlobWriter::new(BlobKind::Mmap);
        w.u8(self.export_type as u8);
        match self.transport {
            Transport::Shm { .. } => w.u8(TRANSPORT_SHM),
            Transport::ProcessVm { .. } => w.u8(TRANSPORT_PVM),
        };
        w.u32(self.pid).u64(self.addr).u64(self.len as u64).u32(self.perms).u64(self.key);
        match self.transport {
            Transport::Shm { fd, seg_len, offset, slot } => {
                w.u32(fd as u32).u64(seg_len as u64).u64(offset as u64).u32(slot as u32);
            }
            Transport::ProcessVm { key_cell } => {
                w.u64(key_cell);
            }
        }
        w.finish()
    }

    /// Parses and validates a blob. Anything malformed or out of range is INVALID_VALUE
    /// (UNSUPPORTED_VERSION for a future format); never panics.
    fn decode(bytes: &[u8]) -> Result<ExportDesc, doca_error_t> {
        const BAD: doca_error_t = DOCA_ERROR_INVALID_VALUE;
        let mut r = BlobReader::new(bytes, BlobKind::Mmap)?;
        let export_type = match r.u8()? {
            1 => ExportType::Rdma,
            2 => ExportType::Pci,
            _ => return Err(BAD),
        };
        let transport_tag = r.u8()?;
        let pid = r.u32()?;
        let addr = r.u64()?;
        let len = usize::try_from(r.u64()?).map_err(|_| BAD)?;
        let perms = r.u32()?;
        let key = r.u64()?;
        let transport = match transport_tag {
            TRANSPORT_SHM => {
                let fd = i32::try_from(r.u32()?).map_err(|_| BAD)?;
                let seg_len = usize::try_from(r.u64()?).map_err(|_| BAD)?;
                let offset = usize::try_from(r.u64()?).map_err(|_| BAD)?;
                let slot = r.u32()? as usize;
                if slot >= SEG_NSLOTS
                    || seg_len > isize::MAX as usize
                    || offset < SEG_KEY_AREA
                    || offset.checked_add(len).is_none_or(|end| end > seg_len)
                {
                    return Err(BAD);
                }
                Transport::Shm { fd, seg_len, offset, slot }
            }
            TRANSPORT_PVM => {
                let key_cell = r.u64()?;
                if key_cell == 0 || key_cell % 8 != 0 {
                    return Err(BAD);
                }
                Transport::ProcessVm { key_cell }
            }
            _ => return Err(BAD),
        };
        r.finish()?;
        if pid == 0
            || pid > i32::MAX as u32
            || addr == 0
            || len == 0
            || len > isize::MAX as usize
            || addr.checked_add(len as u64).is_none()
            || perms & !ACCESS_MASK_ALL != 0
            || key == 0
        {
            return Err(BAD);
        }
        Ok(ExportDesc { export_type, pid, addr, len, perms, key, transport })
    }
}

/// An mmap's live export (one key for both export types, per start cycle).
#[derive(Debug)]
struct ExportState {
    desc: ExportDesc,
    _holder: KeyHolder,
    rdma_blob: Option<Box<[u8]>>,
    pci_blob: Option<Box<[u8]>>,
}

// ---------------------------------------------------------------------------------------------
// Remote memory
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
enum RemotePath {
    Shm { seg: ShmSegment, offset: usize, slot: usize, writable: bool },
    ProcessVm { key_cell: u64 },
}

/// The importer's handle on exported memory; shared by the imported mmap and every
/// [`RemoteRegion`] cloned from it.
#[derive(Debug)]
struct RemoteMemory {
    desc: ExportDesc,
    path: RemotePath,
    /// pidfd of the owner (None if the kernel lacks pidfd_open): liveness checks.
    pidfd: Option<OwnedFd>,
}

/// Kind of remote access, for permission checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    Atomic,
}

/// Maps a process_vm_* failure to the error this module reports (see the module docs).
fn pvm_error(e: i32) -> doca_error_t {
    match e {
        libc::ESRCH => DOCA_ERROR_CONNECTION_ABORTED,
        libc::EFAULT => DOCA_ERROR_IO_FAILED,
        libc::EPERM | libc::EACCES => DOCA_ERROR_NOT_PERMITTED,
        libc::ENOMEM => DOCA_ERROR_NO_MEMORY,
        _ => DOCA_ERROR_OPERATING_SYSTEM,
    }
}

/// The signature shared by `process_vm_readv` and `process_vm_writev`.
type PvmOp = unsafe extern "C" fn(
    libc::pid_t,
    *const libc::iovec,
    libc::c_ulong,
    *const libc::iovec,
    libc::c_ulong,
    libc::c_ulong,
) -> isize;

/// Moves `len` bytes between `local` (ours) and `remote` (in `pid`) with `op`, all or error.
///
/// # Safety
/// `local` is valid for `len` bytes in the direction `op` uses it: writable for
/// `process_vm_readv`, readable for `process_vm_writev`.
unsafe fn pvm_copy(op: PvmOp, pid: u32, remote: u64, local: *mut u8, len: usize) -> Result<(), doca_error_t> {
    let mut done = 0usize;
    while done < len {
        // SAFETY: `done < len`, so the pointer stays inside the caller's buffer.
        let local_iov = libc::iovec { iov_base: unsafe { local.add(done) }.cast(), iov_len: len - done };
        let remote_iov =
            libc::iovec { iov_base: (remote as usize).wrapping_add(done) as *mut c_void, iov_len: len - done };
        // SAFETY: the local iovec covers exactly the rest of the caller's buffer (valid for
        // this direction by the contract above); the kernel validates the remote iovec
        // against the other process's address space (faults there are EFAULT and never
        // touch our memory).
        let n = unsafe { op(pid as libc::pid_t, &local_iov, 1, &remote_iov, 1, 0) };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(pvm_error(e));
        }
        if n == 0 {
            return Err(DOCA_ERROR_IO_FAILED);
        }
        done += n as usize;
    }
    Ok(())
}

/// `process_vm_readv` of `dst.len()` bytes at `remote` in `pid`, all or error.
fn pvm_read(pid: u32, remote: u64, dst: &mut [u8]) -> Result<(), doca_error_t> {
    // SAFETY: `dst` is borrowed mutably for the call: writable for its length.
    unsafe { pvm_copy(libc::process_vm_readv, pid, remote, dst.as_mut_ptr(), dst.len()) }
}

/// `process_vm_writev` of `src` to `remote` in `pid`, all or error.
fn pvm_write(pid: u32, remote: u64, src: &[u8]) -> Result<(), doca_error_t> {
    // SAFETY: the kernel only reads through the local iovec of process_vm_writev, and `src`
    // is readable for its length while borrowed.
    unsafe { pvm_copy(libc::process_vm_writev, pid, remote, src.as_ptr().cast_mut(), src.len()) }
}

fn pidfd_open(pid: u32) -> Result<Option<OwnedFd>, doca_error_t> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor; no memory
    // effects.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
    if fd < 0 {
        let e = errno();
        return match e {
            libc::ENOSYS | libc::EPERM => Ok(None),
            libc::ESRCH => Err(DOCA_ERROR_NOT_FOUND),
            _ => Err(errno_to_doca(e)),
        };
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }))
}

impl RemoteMemory {
    /// Maps or probes the memory a blob describes. Errors: NOT_FOUND when the owner, its
    /// descriptor or the export (key) is gone; NOT_PERMITTED when the kernel refuses access;
    /// INVALID_VALUE when the segment does not match the blob.
    fn connect(desc: ExportDesc) -> Result<RemoteMemory, doca_error_t> {
        let pidfd = pidfd_open(desc.pid)?;
        let path = match desc.transport {
            Transport::Shm { fd, seg_len, offset, slot } => {
                let writable = desc.perms & REMOTE_WRITE_BITS != 0;
                let seg = ShmSegment::open_remote_with(desc.pid, fd, seg_len, writable)?;
                if seg.len() < SEG_KEY_AREA
                    || hdr_u64(&seg, H_MAGIC) != SEG_MAGIC
                    || hdr_u64(&seg, H_VERSION) != u64::from(SEG_LAYOUT_VERSION) | ((SEG_NSLOTS as u64) << 32)
                    || hdr_u64(&seg, H_SEG_LEN) != seg_len as u64
                    || hdr_u64(&seg, H_HDR_LEN) > offset as u64
                {
                    return Err(DOCA_ERROR_INVALID_VALUE);
                }
                if slot_of(&seg, slot).load(Ordering::Acquire) != desc.key {
                    return Err(DOCA_ERROR_NOT_FOUND);
                }
                RemotePath::Shm { seg, offset, slot, writable }
            }
            Transport::ProcessVm { key_cell } => {
                let mut k = [0u8; 8];
                pvm_read(desc.pid, key_cell, &mut k).map_err(|e| match e {
                    DOCA_ERROR_CONNECTION_ABORTED | DOCA_ERROR_IO_FAILED => DOCA_ERROR_NOT_FOUND,
                    e => e,
                })?;
                if u64::from_ne_bytes(k) != desc.key {
                    return Err(DOCA_ERROR_NOT_FOUND);
                }
                RemotePath::ProcessVm { key_cell }
            }
        };
        Ok(RemoteMemory { desc, path, pidfd })
    }
}

/// A handle on imported (remote) memory, for the RDMA engine: bounds-, permission- and
/// key-checked reads, writes and atomics. Offsets are relative to the start of the exported
/// range ([`RemoteRegion::addr`], the owner's virtual address). Cheap to clone; it keeps the
/// mapping alive even if the imported mmap is destroyed.
#[derive(Debug, Clone)]
pub(crate) struct RemoteRegion {
    mem: Arc<RemoteMemory>,
}

#[allow(dead_code)] // API for the RDMA engine
impl RemoteRegion {
    /// Start of the exported range (the owner's virtual address).
    pub(crate) fn addr(&self) -> u64 {
        self.mem.desc.addr
    }
    /// Length of the exported range.
    pub(crate) fn len(&self) -> usize {
        self.mem.desc.len
    }
    /// The exported access mask.
    pub(crate) fn permissions(&self) -> u32 {
        self.mem.desc.perms
    }
    /// The owner's pid.
    pub(crate) fn owner_pid(&self) -> u32 {
        self.mem.desc.pid
    }
    /// True when the memory was exported with `doca_mmap_export_pci` (what DMA needs; RDMA
    /// needs an RDMA export).
    pub(crate) fn is_pci_export(&self) -> bool {
        matches!(self.mem.desc.export_type, ExportType::Pci)
    }
    /// True on the shared-memory path (atomics available).
    pub(crate) fn is_shared_memory(&self) -> bool {
        matches!(self.mem.path, RemotePath::Shm { .. })
    }
    /// The offset of `[addr, addr+len)` (owner addresses) in the region, or INVALID_VALUE
    /// when it is not inside.
    pub(crate) fn offset_of(&self, addr: u64, len: usize) -> Result<usize, doca_error_t> {
        let off = addr.checked_sub(self.addr()).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        let off = usize::try_from(off).map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
        self.bounds(off, len)?;
        Ok(off)
    }
    /// Whether the owner process still exists (pidfd poll; `kill(pid, 0)` without pidfd).
    pub(crate) fn owner_alive(&self) -> bool {
        match &self.mem.pidfd {
            Some(fd) => {
                let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: `p` is one valid pollfd; timeout 0, no blocking.
                let n = unsafe { libc::poll(&mut p, 1, 0) };
                !(n > 0 && p.revents & libc::POLLIN != 0)
            }
            None => {
                // SAFETY: signal 0 only checks for existence.
                let r = unsafe { libc::kill(self.mem.desc.pid as libc::pid_t, 0) };
                r == 0 || errno() == libc::EPERM
            }
        }
    }

    fn permit(&self, op: Op) -> Result<(), doca_error_t> {
        let p = self.mem.desc.perms;
        let ok = match (self.mem.desc.export_type, op) {
            (ExportType::Rdma, Op::Read) => p & DOCA_ACCESS_FLAG_RDMA_READ != 0,
            (ExportType::Rdma, Op::Write) => p & DOCA_ACCESS_FLAG_RDMA_WRITE != 0,
            (ExportType::Rdma, Op::Atomic) => p & DOCA_ACCESS_FLAG_RDMA_ATOMIC != 0,
            (ExportType::Pci, Op::Read) => p & (DOCA_ACCESS_FLAG_PCI_READ_ONLY | DOCA_ACCESS_FLAG_PCI_READ_WRITE) != 0,
            (ExportType::Pci, Op::Write) => p & DOCA_ACCESS_FLAG_PCI_READ_WRITE != 0,
            (ExportType::Pci, Op::Atomic) => false,
        };
        if ok {
            Ok(())
        } else {
            Err(DOCA_ERROR_NOT_PERMITTED)
        }
    }

    fn bounds(&self, offset: usize, n: usize) -> Result<(), doca_error_t> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(DOCA_ERROR_INVALID_VALUE),
        }
    }

    /// Checks that the export is still live (the key cell holds our key).
    pub(crate) fn check_key(&self) -> Result<(), doca_error_t> {
        let current = match &self.mem.path {
            RemotePath::Shm { seg, slot, .. } => slot_of(seg, *slot).load(Ordering::Acquire),
            RemotePath::ProcessVm { key_cell } => {
                let mut k = [0u8; 8];
                pvm_read(self.mem.desc.pid, *key_cell, &mut k)?;
                u64::from_ne_bytes(k)
            }
        };
        if current == self.mem.desc.key {
            Ok(())
        } else {
            Err(DOCA_ERROR_NOT_PERMITTED)
        }
    }

    /// Local address of `offset` on the shared-memory path.
    fn local(&self, offset: usize) -> Option<*mut u8> {
        match &self.mem.path {
            // In bounds of the mapping once `bounds(offset, n)` passed (the exported range lies
            // inside the segment, validated at decode time); callers check before use.
            RemotePath::Shm { seg, offset: base, .. } => Some(seg.as_ptr().wrapping_add(base + offset)),
            RemotePath::ProcessVm { .. } => None,
        }
    }

    /// Copies `dst.len()` bytes at `offset` of the remote range into `dst`.
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), doca_error_t> {
        self.permit(Op::Read)?;
        self.bounds(offset, dst.len())?;
        match &self.mem.path {
            RemotePath::Shm { .. } => {
                self.check_key()?;
                let src = self.local(offset).ok_or(DOCA_ERROR_UNEXPECTED)?;
                // SAFETY: `[src, src+len)` is inside the live mapping (bounds checked against
                // the exported range, which lies inside the segment); `dst` is a distinct
                // Rust buffer (a different virtual range from our private mapping). Other
                // processes may write the shared memory concurrently: the bytes read are
                // then unspecified, as with RDMA, but the copy itself is sound.
                unsafe { ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
                Ok(())
            }
            RemotePath::ProcessVm { .. } => {
                let copied = pvm_read(self.mem.desc.pid, self.addr() + offset as u64, dst);
                // The key is checked after the copy (one system call less); the data is
                // discarded on mismatch. A revoked export wins over a copy error (its memory
                // may already be unmapped).
                match (copied, self.check_key()) {
                    (Err(DOCA_ERROR_CONNECTION_ABORTED), _) => Err(DOCA_ERROR_CONNECTION_ABORTED),
                    (_, Err(e)) => Err(e),
                    (r, Ok(())) => r,
                }
            }
        }
    }

    /// Copies `src` to `offset` of the remote range.
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> Result<(), doca_error_t> {
        self.permit(Op::Write)?;
        self.bounds(offset, src.len())?;
        self.check_key()?;
        match &self.mem.path {
            RemotePath::Shm { writable, .. } => {
                if !*writable {
                    return Err(DOCA_ERROR_NOT_PERMITTED);
                }
                let dst = self.local(offset).ok_or(DOCA_ERROR_UNEXPECTED)?;
                // SAFETY: `[dst, dst+len)` is inside the live mapping (bounds checked), which
                // is mapped writable (checked just above); `src` is a distinct Rust buffer.
                unsafe { ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
                Ok(())
            }
            RemotePath::ProcessVm { .. } => pvm_write(self.mem.desc.pid, self.addr() + offset as u64, src),
        }
    }

    /// The 8-byte remote word at `offset` as an atomic, after all checks.
    fn atomic_at(&self, offset: usize) -> Result<&AtomicU64, doca_error_t> {
        self.permit(Op::Atomic)?;
        self.bounds(offset, 8)?;
        let RemotePath::Shm { writable, .. } = &self.mem.path else {
            return Err(crate::sdk_fail!(
                DOCA_ERROR_NOT_SUPPORTED,
                "RDMA atomic on memory the peer reaches through process_vm_readv/writev: the soft \
                 provider can only do atomics on shared memory (allocate it with doca_soft_alloc_shared)"
            ));
        };
        let p = self.local(offset).ok_or(DOCA_ERROR_UNEXPECTED)?;
        if p as usize % 8 != 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if !*writable {
            return Err(DOCA_ERROR_NOT_PERMITTED);
        }
        self.check_key()?;
        // SAFETY: `p` is 8-aligned, inside the live writable mapping (bounds checked), and the
        // returned reference borrows `self`, which keeps the mapping alive. Other parties may
        // access the word non-atomically (an RDMA write over it); that is the same hazard as
        // on hardware, where atomics are only atomic with respect to other atomics.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// Atomically adds `add` to the native-endian u64 at `offset`; returns the old value.
    pub(crate) fn atomic_fetch_add(&self, offset: usize, add: u64) -> Result<u64, doca_error_t> {
        Ok(self.atomic_at(offset)?.fetch_add(add, Ordering::AcqRel))
    }

    /// Atomically replaces the u64 at `offset` with `swap` if it equals `cmp`; returns the
    /// old value (equal to `cmp` when the swap happened).
    pub(crate) fn atomic_cas(&self, offset: usize, cmp: u64, swap: u64) -> Result<u64, doca_error_t> {
        let a = self.atomic_at(offset)?;
        Ok(match a.compare_exchange(cmp, swap, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// doca_mmap
// ---------------------------------------------------------------------------------------------

const MMAP_MAGIC: u64 = u64::from_le_bytes(*b"SoftMmap");

/// A memory map (local or imported).
#[repr(C)]
pub struct doca_mmap {
    magic: AtomicU64,
    /// Buffers taken over this mmap and not yet returned.
    outstanding: AtomicUsize,
    inner: Mutex<MmapInner>,
    /// The remote region of an mmap created from an export (Some exactly for those; never
    /// changes after creation): outside the lock, so the data path neither locks nor clones
    /// it per operation.
    remote: Option<RemoteRegion>,
    /// The access permissions, readable without the lock (the data path). Written only by
    /// `doca_mmap_set_permissions`, under the lock and while the mmap is not started; a buffer
    /// exists only over a started mmap (`buf_acquire` takes the lock), which can be neither
    /// reconfigured nor stopped (IN_USE) until its buffers are gone. So whoever reads it
    /// through a live buffer reads the final value.
    perms: AtomicU32,
}

struct MmapInner {
    addr: usize,
    len: usize,
    range_set: bool,
    devs: Vec<DevRef>,
    started: bool,
    export: Option<ExportState>,
    /// Blobs of earlier start cycles: kept so every pointer handed out stays valid until
    /// destroy.
    retired_blobs: Vec<Box<[u8]>>,
    #[allow(dead_code)]
    user_data: u64,
}

/// A snapshot of an mmap's configuration, for other modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)]
pub(crate) struct MmapInfo {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) perms: u32,
    pub(crate) started: bool,
    pub(crate) imported: bool,
}

/// Live mmaps (destroy checks membership, so a double destroy is an error, not a double free).
static MMAPS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// The mmap behind `p`, or INVALID_VALUE for NULL or a destroyed/foreign object (by magic).
///
/// # Safety
/// A non-NULL `p` must point to readable memory of at least `doca_mmap`'s size: an mmap of
/// this provider (alive, or the caller's bug).
pub(crate) unsafe fn mmap_ref<'a>(p: *const doca_mmap) -> Result<&'a doca_mmap, doca_error_t> {
    // SAFETY: the caller's contract above.
    let m = unsafe { p.as_ref() }.ok_or(DOCA_ERROR_INVALID_VALUE)?;
    if m.magic.load(Ordering::Relaxed) != MMAP_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(m)
}

#[allow(dead_code)] // part of the API for buf.rs and the RDMA engine
impl doca_mmap {
    fn new(inner: MmapInner, perms: u32, remote: Option<RemoteRegion>) -> Box<doca_mmap> {
        Box::new(doca_mmap {
            magic: AtomicU64::new(MMAP_MAGIC),
            outstanding: AtomicUsize::new(0),
            remote,
            perms: AtomicU32::new(perms),
            inner: Mutex::new(inner),
        })
    }

    /// Whether this mmap was created from an export, without the lock (data path).
    pub(crate) fn is_imported(&self) -> bool {
        self.remote.is_some()
    }

    /// The permissions, without the lock (the only copy; see the field for why the data
    /// path, which asks through a live buffer, reads the final value).
    pub(crate) fn perms_of_started(&self) -> u32 {
        self.perms.load(Ordering::Relaxed)
    }

    /// The remote region of an imported mmap, borrowed without the lock; INVALID_VALUE for
    /// a local one.
    pub(crate) fn remote_region_ref(&self) -> Result<&RemoteRegion, doca_error_t> {
        self.remote.as_ref().ok_or(DOCA_ERROR_INVALID_VALUE)
    }

    fn lock(&self) -> MutexGuard<'_, MmapInner> {
        lock(&self.inner)
    }

    /// A snapshot of the configuration.
    pub(crate) fn info(&self) -> MmapInfo {
        let g = self.lock();
        MmapInfo {
            addr: g.addr,
            len: g.len,
            perms: self.perms_of_started(),
            started: g.started,
            imported: self.is_imported(),
        }
    }

    /// The remote region of an imported mmap; INVALID_VALUE for a local one.
    pub(crate) fn remote_region(&self) -> Result<RemoteRegion, doca_error_t> {
        self.remote_region_ref().cloned()
    }

    /// True when `dev` was added to (or imported with) this mmap.
    pub(crate) fn has_dev(&self, dev: *const doca_dev) -> bool {
        self.lock().devs.iter().any(|d| d.is(dev))
    }

    /// Number of buffers currently taken over this mmap.
    pub(crate) fn outstanding_bufs(&self) -> usize {
        self.outstanding.load(Ordering::Acquire)
    }

    /// Registers a new buffer over `[addr, addr+len)`: the mmap must be started and the
    /// range inside it (BAD_STATE / INVALID_VALUE). Pair with [`doca_mmap::buf_release`].
    pub(crate) fn buf_acquire(&self, addr: usize, len: usize) -> Result<(), doca_error_t> {
        let g = self.lock();
        if !g.started {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        let end = addr.checked_add(len).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        if addr < g.addr || end > g.addr + g.len {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // Under the lock, so stop/destroy (which check the count under the lock) cannot miss it.
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Returns a buffer taken with [`doca_mmap::buf_acquire`].
    pub(crate) fn buf_release(&self) {
        let _ = self.outstanding.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_create(mmap: *mut *mut doca_mmap) -> doca_error_t {
    guard_err(|| {
        if mmap.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let m = Box::into_raw(doca_mmap::new(
            MmapInner {
                addr: 0,
                len: 0,
                range_set: false,
                devs: Vec::new(),
                started: false,
                export: None,
                retired_blobs: Vec::new(),
                user_data: 0,
            },
            DOCA_ACCESS_FLAG_LOCAL_READ_WRITE,
            None,
        ));
        lock(&MMAPS).insert(m as usize);
        // SAFETY: non-NULL checked; writable by the caller's contract.
        unsafe { out(mmap, m) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_destroy(mmap: *mut doca_mmap) -> doca_error_t {
    guard_err(|| {
        if mmap.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut live = lock(&MMAPS);
        if !live.contains(&(mmap as usize)) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: `mmap` is in MMAPS, so it is a live mmap created by this module.
        let m = unsafe { &*mmap };
        {
            let _g = m.lock();
            if m.outstanding.load(Ordering::Acquire) != 0 {
                return Err(DOCA_ERROR_IN_USE);
            }
            m.magic.store(0, Ordering::Relaxed);
        }
        live.remove(&(mmap as usize));
        drop(live);
        // SAFETY: created by Box::into_raw in create/create_from_export, removed from MMAPS
        // just now (so freed once), no buffer references it (count 0, checked under its
        // lock). Dropping revokes its export key and releases its device references.
        drop(unsafe { Box::from_raw(mmap) });
        Ok(())
    })
}

/// Runs `f` on the configuration of a local, not started mmap (BAD_STATE otherwise).
///
/// # Safety
/// As [`mmap_ref`].
unsafe fn configure(
    mmap: *mut doca_mmap,
    f: impl FnOnce(&doca_mmap, &mut MmapInner) -> Result<(), doca_error_t>,
) -> Result<(), doca_error_t> {
    // SAFETY: forwarded contract.
    let m = unsafe { mmap_ref(mmap) }?;
    let mut g = m.lock();
    if g.started || m.is_imported() {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    f(m, &mut g)
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_set_memrange(mmap: *mut doca_mmap, addr: *mut c_void, len: usize) -> doca_error_t {
    guard_err(|| {
        if addr.is_null() || len == 0 || (addr as usize).checked_add(len).is_none() || len > isize::MAX as usize {
            // Still report a bad object first if there is one.
            // SAFETY: as mmap_ref's contract (caller passes an mmap or NULL).
            unsafe { mmap_ref(mmap) }?;
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the caller passes an mmap of this provider (or NULL, refused).
        unsafe {
            configure(mmap, |_, g| {
                g.addr = addr as usize;
                g.len = len;
                g.range_set = true;
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_set_permissions(mmap: *mut doca_mmap, access_mask: u32) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes an mmap of this provider (or NULL, refused).
        unsafe {
            configure(mmap, |m, _| {
                if access_mask & !ACCESS_MASK_ALL != 0 {
                    return Err(DOCA_ERROR_INVALID_VALUE);
                }
                // Under the lock, while not started (see the field).
                m.perms.store(access_mask, Ordering::Relaxed);
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_add_dev(mmap: *mut doca_mmap, dev: *mut doca_dev) -> doca_error_t {
    guard_err(|| {
        let d = dev_ref(dev)?;
        // SAFETY: the caller passes an mmap of this provider (or NULL, refused).
        unsafe {
            configure(mmap, |_, g| {
                if !g.devs.iter().any(|x| x.is(dev)) {
                    g.devs.push(d);
                }
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_start(mmap: *mut doca_mmap) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes an mmap of this provider (or NULL, refused).
        unsafe {
            configure(mmap, |_, g| {
                if !g.range_set {
                    return Err(DOCA_ERROR_BAD_STATE);
                }
                g.started = true;
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_stop(mmap: *mut doca_mmap) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes an mmap of this provider (or NULL, refused).
        let m = unsafe { mmap_ref(mmap) }?;
        let mut g = m.lock();
        // An mmap made by doca_mmap_create_from_export stops like a local one (NVIDIA's RDMA
        // samples stop it before destroying it and expect SUCCESS): no new buffers from it
        // afterwards, and it cannot be started again. Its mapping of the peer's memory is
        // released at destroy, as before.
        if !g.started {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        if m.outstanding.load(Ordering::Acquire) != 0 {
            return Err(DOCA_ERROR_IN_USE);
        }
        g.started = false;
        if let Some(ex) = g.export.take() {
            // Revoke the key (KeyHolder's drop) but keep the blobs' memory until destroy.
            let ExportState { rdma_blob, pci_blob, .. } = ex;
            g.retired_blobs.extend(rdma_blob);
            g.retired_blobs.extend(pci_blob);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_get_memrange(
    mmap: *const doca_mmap,
    addr: *mut *mut c_void,
    len: *mut usize,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes an mmap of this provider (or NULL, refused).
        let m = unsafe { mmap_ref(mmap) }?;
        if addr.is_null() || len.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let g = m.lock();
        if !g.range_set {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        // SAFETY: both out-pointers checked non-NULL; writable by the caller's contract.
        unsafe {
            addr.write(g.addr as *mut c_void);
            len.write(g.len);
        }
        Ok(())
    })
}

/// Shared body of export_rdma / export_pci.
///
/// # Safety
/// As the C entry points: `mmap` an mmap of this provider or NULL, out-pointers writable.
unsafe fn export(
    mmap: *mut doca_mmap,
    dev: *const doca_dev,
    ty: ExportType,
    export_desc: *mut *const c_void,
    export_desc_len: *mut usize,
) -> Result<(), doca_error_t> {
    // SAFETY: forwarded contract.
    let m = unsafe { mmap_ref(mmap) }?;
    let d = dev_ref(dev)?;
    if export_desc.is_null() || export_desc_len.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let mut g = m.lock();
    if m.is_imported() {
        return Err(crate::sdk_fail!(
            DOCA_ERROR_NOT_SUPPORTED,
            "doca_mmap_export: an mmap created from an export cannot be exported again"
        ));
    }
    if !g.started {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    if !g.devs.iter().any(|x| x.is(d.as_ptr())) {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    if g.export.is_none() {
        let key = random_nonzero_u64();
        let holder = KeyHolder::claim(g.addr, g.len, key);
        let transport = match &holder {
            KeyHolder::Shm { seg, slot } => {
                Transport::Shm { fd: seg.seg.fd(), seg_len: seg.seg.len(), offset: g.addr - seg.base(), slot: *slot }
            }
            KeyHolder::Cell(c) => Transport::ProcessVm { key_cell: *c as *const AtomicU64 as u64 },
        };
        let desc = ExportDesc {
            export_type: ExportType::Rdma,
            pid: own_pid(),
            addr: g.addr as u64,
            len: g.len,
            perms: m.perms_of_started(),
            key,
            transport,
        };
        g.export = Some(ExportState { desc, _holder: holder, rdma_blob: None, pci_blob: None });
    }
    let ex = g.export.as_mut().ok_or(DOCA_ERROR_UNEXPECTED)?;
    let mut desc = ex.desc.clone();
    desc.export_type = ty;
    let slot = match ty {
        ExportType::Rdma => &mut ex.rdma_blob,
        ExportType::Pci => &mut ex.pci_blob,
    };
    let blob = slot.get_or_insert_with(|| desc.encode().into_boxed_slice());
    // SAFETY: out-pointers checked non-NULL; writable by the caller's contract. The blob is a
    // heap allocation owned by the mmap, never moved, kept until destroy.
    unsafe {
        export_desc.write(blob.as_ptr().cast());
        export_desc_len.write(blob.len());
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_export_rdma(
    mmap: *mut doca_mmap,
    dev: *const doca_dev,
    export_desc: *mut *const c_void,
    export_desc_len: *mut usize,
) -> doca_error_t {
    // SAFETY: the C contract is forwarded unchanged.
    guard_err(|| unsafe { export(mmap, dev, ExportType::Rdma, export_desc, export_desc_len) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_export_pci(
    mmap: *mut doca_mmap,
    dev: *const doca_dev,
    export_desc: *mut *const c_void,
    export_desc_len: *mut usize,
) -> doca_error_t {
    // SAFETY: the C contract is forwarded unchanged.
    guard_err(|| unsafe { export(mmap, dev, ExportType::Pci, export_desc, export_desc_len) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_mmap_create_from_export(
    user_data: *const doca_data,
    export_desc: *const c_void,
    export_desc_len: usize,
    dev: *mut doca_dev,
    mmap: *mut *mut doca_mmap,
) -> doca_error_t {
    guard_err(|| {
        if export_desc.is_null() || export_desc_len == 0 || mmap.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let d = dev_ref(dev)?;
        // SAFETY: non-NULL checked; the caller guarantees `export_desc_len` readable bytes.
        // The bytes are only parsed (BlobReader never reads out of bounds).
        let bytes = unsafe { std::slice::from_raw_parts(export_desc.cast::<u8>(), export_desc_len) };
        let desc = ExportDesc::decode(bytes)?;
        // SAFETY: optional; a non-NULL `user_data` points to a doca_data by the C contract.
        let ud = unsafe { user_data.as_ref() }.map_or(0, |u| u.as_u64());
        let (addr, len, perms) = (desc.addr as usize, desc.len, desc.perms);
        let remote = RemoteRegion { mem: Arc::new(RemoteMemory::connect(desc)?) };
        let m = Box::into_raw(doca_mmap::new(
            MmapInner {
                addr,
                len,
                range_set: true,
                devs: vec![d],
                started: true,
                export: None,
                retired_blobs: Vec::new(),
                user_data: ud,
            },
            perms,
            Some(remote),
        ));
        lock(&MMAPS).insert(m as usize);
        // SAFETY: non-NULL checked; writable by the caller's contract.
        unsafe { out(mmap, m) }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dev::{doca_dev_close, test_open_default};
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    const ALL_REMOTE: u32 = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
        | DOCA_ACCESS_FLAG_RDMA_READ
        | DOCA_ACCESS_FLAG_RDMA_WRITE
        | DOCA_ACCESS_FLAG_RDMA_ATOMIC;

    pub(crate) fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    pub(crate) fn unhex(s: &str) -> Vec<u8> {
        (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
    }

    /// A started mmap over `[p, p+len)` with `perms` and `dev` added.
    pub(crate) fn local_mmap(p: *mut u8, len: usize, perms: u32, dev: *mut doca_dev) -> *mut doca_mmap {
        let mut m = ptr::null_mut();
        // SAFETY: valid out-pointer; the memory stays alive for the test's duration.
        unsafe {
            assert_eq!(doca_mmap_create(&mut m), DOCA_SUCCESS);
            assert_eq!(doca_mmap_set_memrange(m, p.cast(), len), DOCA_SUCCESS);
            assert_eq!(doca_mmap_set_permissions(m, perms), DOCA_SUCCESS);
            assert_eq!(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
            assert_eq!(doca_mmap_start(m), DOCA_SUCCESS);
        }
        m
    }

    fn export_rdma(m: *mut doca_mmap, dev: *mut doca_dev) -> Vec<u8> {
        let mut p = ptr::null();
        let mut n = 0usize;
        // SAFETY: valid out-pointers; the blob is copied while the mmap lives.
        unsafe {
            assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_SUCCESS);
            std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec()
        }
    }

    fn import(blob: &[u8], dev: *mut doca_dev) -> Result<*mut doca_mmap, doca_error_t> {
        let mut m = ptr::null_mut();
        let ud = doca_data::from_u64(7);
        // SAFETY: `blob` is readable for its length; valid out-pointer.
        let r = unsafe { doca_mmap_create_from_export(&ud, blob.as_ptr().cast(), blob.len(), dev, &mut m) };
        if r == DOCA_SUCCESS {
            Ok(m)
        } else {
            Err(r)
        }
    }

    fn region(m: *mut doca_mmap) -> RemoteRegion {
        // SAFETY: `m` is a live mmap of this provider.
        unsafe { mmap_ref(m) }.unwrap().remote_region().unwrap()
    }

    fn destroy(m: *mut doca_mmap) {
        // SAFETY: `m` is a live mmap.
        assert_eq!(unsafe { doca_mmap_destroy(m) }, DOCA_SUCCESS);
    }

    #[test]
    fn lifecycle_and_validation() {
        let dev = crate::dev::test_open_private("mmap-lifecycle"); // IN_USE below needs the last open
        let mut mem = vec![0u8; 4096];
        let mut m = ptr::null_mut();
        let mut p = ptr::null();
        let mut n = 0usize;
        let mut a = ptr::null_mut();
        let mut l = 0usize;
        // SAFETY: every pointer is valid or deliberately NULL/foreign; `mem` outlives the mmap.
        unsafe {
            assert_eq!(doca_mmap_create(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_create(&mut m), DOCA_SUCCESS);
            assert_eq!(doca_mmap_get_memrange(m, &mut a, &mut l), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_mmap_start(m), DOCA_ERROR_BAD_STATE); // no memrange
            assert_eq!(doca_mmap_set_memrange(m, ptr::null_mut(), 16), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_set_memrange(m, mem.as_mut_ptr().cast(), 0), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_set_memrange(ptr::null_mut(), mem.as_mut_ptr().cast(), 16), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_set_memrange(m, usize::MAX as *mut c_void, 2), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_set_memrange(m, mem.as_mut_ptr().cast(), mem.len()), DOCA_SUCCESS);
            assert_eq!(doca_mmap_set_permissions(m, 0x80), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_set_permissions(m, 1 << 31), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_set_permissions(m, ACCESS_MASK_ALL), DOCA_SUCCESS);
            assert_eq!(doca_mmap_set_permissions(m, ALL_REMOTE), DOCA_SUCCESS);
            assert_eq!(doca_mmap_add_dev(m, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_add_dev(m, 0x1000 as *mut doca_dev), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_ERROR_BAD_STATE); // not started
            assert_eq!(doca_mmap_start(m), DOCA_SUCCESS);
            assert_eq!(doca_mmap_start(m), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_mmap_set_memrange(m, mem.as_mut_ptr().cast(), 16), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_mmap_set_permissions(m, 1), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_mmap_add_dev(m, dev), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_mmap_get_memrange(m, &mut a, &mut l), DOCA_SUCCESS);
            assert_eq!((a as usize, l), (mem.as_ptr() as usize, 4096));
            assert_eq!(doca_mmap_get_memrange(m, ptr::null_mut(), &mut l), DOCA_ERROR_INVALID_VALUE);
            // Export needs the device added.
            assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_export_rdma(m, ptr::null(), &mut p, &mut n), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_stop(m), DOCA_SUCCESS);
            assert_eq!(doca_mmap_stop(m), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
            assert_eq!(doca_mmap_add_dev(m, dev), DOCA_SUCCESS); // idempotent
            assert_eq!(doca_dev_close(dev), DOCA_ERROR_IN_USE); // the mmap references it
            assert_eq!(doca_mmap_start(m), DOCA_SUCCESS);
            assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_SUCCESS);
            let (p1, n1) = (p, n);
            assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_SUCCESS);
            assert_eq!((p, n), (p1, n1), "same blob while the export lives");
            assert_eq!(doca_mmap_export_pci(m, dev, &mut p, &mut n), DOCA_SUCCESS);
            assert_ne!(p, p1);
            // Outstanding buffers block stop and destroy.
            let mr = mmap_ref(m).unwrap();
            assert_eq!(mr.buf_acquire(mem.as_ptr() as usize + 4000, 97).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            mr.buf_acquire(mem.as_ptr() as usize, 16).unwrap();
            assert_eq!(doca_mmap_stop(m), DOCA_ERROR_IN_USE);
            assert_eq!(doca_mmap_destroy(m), DOCA_ERROR_IN_USE);
            mr.buf_release();
            // Blobs from before a stop stay readable until destroy.
            assert_eq!(doca_mmap_stop(m), DOCA_SUCCESS);
            assert!(BlobReader::new(std::slice::from_raw_parts(p1.cast::<u8>(), n1), BlobKind::Mmap).is_ok());
            assert_eq!(doca_mmap_destroy(m), DOCA_SUCCESS);
            assert_eq!(doca_mmap_destroy(m), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_destroy(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
        }
    }

    #[test]
    fn shared_alloc_registry() {
        let p = alloc_shared(100).unwrap();
        assert_eq!(p as usize % page_size(), 0);
        assert!(is_shared(p, 100));
        assert!(is_shared(p, page_size())); // rounded up to a page
        assert!(!is_shared(p, page_size() + 1));
        // SAFETY: p is 100+ writable bytes.
        unsafe { *p.add(99) = 1 };
        assert_eq!(alloc_shared(0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        let mut q = ptr::null_mut();
        // SAFETY: valid out-pointer; then frees of a live, a foreign and a freed pointer.
        unsafe {
            assert_eq!(doca_soft_alloc_shared(10, &mut q), DOCA_SUCCESS);
            assert_eq!(doca_soft_alloc_shared(10, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_soft_free_shared(q), DOCA_SUCCESS);
            assert_eq!(doca_soft_free_shared(q), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_soft_free_shared(p.add(1).cast()), DOCA_ERROR_INVALID_VALUE);
        }
        free_shared(p).unwrap();
        assert!(!is_shared(p, 1));
    }

    /// Exercises an imported region against the local memory it maps.
    fn check_region(r: &RemoteRegion, local: *mut u8, len: usize, atomics: bool) {
        // SAFETY: `local` is `len` bytes of live memory in this process, written only here.
        let mem = unsafe { std::slice::from_raw_parts_mut(local, len) };
        mem[..4].copy_from_slice(b"abcd");
        let mut b = [0u8; 4];
        r.read(0, &mut b).unwrap();
        assert_eq!(&b, b"abcd");
        r.write(8, b"wxyz").unwrap();
        assert_eq!(&mem[8..12], b"wxyz");
        r.read(len - 4, &mut b).unwrap();
        assert_eq!(r.read(len - 3, &mut b).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(r.write(usize::MAX, b"x").unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(r.offset_of(r.addr() + 16, 8).unwrap(), 16);
        assert_eq!(r.offset_of(r.addr() - 1, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(r.offset_of(r.addr() + len as u64, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        if atomics {
            mem[16..24].copy_from_slice(&5u64.to_ne_bytes());
            assert_eq!(r.atomic_fetch_add(16, 3).unwrap(), 5);
            assert_eq!(r.atomic_cas(16, 8, 100).unwrap(), 8);
            assert_eq!(r.atomic_cas(16, 8, 200).unwrap(), 100);
            assert_eq!(u64::from_ne_bytes(mem[16..24].try_into().unwrap()), 100);
            assert_eq!(r.atomic_fetch_add(17, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(r.atomic_fetch_add(len - 4, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        } else {
            assert_eq!(r.atomic_fetch_add(16, 1).unwrap_err(), DOCA_ERROR_NOT_SUPPORTED);
        }
        assert!(r.owner_alive());
    }

    #[test]
    fn import_in_process_both_paths() {
        let dev = test_open_default();
        // Shared-memory path.
        let len = 8192;
        let sp = alloc_shared(len).unwrap();
        let m1 = local_mmap(sp, len, ALL_REMOTE, dev);
        let blob1 = export_rdma(m1, dev);
        let i1 = import(&blob1, dev).unwrap();
        let r1 = region(i1);
        assert!(r1.is_shared_memory());
        assert_eq!(r1.addr(), sp as u64);
        check_region(&r1, sp, len, true);
        // The imported mmap reports the owner's range.
        let (mut a, mut l) = (ptr::null_mut(), 0usize);
        // SAFETY: live mmap, valid out-pointers.
        unsafe { assert_eq!(doca_mmap_get_memrange(i1, &mut a, &mut l), DOCA_SUCCESS) };
        assert_eq!((a as usize, l), (sp as usize, len));
        // SAFETY: live imported mmap: configuration and re-export are refused.
        unsafe {
            assert_eq!(doca_mmap_set_permissions(i1, 1), DOCA_ERROR_BAD_STATE);
            let (mut p, mut n) = (ptr::null(), 0usize);
            assert_eq!(doca_mmap_export_rdma(i1, dev, &mut p, &mut n), DOCA_ERROR_NOT_SUPPORTED);
        }

        // process_vm path over ordinary heap memory.
        let mut heap = vec![0u8; 4096];
        let hp = heap.as_mut_ptr();
        let m2 = local_mmap(hp, heap.len(), ALL_REMOTE, dev);
        let blob2 = export_rdma(m2, dev);
        let i2 = import(&blob2, dev).unwrap();
        let r2 = region(i2);
        assert!(!r2.is_shared_memory());
        check_region(&r2, hp, 4096, false);

        // A sub-range of a shared allocation also takes the shared path.
        // SAFETY: inside the allocation.
        let m3 = local_mmap(unsafe { sp.add(4096) }, 64, DOCA_ACCESS_FLAG_RDMA_READ, dev);
        let i3 = import(&export_rdma(m3, dev), dev).unwrap();
        let r3 = region(i3);
        assert!(r3.is_shared_memory());
        let mut b = [0u8; 8];
        r3.read(0, &mut b).unwrap();
        // Read-only export: writes and atomics refused.
        assert_eq!(r3.write(0, b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(r3.atomic_fetch_add(0, 1).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);

        // Revocation: stopping (then destroying) the exporter invalidates the key.
        // SAFETY: live local mmaps without buffers.
        unsafe {
            assert_eq!(doca_mmap_stop(m1), DOCA_SUCCESS);
            assert_eq!(doca_mmap_destroy(m2), DOCA_SUCCESS);
        }
        assert_eq!(r1.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(r1.write(0, b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(r1.atomic_fetch_add(16, 1).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(r2.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(r2.write(0, b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        // Importing a revoked export fails cleanly.
        assert_eq!(import(&blob1, dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
        assert_eq!(import(&blob2, dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
        // Restarting gives a new key; the old blob stays dead, the new one works.
        // SAFETY: live stopped mmap.
        unsafe { assert_eq!(doca_mmap_start(m1), DOCA_SUCCESS) };
        let blob1b = export_rdma(m1, dev);
        assert_ne!(blob1, blob1b);
        assert_eq!(r1.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        let i1b = import(&blob1b, dev).unwrap();
        region(i1b).read(0, &mut b).unwrap();

        // The region outlives its imported mmap.
        // Stopping an imported mmap succeeds (NVIDIA's samples rely on it), once; it cannot
        // be started again, and destroy still works.
        // SAFETY: live imported mmap without buffers.
        unsafe {
            assert_eq!(doca_mmap_stop(i1), DOCA_SUCCESS);
            assert_eq!(doca_mmap_stop(i1), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_mmap_start(i1), DOCA_ERROR_BAD_STATE);
        }
        destroy(i1);
        destroy(i1b);
        destroy(i2);
        assert_eq!(r3.len(), 64);
        destroy(i3);
        r3.read(0, &mut b).unwrap();
        destroy(m3);
        assert_eq!(r3.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        destroy(m1);
        free_shared(sp).unwrap();
        drop((r1, r2, r3));
        // SAFETY: no mmap references the device any more.
        assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
    }

    /// Memory unmapped under a live process_vm export: IO_FAILED; once revoked: NOT_PERMITTED.
    #[test]
    fn pvm_unmapped_memory() {
        let dev = test_open_default();
        let len = page_size();
        // SAFETY: a fresh private anonymous mapping, unmapped at the end of the test.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let m = local_mmap(p.cast(), len, ALL_REMOTE, dev);
        let i = import(&export_rdma(m, dev), dev).unwrap();
        let r = region(i);
        let mut b = [0u8; 8];
        r.read(0, &mut b).unwrap();
        // Made inaccessible rather than unmapped, so a parallel test cannot get the same
        // address from the kernel meanwhile.
        // SAFETY: changes the protection of our own mapping, which nothing dereferences
        // until it is unmapped at the end of the test.
        assert_eq!(unsafe { libc::mprotect(p, len, libc::PROT_NONE) }, 0);
        assert_eq!(r.read(0, &mut b).unwrap_err(), DOCA_ERROR_IO_FAILED);
        assert_eq!(r.write(0, &b).unwrap_err(), DOCA_ERROR_IO_FAILED);
        destroy(m);
        assert_eq!(r.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(r.write(0, &b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        destroy(i);
        drop(r);
        // SAFETY: the mapping made above, unmapped once, no longer referenced.
        assert_eq!(unsafe { libc::munmap(p, len) }, 0);
        // SAFETY: no mmap references the device any more.
        assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
    }

    #[test]
    fn pci_export_permissions() {
        let dev = test_open_default();
        let sp = alloc_shared(4096).unwrap();
        let m = local_mmap(sp, 4096, DOCA_ACCESS_FLAG_PCI_READ_ONLY | DOCA_ACCESS_FLAG_RDMA_WRITE, dev);
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live mmap, valid out-pointers; the blob is copied while it lives.
        let blob = unsafe {
            assert_eq!(doca_mmap_export_pci(m, dev, &mut p, &mut n), DOCA_SUCCESS);
            std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec()
        };
        let i = import(&blob, dev).unwrap();
        let r = region(i);
        let mut b = [0u8; 4];
        r.read(0, &mut b).unwrap();
        // RDMA_WRITE does not grant PCI writes.
        assert_eq!(r.write(0, b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(r.atomic_cas(0, 0, 1).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        destroy(i);
        destroy(m);
        free_shared(sp).unwrap();
        // SAFETY: no mmap references the device any more.
        assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
    }

    #[test]
    fn bad_blobs_are_invalid_value() {
        let dev = test_open_default();
        let sp = alloc_shared(4096).unwrap();
        let m = local_mmap(sp, 4096, ALL_REMOTE, dev);
        let mut heap = vec![0u8; 256];
        let m2 = local_mmap(heap.as_mut_ptr(), 256, ALL_REMOTE, dev);
        for blob in [export_rdma(m, dev), export_rdma(m2, dev)] {
            // Every truncation.
            for n in 0..blob.len() {
                assert_eq!(ExportDesc::decode(&blob[..n]).unwrap_err(), DOCA_ERROR_INVALID_VALUE, "len {n}");
                if n > 0 {
                    assert_eq!(import(&blob[..n], dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE, "len {n}");
                }
            }
            // Every flipped byte.
            for i in 0..blob.len() {
                for mask in [0x01u8, 0x80, 0xff] {
                    let mut c = blob.clone();
                    c[i] ^= mask;
                    let e = import(&c, dev).unwrap_err();
                    let version_byte = i == 4 || i == 5;
                    assert!(
                        e == DOCA_ERROR_INVALID_VALUE || (version_byte && e == DOCA_ERROR_UNSUPPORTED_VERSION),
                        "byte {i} mask {mask:#x}: {e:?}"
                    );
                }
            }
            // NULL and empty.
            let mut out_m = ptr::null_mut();
            // SAFETY: deliberately NULL / zero-length inputs.
            unsafe {
                assert_eq!(
                    doca_mmap_create_from_export(ptr::null(), ptr::null(), 10, dev, &mut out_m),
                    DOCA_ERROR_INVALID_VALUE
                );
                assert_eq!(
                    doca_mmap_create_from_export(ptr::null(), blob.as_ptr().cast(), 0, dev, &mut out_m),
                    DOCA_ERROR_INVALID_VALUE
                );
                assert_eq!(
                    doca_mmap_create_from_export(
                        ptr::null(),
                        blob.as_ptr().cast(),
                        blob.len(),
                        ptr::null_mut(),
                        &mut out_m
                    ),
                    DOCA_ERROR_INVALID_VALUE
                );
                assert_eq!(
                    doca_mmap_create_from_export(ptr::null(), blob.as_ptr().cast(), blob.len(), dev, ptr::null_mut()),
                    DOCA_ERROR_INVALID_VALUE
                );
                // NULL user_data is allowed.
                assert_eq!(
                    doca_mmap_create_from_export(ptr::null(), blob.as_ptr().cast(), blob.len(), dev, &mut out_m),
                    DOCA_SUCCESS
                );
                destroy(out_m);
            }
            // Well-framed blobs with bad fields.
            let good = ExportDesc::decode(&blob).unwrap();
            let mut bad_fields: Vec<ExportDesc> = Vec::new();
            let mut d = good.clone();
            d.pid = 0;
            bad_fields.push(d);
            let mut d = good.clone();
            d.pid = u32::MAX;
            bad_fields.push(d);
            let mut d = good.clone();
            d.len = 0;
            bad_fields.push(d);
            let mut d = good.clone();
            d.addr = u64::MAX - 2;
            bad_fields.push(d);
            let mut d = good.clone();
            d.addr = 0;
            bad_fields.push(d);
            let mut d = good.clone();
            d.perms = 0x100;
            bad_fields.push(d);
            let mut d = good.clone();
            d.key = 0;
            bad_fields.push(d);
            match good.transport {
                Transport::Shm { fd, seg_len, offset, slot } => {
                    let mut d = good.clone();
                    d.transport = Transport::Shm { fd, seg_len, offset, slot: SEG_NSLOTS };
                    bad_fields.push(d);
                    let mut d = good.clone();
                    d.transport = Transport::Shm { fd, seg_len, offset: 0, slot };
                    bad_fields.push(d);
                    let mut d = good.clone();
                    d.transport = Transport::Shm { fd, seg_len: offset, offset, slot };
                    bad_fields.push(d);
                    let mut d = good.clone();
                    d.len = seg_len;
                    bad_fields.push(d);
                }
                Transport::ProcessVm { .. } => {
                    let mut d = good.clone();
                    d.transport = Transport::ProcessVm { key_cell: 0 };
                    bad_fields.push(d);
                    let mut d = good.clone();
                    d.transport = Transport::ProcessVm { key_cell: 12 };
                    bad_fields.push(d);
                }
            }
            for d in bad_fields {
                assert_eq!(import(&d.encode(), dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE, "{d:?}");
            }
            // Unknown export type / transport tags.
            let mut w = BlobWriter::new(BlobKind::Mmap);
            w.u8(3).u8(1);
            assert_eq!(import(&w.finish(), dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            let mut w = BlobWriter::new(BlobKind::Mmap);
            w.u8(1).u8(9).u32(1).u64(1).u64(1).u32(0).u64(1).u64(8);
            assert_eq!(import(&w.finish(), dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            // Trailing bytes after a complete description.
            let mut raw = ExportDesc::decode(&blob).unwrap().encode();
            let payload_len = u32::from_le_bytes(raw[8..12].try_into().unwrap()) + 1;
            raw.truncate(raw.len() - 8);
            raw.push(0);
            raw[8..12].copy_from_slice(&payload_len.to_le_bytes());
            let sum = crate::blob::fnv1a64(&raw);
            raw.extend_from_slice(&sum.to_le_bytes());
            assert_eq!(import(&raw, dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            // A well-formed blob with a wrong key: the export is not found.
            let mut d = good.clone();
            d.key ^= 1;
            assert_eq!(import(&d.encode(), dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
            // A sync-event blob is not an mmap blob.
            let mut w = BlobWriter::new(BlobKind::SyncEvent);
            w.u64(1);
            assert_eq!(import(&w.finish(), dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        }
        // A shared-memory blob pointing at a descriptor that is not our segment.
        let good = ExportDesc::decode(&export_rdma(m, dev)).unwrap();
        if let Transport::Shm { seg_len, offset, slot, .. } = good.transport {
            let mut d = good.clone();
            d.transport = Transport::Shm { fd: 0, seg_len, offset, slot };
            assert!(import(&d.encode(), dev).is_err());
            let mut d = good.clone();
            d.transport = Transport::Shm { fd: 1_000_000, seg_len, offset, slot };
            assert_eq!(import(&d.encode(), dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
        }
        destroy(m);
        destroy(m2);
        free_shared(sp).unwrap();
        // SAFETY: no mmap references the device any more.
        assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
    }

    // ---- cross-process tests: the test binary re-executes itself as the child ----

    const ROLE_ENV: &str = "DOCA_SOFT_TEST_MMAP_ROLE";
    const SHM_BLOB_ENV: &str = "DOCA_SOFT_TEST_MMAP_SHM_BLOB";
    const PVM_BLOB_ENV: &str = "DOCA_SOFT_TEST_MMAP_PVM_BLOB";

    fn test_name(f: &str) -> String {
        let m = module_path!();
        format!("{}::{f}", m.split_once("::").map_or(m, |x| x.1))
    }

    /// Spawns this test binary running only `test` with `envs`, stdin/stdout piped.
    fn spawn_child(test: &str, role: &str, envs: &[(&str, String)]) -> Child {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", &test_name(test), "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            c.env(k, v);
        }
        c.spawn().unwrap()
    }

    /// Waits for the child, killing it after `limit`.
    fn wait_bounded(mut child: Child, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child timed out after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Reads one line from the child's stdout with a deadline (a thread does the read).
    fn read_line_bounded(child: &mut Child, limit: Duration) -> Option<String> {
        let stdout = child.stdout.take()?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        // The harness may have printed "test name ... " on the same line.
                        if let Some(i) = line.find("BLOB=") {
                            let _ = tx.send(line[i + 5..].trim().to_string());
                            return;
                        }
                    }
                }
            }
        });
        rx.recv_timeout(limit).ok()
    }

    /// Parent exports two regions (shared memory and heap); the child imports both, checks
    /// the contents, writes new contents and uses atomics; the parent then checks.
    #[test]
    fn cross_process_import() {
        if std::env::var(ROLE_ENV).as_deref() == Ok("importer") {
            let dev = test_open_default();
            let i1 = import(&unhex(&std::env::var(SHM_BLOB_ENV).unwrap()), dev).unwrap();
            let i2 = import(&unhex(&std::env::var(PVM_BLOB_ENV).unwrap()), dev).unwrap();
            let (r1, r2) = (region(i1), region(i2));
            assert!(r1.is_shared_memory() && !r2.is_shared_memory());
            assert_ne!(r1.owner_pid(), std::process::id());
            let mut b = [0u8; 16];
            r1.read(0, &mut b).unwrap();
            assert_eq!(&b, b"parent-shm-data!");
            r2.read(0, &mut b).unwrap();
            assert_eq!(&b, b"parent-heap-data");
            r1.write(0, b"child-wrote-shm!").unwrap();
            r2.write(0, b"child-wrote-heap").unwrap();
            assert_eq!(r1.atomic_fetch_add(64, 10).unwrap(), 32);
            assert_eq!(r1.atomic_cas(64, 42, 1000).unwrap(), 42);
            assert_eq!(r2.atomic_fetch_add(64, 1).unwrap_err(), DOCA_ERROR_NOT_SUPPORTED);
            assert_eq!(r1.read(4096, &mut b).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            assert!(r1.owner_alive() && r2.owner_alive());
            destroy(i1);
            destroy(i2);
            // SAFETY: no mmap references the device any more.
            assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
            println!("CHILD-OK");
            return;
        }
        if std::env::var_os(ROLE_ENV).is_some() {
            return; // another role: not for this test
        }
        let dev = test_open_default();
        let sp = alloc_shared(4096).unwrap();
        // SAFETY: 4096 writable bytes.
        let shm = unsafe { std::slice::from_raw_parts_mut(sp, 4096) };
        shm[..16].copy_from_slice(b"parent-shm-data!");
        shm[64..72].copy_from_slice(&32u64.to_ne_bytes());
        let mut heap = vec![0u8; 128];
        heap[..16].copy_from_slice(b"parent-heap-data");
        let m1 = local_mmap(sp, 4096, ALL_REMOTE, dev);
        let m2 = local_mmap(heap.as_mut_ptr(), heap.len(), ALL_REMOTE, dev);
        let child = spawn_child(
            "cross_process_import",
            "importer",
            &[(SHM_BLOB_ENV, hex(&export_rdma(m1, dev))), (PVM_BLOB_ENV, hex(&export_rdma(m2, dev)))],
        );
        let st = wait_bounded(child, Duration::from_secs(60));
        assert!(st.success(), "child failed: {st:?}");
        assert_eq!(&shm[..16], b"child-wrote-shm!");
        // The child wrote the heap Vec through process_vm_writev.
        assert_eq!(&heap[..16], b"child-wrote-heap");
        assert_eq!(u64::from_ne_bytes(shm[64..72].try_into().unwrap()), 1000);
        destroy(m1);
        destroy(m2);
        free_shared(sp).unwrap();
        // SAFETY: no mmap references the device any more.
        assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
    }

    /// A child exports memory and waits; the parent imports it, then kills the child:
    /// process_vm accesses fail with CONNECTION_ABORTED, the shared path reports the owner
    /// dead, and new imports fail with NOT_FOUND.
    #[test]
    fn dead_owner() {
        if std::env::var(ROLE_ENV).as_deref() == Ok("exporter") {
            let dev = test_open_default();
            let sp = alloc_shared(4096).unwrap();
            // SAFETY: 4096 writable bytes.
            unsafe { sp.copy_from(b"child-memory".as_ptr(), 12) };
            let m1 = local_mmap(sp, 4096, ALL_REMOTE, dev);
            let heap: &'static mut [u8] = Box::leak(vec![7u8; 64].into_boxed_slice());
            let m2 = local_mmap(heap.as_mut_ptr(), 64, ALL_REMOTE, dev);
            println!("BLOB={},{}", hex(&export_rdma(m1, dev)), hex(&export_rdma(m2, dev)));
            std::io::stdout().flush().unwrap();
            // Wait until the parent kills us (or closes stdin), bounded.
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
            std::process::exit(0);
        }
        if std::env::var_os(ROLE_ENV).is_some() {
            return;
        }
        let dev = test_open_default();
        let mut child = spawn_child("dead_owner", "exporter", &[]);
        let line = match read_line_bounded(&mut child, Duration::from_secs(60)) {
            Some(l) => l,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child did not export in time");
            }
        };
        let (b1, b2) = line.split_once(',').unwrap();
        let (b1, b2) = (unhex(b1), unhex(b2));
        let i1 = import(&b1, dev).unwrap();
        let i2 = import(&b2, dev).unwrap();
        let (r1, r2) = (region(i1), region(i2));
        let mut b = [0u8; 12];
        r1.read(0, &mut b).unwrap();
        assert_eq!(&b, b"child-memory");
        r2.read(0, &mut b).unwrap();
        assert_eq!(b, [7u8; 12]);
        assert!(r1.owner_alive() && r2.owner_alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(r2.read(0, &mut b).unwrap_err(), DOCA_ERROR_CONNECTION_ABORTED);
        assert_eq!(r2.write(0, b"x").unwrap_err(), DOCA_ERROR_CONNECTION_ABORTED);
        assert!(!r1.owner_alive() && !r2.owner_alive());
        // The orphaned segment is still mapped here: reading it is harmless.
        r1.read(0, &mut b).unwrap();
        assert_eq!(import(&b1, dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
        assert_eq!(import(&b2, dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
        destroy(i1);
        destroy(i2);
        // SAFETY: no mmap references the device any more.
        assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
    }
}
