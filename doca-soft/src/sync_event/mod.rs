//! Sync events (`doca_sync_event_*`): a 64-bit counter shared between threads and processes.
//!
//! # Model
//!
//! * **Storage.** The counter lives in a shared-memory segment ([`ShmSegment`], a sealed
//!   memfd) together with a small header: magic, layout version, random key, a futex
//!   sequence word and a table of waiter doorbells (see the `shared` submodule). The segment is created
//!   when the event is first started and kept for the object's life. With
//!   `doca_sync_event_set_addr` the counter is the caller's 8 bytes instead; the header is
//!   then private to this process (shared by every handle created here on the same address),
//!   and export to another process is `DOCA_ERROR_NOT_SUPPORTED` (we cannot know whether
//!   arbitrary user memory is visible to another process).
//! * **Modes.** `doca_sync_event_start` makes a *standalone* event used with the synchronous
//!   calls (get/update/wait); it can then never become a ctx (connecting or starting its ctx
//!   gives `DOCA_ERROR_BAD_STATE`). `doca_sync_event_as_ctx` (before any standalone start)
//!   makes it a *ctx*: connect to a PE, `doca_ctx_start`, and drive it with tasks; it can
//!   then not be started standalone. The synchronous calls work in both modes once started.
//! * **Export / import.** `export_to_remote_pci` / `export_to_remote_net` (event started)
//!   produce a blob (`BlobKind::SyncEvent`: pid, memfd number, segment length, key, export
//!   flavour) owned by the event and valid until it is destroyed. Any process (this one
//!   included) passes a PCI export to `doca_sync_event_create_from_export` (a network export
//!   there is `DOCA_ERROR_NOT_SUPPORTED`: DOCA opens those only as remote-net handles for
//!   RDMA tasks), which validates the blob,
//!   maps the segment through `/proc/<pid>/fd/<fd>` and checks the magic and the key in the
//!   segment (a wrong key → `DOCA_ERROR_NOT_PERMITTED`). The imported handle cannot be
//!   configured (locations, address) but can be started standalone or used as a ctx. The
//!   exporter must be alive when importing; afterwards each side holds its own mapping.
//! * **Waking.** Publishers (update_set/update_add and the notify tasks) update the counter,
//!   bump the futex word, wake blocked synchronous waiters, and ring the doorbell of every PE
//!   that has pending wait tasks on the event. Nothing polls on a timer.
//! * **Masks.** Waits compare `(value & mask)` with the wait value (`==`, `!=`, or `>` for
//!   `wait_gt`). Every mask is accepted here; hardware requires async wait masks made of
//!   0, 1, 2, 4 or 8 consecutive 0xFF bytes — see [`hw_wait_mask_supported`] and
//!   [`SOFT_ACCEPTS_ANY_WAIT_MASK`].
//!
//! # Ownership and lifetime
//! The caller owns the `doca_sync_event` from create until destroy. Destroy is refused
//! (`DOCA_ERROR_BAD_STATE`) while the event is started standalone (stop it first) or while
//! its ctx is not IDLE (stop it and free its tasks first). Devices recorded as locations or
//! given to `create_from_export` are referenced until destroy (closing them meanwhile fails
//! with `DOCA_ERROR_IN_USE`).
//!
//! # Threads
//! Configuration, ctx and task calls follow DOCA's single-thread rule. The synchronous data
//! path (get, update, wait) only touches atomics in the shared header, so several threads may
//! use it on one started handle at once (a blocking wait on one thread, updates on another).
//! Updates wake waiters only when made through this API (any handle on the same counter);
//! plain stores to `set_addr` memory do not.

mod accessors;
mod caps;
mod remote_net;
pub(crate) mod shared;
mod tasks;
#[cfg(test)]
mod tests;

use core::cell::{Cell, OnceCell, RefCell};
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, Weak};

use crate::blob::{BlobKind, BlobReader, BlobWriter};
use crate::ctx::doca_ctx;
use crate::dev::{dev_ref, doca_dev, DevRef};
use crate::ffi::{guard, guard_err, out};
use crate::shm::{random_nonzero_u64, ShmSegment};
use crate::types::*;
use shared::{Registration, SyncShared, SHARED_LEN};

