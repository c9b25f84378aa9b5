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
//! [`BlobKind::Mmap`](crate::blob::BlobKind::Mmap)) that another process — or this one — passes to
//! `doca_mmap_create_from_export`. The blob is owned by the exporting mmap and stays valid
//! until that mmap is destroyed. It carries the owner's pid, the range (the owner's virtual
//! addresses, which is also the memrange of the imported mmap, as in DOCA), the permissions, a
//! random 64-bit key, and how to reach the memory:
//!
//! * **Shared-memory path.** If the range lies inside memory allocated with
//!   [`alloc_shared`] (also exported to C as `doca_soft_alloc_shared`), the memory is a memfd
//!   segment ([`ShmSegment`](crate::shm::ShmSegment)). The blob carries (pid, fd, offset); the importer maps the
//!   segment itself, so reads, writes and atomics need no help from the owner's CPU. This is
//!   the path the runtime uses for registered memory.
//! * **process_vm path.** Any other memory is reached with `process_vm_readv` /
//!   `process_vm_writev` on the owner's pid (same user, ptrace permission). Under Yama
//!   `ptrace_scope` 1 the first such export of a process declares every process of its user
//!   a tracer (`PR_SET_PTRACER_ANY`, logged; see `vm::grant_importers_once`), since
//!   exporting is granting; under 2 or 3 unprivileged importers get NOT_PERMITTED.
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

//!
//! ## Where the code is
//!
//! | file | owns |
//! | --- | --- |
//! | `mod.rs` | the `doca_mmap` object, its state and its C entry points (create, configure, start/stop, export, import) |
//! | `alloc.rs` | the shared-memory allocator (`doca_soft_alloc_shared`) and the segment header layout |
//! | `keys.rs` | key cells in the owner's process (claim, revoke, recycle) |
//! | `export.rs` | the export blob: its decoded form and the codec |
//! | `remote.rs` | the importer's `RemoteRegion`: connect, checked reads and writes |
//! | `atomics.rs` | remote atomics on the shared-memory path |
//! | `vm.rs` | the process_vm path (`process_vm_readv` / `process_vm_writev`) |
//! | `liveness.rs` | whether an export's owner process is still alive |
//! | `tests.rs` | the unit tests (several spawn a child process to import from) |

use std::collections::BTreeSet;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::dev::{dev_ref, doca_dev, DevRef};
use crate::ffi::{guard_err, out};
use crate::shm::{own_pid, random_nonzero_u64};
use crate::types::*;

mod alloc;
mod atomics;
mod export;
mod keys;
mod liveness;
mod remote;
mod vm;

// The paths other modules use (`crate::mmap::alloc_shared`, `crate::mmap::RemoteRegion`, ...)
// stay what they were before the split: the files are an inner layout, not API.
pub use alloc::{alloc_shared, doca_soft_alloc_shared, doca_soft_free_shared, free_shared, is_shared};
pub(crate) use export::ExportType;
use export::{ExportDesc, ExportState, Transport};
use keys::KeyHolder;
pub(crate) use remote::RemoteRegion;

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
            KeyHolder::Cell(c) => {
                vm::grant_importers_once();
                Transport::ProcessVm { key_cell: *c as *const AtomicU64 as u64 }
            }
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
        let remote = RemoteRegion::connect(desc)?;
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
mod tests;