// The remote-net handle keeps its `crate::sync_event::NAME` path (it was in this file).
pub use remote_net::*;
pub use shared::WAITER_SLOTS;
pub use tasks::{
    doca_sync_event_task_get, doca_sync_event_task_notify_add, doca_sync_event_task_notify_set,
    doca_sync_event_task_wait_eq, doca_sync_event_task_wait_neq,
};

/// True: this provider accepts every wait mask. Hardware does not (see
/// [`hw_wait_mask_supported`]); portable code should validate masks with that rule.
pub const SOFT_ACCEPTS_ANY_WAIT_MASK: bool = true;

/// The hardware rule for masks of asynchronous wait tasks (wait_eq / wait_neq): the mask is
/// 0, or a run of 1, 2, 4 or 8 consecutive 0xFF bytes (any other byte 0x00), e.g.
/// `0xFF`, `0xFFFF_0000`, `u64::MAX`. This provider accepts any mask; a runtime that wants to
/// fail early in the same way as NVIDIA's library can check masks with this function.
pub fn hw_wait_mask_supported(mask: u64) -> bool {
    if mask == 0 {
        return true;
    }
    let bytes = mask.to_le_bytes();
    if bytes.iter().any(|&b| b != 0 && b != 0xFF) {
        return false;
    }
    let first = bytes.iter().position(|&b| b == 0xFF).unwrap_or(0);
    let n = bytes.iter().filter(|&&b| b == 0xFF).count();
    let contiguous = bytes[first..first + n].iter().all(|&b| b == 0xFF);
    contiguous && matches!(n, 1 | 2 | 4 | 8)
}

/// `"SYNC"`: marks a live event.
const EVENT_MAGIC: u32 = 0x5359_4e43;

/// Export flavours recorded in the blob.
const VIA_PCI: u8 = 1;
const VIA_NET: u8 = 2;

/// Location bits (publisher / subscriber).
const LOC_CPU: u8 = 1;
const LOC_REMOTE_PCI: u8 = 2;
const LOC_REMOTE_NET: u8 = 4;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Neither started standalone nor turned into a ctx yet.
    Unset,
    /// `doca_sync_event_start` was called (now or earlier): never a ctx.
    Standalone,
    /// `doca_sync_event_as_ctx` was called: never standalone.
    Ctx,
}

/// Where the counter and the shared header are.
enum Backing {
    /// Counter and header in a memfd segment (exportable).
    Shm(ShmSegment),
    /// Counter in user memory (`set_addr`); header private to this process.
    User { counter: *const AtomicU64, header: Arc<SyncShared> },
}

impl Backing {
    fn shared(&self) -> &SyncShared {
        match self {
            // SAFETY: the segment is at least SHARED_LEN bytes (checked at create/import),
            // page-aligned, lives as long as `self`, and SyncShared is all atomics (any bit
            // pattern is valid, concurrent access from other processes is fine).
            Backing::Shm(seg) => unsafe { &*seg.as_ptr().cast::<SyncShared>() },
            Backing::User { header, .. } => header,
        }
    }

    fn counter(&self) -> &AtomicU64 {
        match self {
            Backing::Shm(_) => &self.shared().counter,
            // SAFETY: set_addr checked non-NULL and 8-byte alignment; the caller keeps the
            // memory valid while the event exists (DOCA contract of set_addr).
            Backing::User { counter, .. } => unsafe { &**counter },
        }
    }
}

/// Private headers of `set_addr` events, by counter address, so that handles created in this
/// process on the same memory wake each other.
static USER_HEADERS: Mutex<Vec<(usize, Weak<SyncShared>)>> = Mutex::new(Vec::new());

fn user_header(addr: usize) -> Arc<SyncShared> {
    let mut tab = USER_HEADERS.lock().unwrap_or_else(|e| e.into_inner());
    tab.retain(|(_, w)| w.strong_count() > 0);
    if let Some(h) = tab.iter().find(|(a, _)| *a == addr).and_then(|(_, w)| w.upgrade()) {
        return h;
    }
    let h = Arc::new(SyncShared::new_private());
    h.init(random_nonzero_u64());
    tab.push((addr, Arc::downgrade(&h)));
    h
}

/// `struct doca_sync_event`.
pub struct doca_sync_event {
    /// The embedded ctx (what `doca_sync_event_as_ctx` returns).
    ctx: doca_ctx,
    magic: u32,
    mode: Cell<Mode>,
    /// Standalone and started.
    started: Cell<bool>,
    /// Created by `create_from_export`: cannot be configured.
    imported: bool,
    user_addr: Cell<*mut u64>,
    backing: OnceCell<Backing>,
    publisher: Cell<u8>,
    subscriber: Cell<u8>,
    devs: RefCell<Vec<DevRef>>,
    export_pci: OnceCell<Vec<u8>>,
    export_net: OnceCell<Vec<u8>>,
    /// Submitted wait tasks not yet satisfied (ctx mode).
    pending: RefCell<Vec<*const crate::task::doca_task>>,
    /// Our PE's doorbell in the waiter table, while `pending` is not empty.
    reg: Cell<Option<Registration>>,
}

impl doca_sync_event {
    fn new(imported: bool, backing: Option<Backing>) -> doca_sync_event {
        let b = OnceCell::new();
        if let Some(x) = backing {
            let _ = b.set(x);
        }
        doca_sync_event {
            ctx: doca_ctx::new(&tasks::SYNC_EVENT_CTX_OPS),
            magic: EVENT_MAGIC,
            mode: Cell::new(Mode::Unset),
            started: Cell::new(false),
            imported,
            user_addr: Cell::new(ptr::null_mut()),
            backing: b,
            publisher: Cell::new(0),
            subscriber: Cell::new(0),
            devs: RefCell::new(Vec::new()),
            export_pci: OnceCell::new(),
            export_net: OnceCell::new(),
            pending: RefCell::new(Vec::new()),
            reg: Cell::new(None),
        }
    }

    /// Boxes the event, binds the ctx owner, and returns the C pointer.
    fn into_raw(self) -> *mut doca_sync_event {
        let raw = Box::into_raw(Box::new(self));
        // SAFETY: `raw` was just created from a Box and is valid; only shared access follows.
        unsafe { (*raw).ctx.bind_owner(raw) };
        raw
    }

    /// True while the event is usable for data-path operations and export.
    fn is_live(&self) -> bool {
        match self.mode.get() {
            Mode::Standalone => self.started.get(),
            Mode::Ctx => self.ctx.state() == DOCA_CTX_STATE_RUNNING,
            Mode::Unset => false,
        }
    }

    /// The backing of a started event, else `DOCA_ERROR_BAD_STATE`.
    fn live(&self) -> Result<&Backing, doca_error_t> {
        if !self.is_live() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        self.backing.get().ok_or(DOCA_ERROR_BAD_STATE)
    }

    /// True while configuration is allowed (not imported, not started in any mode).
    fn check_configurable(&self) -> Result<(), doca_error_t> {
        if self.imported {
            return Err(DOCA_ERROR_NOT_PERMITTED);
        }
        if self.started.get() || self.ctx.state() != DOCA_CTX_STATE_IDLE {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        Ok(())
    }

    /// Creates the backing on first start (segment, or the user-address header).
    fn ensure_backing(&self) -> Result<&Backing, doca_error_t> {
        if let Some(b) = self.backing.get() {
            return Ok(b);
        }
        let addr = self.user_addr.get();
        let b = if !addr.is_null() {
            Backing::User { counter: addr.cast::<AtomicU64>(), header: user_header(addr as usize) }
        } else {
            let seg = ShmSegment::create(SHARED_LEN, "doca-soft-sync-event")?;
            // SAFETY: a fresh zeroed segment of SHARED_LEN bytes, page-aligned; SyncShared is
            // all atomics, so the zeroed bytes are a valid value.
            let hdr = unsafe { &*seg.as_ptr().cast::<SyncShared>() };
            hdr.init(random_nonzero_u64());
            Backing::Shm(seg)
        };
        let _ = self.backing.set(b);
        self.backing.get().ok_or(DOCA_ERROR_UNEXPECTED)
    }

    fn publish_set(b: &Backing, v: u64) {
        b.counter().store(v, SeqCst);
        b.shared().wake_all();
    }

    fn publish_add(b: &Backing, v: u64) -> u64 {
        let old = b.counter().fetch_add(v, SeqCst);
        b.shared().wake_all();
        old
    }

    fn add_location(&self, publisher: bool, bit: u8, dev: Option<*mut doca_dev>) -> Result<(), doca_error_t> {
        // Arguments first (NULL or foreign device → INVALID_VALUE), then state.
        let r = dev.map(|d| dev_ref(d)).transpose()?;
        self.check_configurable()?;
        if let Some(r) = r {
            self.devs.borrow_mut().push(r);
        }
        let cell = if publisher { &self.publisher } else { &self.subscriber };
        cell.set(cell.get() | bit);
        Ok(())
    }

    fn export(&self, via: u8) -> Result<&[u8], doca_error_t> {
        let b = self.live()?;
        let seg = match b {
            Backing::Shm(seg) => seg,
            Backing::User { .. } => {
                return Err(crate::sdk_fail!(
                    DOCA_ERROR_NOT_SUPPORTED,
                    "sync event export: the event lives in memory the program supplied, which \
                     another process cannot map; let the library allocate it to export it"
                ))
            }
        };
        let (cell, ok) = match via {
            // PCI export: the event must not be configured for the network.
            VIA_PCI => (&self.export_pci, self.publisher.get() & LOC_REMOTE_NET == 0),
            // Network export: DOCA requires a remote-net publisher.
            _ => (&self.export_net, self.imported || self.publisher.get() & LOC_REMOTE_NET != 0),
        };
        if !ok {
            return Err(DOCA_ERROR_NOT_PERMITTED);
        }
        if let Some(v) = cell.get() {
            return Ok(v);
        }
        let mut w = BlobWriter::new(BlobKind::SyncEvent);
        w.u32(std::process::id())
            .u32(u32::try_from(seg.fd()).map_err(|_| DOCA_ERROR_UNEXPECTED)?)
            .u64(seg.len() as u64)
            .u64(b.shared().key.load(SeqCst))
            .u8(via);
        let _ = cell.set(w.finish());
        cell.get().map(|v| v.as_slice()).ok_or(DOCA_ERROR_UNEXPECTED)
    }

    fn unregister_waiter(&self) {
        if let (Some(reg), Some(b)) = (self.reg.take(), self.backing.get()) {
            b.shared().unregister(reg);
        }
    }
}

impl Drop for doca_sync_event {
    fn drop(&mut self) {
        self.unregister_waiter();
    }
}

/// Parses a sync event export blob: (pid, fd, len, key, via).
fn parse_blob(bytes: &[u8]) -> Result<(u32, i32, usize, u64, u8), doca_error_t> {
    let mut r = BlobReader::new(bytes, BlobKind::SyncEvent)?;
    let pid = r.u32()?;
    let fd = r.u32()?;
    let len = r.u64()?;
    let key = r.u64()?;
    let via = r.u8()?;
    r.finish()?;
    if pid == 0 || pid > i32::MAX as u32 || fd > i32::MAX as u32 {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    if len != SHARED_LEN as u64 || key == 0 || !(via == VIA_PCI || via == VIA_NET) {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok((pid, fd as i32, len as usize, key, via))
}

/// Validates an event pointer from C.
///
/// # Safety
/// A non-NULL `event` must point to an event created by this provider and not destroyed.
unsafe fn ev_ref<'a>(event: *const doca_sync_event) -> Result<&'a doca_sync_event, doca_error_t> {
    // SAFETY: per the contract.
    let e = unsafe { crate::ffi::obj(event) }?;
    if e.magic != EVENT_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(e)
}

// ---- objects ----

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_create(event: *mut *mut doca_sync_event) -> doca_error_t {
    guard_err(|| {
        if event.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let raw = doca_sync_event::new(false, None).into_raw();
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(event, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_destroy(event: *mut doca_sync_event) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL event pointers come from create / create_from_export (contract).
        let e = unsafe { ev_ref(event) }?;
        if e.started.get() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        e.ctx.teardown()?;
        // SAFETY: `event` came from Box::into_raw; the ctx is IDLE and disconnected, no task
        // is allocated, so nothing references the object any more.
        drop(unsafe { Box::from_raw(event) });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_add_publisher_location_cpu(
    event: *mut doca_sync_event,
    dev: *mut doca_dev,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        e.add_location(true, LOC_CPU, Some(dev))
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_add_subscriber_location_cpu(
    event: *mut doca_sync_event,
    dev: *mut doca_dev,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        e.add_location(false, LOC_CPU, Some(dev))
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_add_publisher_location_remote_pci(
    event: *mut doca_sync_event,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        e.add_location(true, LOC_REMOTE_PCI, None)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_add_subscriber_location_remote_pci(
    event: *mut doca_sync_event,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        e.add_location(false, LOC_REMOTE_PCI, None)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_add_publisher_location_remote_net(
    event: *mut doca_sync_event,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        e.add_location(true, LOC_REMOTE_NET, None)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_set_addr(event: *mut doca_sync_event, addr: *mut u64) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        if addr.is_null() || (addr as usize) % core::mem::align_of::<AtomicU64>() != 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        e.check_configurable()?;
        if e.backing.get().is_some() {
            // Started before: the counter already lives somewhere else.
            return Err(DOCA_ERROR_BAD_STATE);
        }
        e.user_addr.set(addr);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_start(event: *mut doca_sync_event) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        if e.mode.get() == Mode::Ctx || e.started.get() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        e.ensure_backing()?;
        e.mode.set(Mode::Standalone);
        e.started.set(true);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_stop(event: *mut doca_sync_event) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        if !e.started.get() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        e.started.set(false);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_as_ctx(event: *mut doca_sync_event) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in doca_sync_event_destroy.
        match unsafe { ev_ref(event) } {
            Ok(e) => {
                if e.mode.get() == Mode::Unset {
                    e.mode.set(Mode::Ctx);
                }
                // A standalone event still gets its ctx pointer, but connecting or starting
                // that ctx fails with BAD_STATE.
                // SAFETY: `event` is valid (checked above); the projection keeps the
                // allocation's provenance, so kind hooks can reach the whole object.
                unsafe { ptr::addr_of_mut!((*event).ctx) }
            }
            Err(_) => ptr::null_mut(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_export_to_remote_pci(
    event: *mut doca_sync_event,
    dev: *mut doca_dev,
    data: *mut *const u8,
    sz: *mut usize,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        drop(dev_ref(dev)?);
        if data.is_null() || sz.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let blob = e.export(VIA_PCI)?;
        // SAFETY: both out-pointers are non-NULL and writable (caller contract).
        unsafe {
            out(data, blob.as_ptr())?;
            out(sz, blob.len())
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_export_to_remote_net(
    event: *mut doca_sync_event,
    data: *mut *const u8,
    sz: *mut usize,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        if data.is_null() || sz.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let blob = e.export(VIA_NET)?;
        // SAFETY: both out-pointers are non-NULL and writable (caller contract).
        unsafe {
            out(data, blob.as_ptr())?;
            out(sz, blob.len())
        }
    })
}

/// What both imports share: the checks of the arguments, the blob parsed, exported the way
/// this import takes (`net`: to the remote network, else to PCI; NOT_SUPPORTED with
/// `wrong_path` in the SDK log otherwise), its segment mapped and its header and key checked.
/// Returns the device, the segment and the exporter's pid.
///
/// # Safety
/// `data` NULL or `sz` readable bytes (DOCA contract of the import entry points).
unsafe fn import_blob(
    dev: *mut doca_dev,
    data: *const u8,
    sz: usize,
    out_is_null: bool,
    net: bool,
    wrong_path: &str,
) -> Result<(DevRef, ShmSegment, u32), doca_error_t> {
    let dref = dev_ref(dev)?;
    if data.is_null() || out_is_null || sz == 0 {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the caller provides `sz` readable bytes at `data` (DOCA contract); the bytes
    // are only parsed by the bounds-checked blob reader.
    let bytes = unsafe { core::slice::from_raw_parts(data, sz) };
    let (pid, fd, len, key, via) = parse_blob(bytes)?;
    if (via == VIA_NET) != net {
        return Err(crate::sdk_fail!(DOCA_ERROR_NOT_SUPPORTED, "{wrong_path}"));
    }
    let seg = ShmSegment::open_remote(pid, fd, len)?;
    // SAFETY: the segment maps at least `len == SHARED_LEN` bytes, page-aligned, and
    // SyncShared is all atomics (any contents are a valid value).
    let hdr = unsafe { &*seg.as_ptr().cast::<SyncShared>() };
    if hdr.magic.load(SeqCst) != shared::MAGIC || hdr.version.load(SeqCst) != shared::LAYOUT_VERSION {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    if hdr.key.load(SeqCst) != key {
        return Err(DOCA_ERROR_NOT_PERMITTED);
    }
    Ok((dref, seg, pid))
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_create_from_export(
    dev: *mut doca_dev,
    data: *const u8,
    sz: usize,
    event: *mut *mut doca_sync_event,
) -> doca_error_t {
    guard_err(|| {
        // DOCA has two import paths that do not mix: a remote-net export becomes a
        // doca_sync_event_remote_net (a target of RDMA remote-net tasks), never an event.
        // SAFETY: forwarded contract.
        let (dref, seg, _) = unsafe {
            import_blob(
                dev,
                data,
                sz,
                event.is_null(),
                false,
                "doca_sync_event_create_from_export: this blob was exported to the remote network; open it \
                 with doca_sync_event_remote_net_create_from_export",
            )
        }?;
        let ev = doca_sync_event::new(true, Some(Backing::Shm(seg)));
        ev.devs.borrow_mut().push(dref);
        let raw = ev.into_raw();
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(event, raw) }
    })
}

// ---- synchronous data path ----

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_get(event: *mut doca_sync_event, value: *mut u64) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        if value.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let v = e.live()?.counter().load(SeqCst);
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(value, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_update_add(
    event: *mut doca_sync_event,
    value: u64,
    fetched: *mut u64,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        if fetched.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let old = doca_sync_event::publish_add(e.live()?, value);
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(fetched, old) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_update_set(event: *mut doca_sync_event, value: u64) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_sync_event_destroy.
        let e = unsafe { ev_ref(event) }?;
        doca_sync_event::publish_set(e.live()?, value);
        Ok(())
    })
}

/// Shared body of the blocking waits.
///
/// # Safety
/// As the entry points: `event` is NULL or a live event.
unsafe fn blocking_wait(
    event: *mut doca_sync_event,
    spins: u32,
    pred: impl Fn(u64) -> bool,
) -> Result<(), doca_error_t> {
    // SAFETY: per the contract.
    let e = unsafe { ev_ref(event) }?;
    let b = e.live()?;
    shared::wait_until(b.shared(), b.counter(), spins, pred);
    Ok(())
}

/// How many `sched_yield` rounds `wait_gt_yield` makes before sleeping on the futex.
const YIELD_ROUNDS: u32 = 1000;

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_wait_gt(event: *mut doca_sync_event, value: u64, mask: u64) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe { blocking_wait(event, 0, |v| v & mask > value) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_wait_gt_yield(
    event: *mut doca_sync_event,
    value: u64,
    mask: u64,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe { blocking_wait(event, YIELD_ROUNDS, |v| v & mask > value) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_wait_eq(event: *mut doca_sync_event, value: u64, mask: u64) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe { blocking_wait(event, 0, |v| v & mask == value) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_wait_neq(event: *mut doca_sync_event, value: u64, mask: u64) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe { blocking_wait(event, 0, |v| v & mask != value) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_wait_eq_yield(
    event: *mut doca_sync_event,
    value: u64,
    mask: u64,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe { blocking_wait(event, YIELD_ROUNDS, |v| v & mask == value) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_wait_neq_yield(
    event: *mut doca_sync_event,
    value: u64,
    mask: u64,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe { blocking_wait(event, YIELD_ROUNDS, |v| v & mask != value) })
}
