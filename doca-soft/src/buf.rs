//! Buffer inventories and buffers: `doca_buf_inventory_*`, `doca_buf_*`.
//!
//! # Model
//!
//! An inventory is a fixed pool of `num_elements` buffer descriptors allocated once at
//! `doca_buf_inventory_create` (a boxed slice: descriptors never move). Taking a buffer
//! (`doca_buf_inventory_buf_get_by_args`) pops a free descriptor, fills it and registers it
//! with its mmap; an exhausted inventory gives `DOCA_ERROR_NO_MEMORY`. A buffer has a
//! reference count (starting at 1): `doca_buf_dec_refcount` to 0 returns it to its inventory
//! and releases it from its mmap.
//!
//! A buffer describes two nested ranges, both in the address space of the mmap's owner (for
//! an mmap imported from another process, these are the remote process's addresses):
//! * head/len: the whole region the buffer may use, inside the mmap's memrange;
//! * data/data_len: the payload, inside head/len. As a source, the payload is read; as a
//!   destination, data is appended after the payload (data_len grows).
//!
//! `doca_buf_reset_data_len` sets data_len to 0 and leaves the data pointer where it is (the
//! next destination write lands at `data`). DOCA's documentation is terse here; this is the
//! reading consistent with how DOCA samples use it (reset a destination before reuse). Use
//! `doca_buf_set_data(buf, head, 0)` to also move data back to head.
//!
//! Lifetimes: a buffer keeps its mmap alive (the mmap refuses stop/destroy with `IN_USE` while
//! buffers exist) and its inventory alive (destroy refuses with `IN_USE` while buffers are
//! out). A descriptor's memory stays valid until its inventory is destroyed, so a stale buffer
//! pointer (refcount 0) is detected (`DOCA_ERROR_BAD_STATE`) rather than being a use after free,
//! as long as the inventory exists.
//!
//! Buffers chain into singly linked lists (`doca_buf_chain_list` and the rest of `list.rs`):
//! the first element carries the list's reference count, the others stay at 1 and refuse
//! `inc_refcount`/`dec_refcount` (`NOT_PERMITTED`); the first element's count reaching 0
//! returns every element of the list to its inventory. A task given a list reads (gathers) or
//! writes (scatters) the elements in order (see `dma.rs`, and `rdma` for which RDMA tasks take
//! lists).
//!
//! The out-value of `inc_refcount`/`dec_refcount` is the count *before* the call, as DOCA 3.x
//! documents it.
//!
//! Threads: as in DOCA, an inventory and its buffers are used from one thread (interior state
//! is in `Cell`s; nothing here is `Sync`). The mmap side of the bookkeeping is atomic, so
//! inventories on different threads may share one mmap.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::ffi::c_void;
use std::ptr;
use std::sync::{Mutex, MutexGuard};

use crate::ffi::{guard_err, out, refused};
use crate::mmap::{doca_mmap, mmap_ref, RemoteRegion};
use crate::types::*;

const INV_MAGIC: u64 = u64::from_le_bytes(*b"SoftInv!");

/// A buffer descriptor.
#[repr(C)]
pub struct doca_buf {
    inv: *const doca_buf_inventory,
    index: u32,
    refcount: Cell<u16>,
    mmap: Cell<*const doca_mmap>,
    head: Cell<usize>,
    len: Cell<usize>,
    data: Cell<usize>,
    data_len: Cell<usize>,
    /// The next element of the list this buffer belongs to; NULL at its end (and for a
    /// buffer that is a list of one). See `list.rs`.
    next: Cell<*const doca_buf>,
    /// Whether this buffer follows another in a list: its reference count then stays 1 and
    /// belongs to the list's first element.
    chained: Cell<bool>,
}

/// A pool of buffer descriptors.
#[repr(C)]
pub struct doca_buf_inventory {
    magic: Cell<u64>,
    started: Cell<bool>,
    bufs: Box<[doca_buf]>,
    /// Indices of free descriptors (a stack).
    free: Cell<Vec<u32>>,
}

/// Live inventories (destroy checks membership: no double free).
static INVENTORIES: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl doca_buf_inventory {
    fn num_free(&self) -> usize {
        let v = self.free.take();
        let n = v.len();
        self.free.set(v);
        n
    }
    fn pop_free(&self) -> Option<u32> {
        let mut v = self.free.take();
        let i = v.pop();
        self.free.set(v);
        i
    }
    fn push_free(&self, i: u32) {
        let mut v = self.free.take();
        // Capacity was reserved for every descriptor at creation: this never allocates.
        v.push(i);
        self.free.set(v);
    }
    fn outstanding(&self) -> usize {
        self.bufs.len() - self.num_free()
    }
}

/// The inventory behind `p`; INVALID_VALUE for NULL or a destroyed/foreign object (magic).
///
/// # Safety
/// A non-NULL `p` must point to readable memory of an inventory of this provider.
unsafe fn inv_ref<'a>(p: *const doca_buf_inventory) -> Result<&'a doca_buf_inventory, doca_error_t> {
    // SAFETY: the caller's contract.
    let inv = unsafe { p.as_ref() }.ok_or(DOCA_ERROR_INVALID_VALUE)?;
    if inv.magic.get() != INV_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(inv)
}

/// The live buffer behind `p`: INVALID_VALUE for NULL, BAD_STATE for a buffer that was
/// returned to its inventory (refcount 0).
///
/// # Safety
/// A non-NULL `p` must be a buffer descriptor of a live inventory of this provider.
pub(crate) unsafe fn buf_ref<'a>(p: *const doca_buf) -> Result<&'a doca_buf, doca_error_t> {
    // SAFETY: the caller's contract.
    let b = unsafe { p.as_ref() }.ok_or(DOCA_ERROR_INVALID_VALUE)?;
    if b.refcount.get() == 0 {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    Ok(b)
}

/// [`buf_ref`] for the RDMA submit path: the same checks and codes, with the refusals out
/// of line ([`refused`]). (`buf_ref` itself stays without a call, which would give the
/// entry points that use it a frame.)
///
/// # Safety
/// As [`buf_ref`].
#[inline(always)]
pub(crate) unsafe fn buf_ref_on_submit<'a>(p: *const doca_buf) -> Result<&'a doca_buf, doca_error_t> {
    // SAFETY: the caller's contract.
    let Some(b) = (unsafe { p.as_ref() }) else {
        return Err(refused(DOCA_ERROR_INVALID_VALUE));
    };
    if b.refcount.get() == 0 {
        return Err(refused(DOCA_ERROR_BAD_STATE));
    }
    Ok(b)
}

#[allow(dead_code)] // accessors for the RDMA engine and other modules
impl doca_buf {
    /// The mmap this buffer was taken over.
    pub(crate) fn mmap(&self) -> &doca_mmap {
        // SAFETY: a live buffer (refcount > 0, which every entry point checks through
        // `buf_ref`) holds an outstanding count on its mmap, so the mmap cannot be destroyed
        // while the buffer lives; the pointer was set from a valid `&doca_mmap`.
        unsafe { &*self.mmap.get() }
    }
    /// The mmap as the C pointer.
    pub(crate) fn mmap_ptr(&self) -> *const doca_mmap {
        self.mmap.get()
    }
    /// (head address, len): the whole region.
    pub(crate) fn head(&self) -> (usize, usize) {
        (self.head.get(), self.len.get())
    }
    /// (data address, data_len): the payload.
    pub(crate) fn data(&self) -> (usize, usize) {
        (self.data.get(), self.data_len.get())
    }
    /// (address, bytes) of the free space after the payload, where destination writes land.
    pub(crate) fn tail_space(&self) -> (usize, usize) {
        let end = self.data.get() + self.data_len.get();
        (end, self.head.get() + self.len.get() - end)
    }
    /// Grows data_len by `n` after a destination write; TOO_BIG if it would pass the end.
    pub(crate) fn grow_data_len(&self, n: usize) -> Result<(), doca_error_t> {
        if n > self.tail_space().1 {
            return Err(DOCA_ERROR_TOO_BIG);
        }
        self.data_len.set(self.data_len.get() + n);
        Ok(())
    }

    /// Local-memory checks for direct access: a local (not imported) mmap, and for writes
    /// the LOCAL_READ_WRITE permission.
    // Both answers are read without the mmap's lock (`doca_mmap::info` would take it): this
    // runs for every source and result buffer of every RDMA and DMA operation.
    #[inline]
    pub(crate) fn check_local(&self, write: bool) -> Result<(), doca_error_t> {
        let m = self.mmap();
        if m.is_imported() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if write && m.perms_of_started() & DOCA_ACCESS_FLAG_LOCAL_READ_WRITE == 0 {
            return Err(DOCA_ERROR_NOT_PERMITTED);
        }
        Ok(())
    }

    /// The payload of a buffer over local memory, as a slice.
    ///
    /// # Safety
    /// The slice aliases user memory registered in the mmap: the caller must drop it before
    /// the buffer is returned, and accept that a remote peer may write the memory
    /// concurrently (the DOCA contract: the user does not touch memory a task is using).
    pub(crate) unsafe fn payload_slice(&self) -> Result<&[u8], doca_error_t> {
        self.check_local(false)?;
        // SAFETY: local memory (checked just above); the rest is the caller's contract.
        Ok(unsafe { self.local_payload() })
    }

    /// [`payload_slice`](doca_buf::payload_slice) of a buffer whose local-memory check
    /// already passed (the RDMA engine on the submit that validated the buffer).
    ///
    /// # Safety
    /// As [`payload_slice`](doca_buf::payload_slice), and the buffer is over local memory
    /// (`check_local(false)` passed for it, and it was not released since).
    #[inline(always)]
    pub(crate) unsafe fn local_payload(&self) -> &[u8] {
        let (p, n) = self.data();
        if n == 0 {
            return &[];
        }
        // SAFETY: [p, p+n) lies inside the mmap's memrange (checked at buffer creation and on
        // every set_data/set_data_len), which the user registered as live memory of this
        // process (a local mmap: the caller's contract); lifetime and aliasing are the
        // caller's contract above.
        unsafe { std::slice::from_raw_parts(p as *const u8, n) }
    }

    /// Grows data_len by `n` bytes the caller wrote after the payload, within the room it
    /// checked before writing ([`grow_data_len`](doca_buf::grow_data_len) without checking
    /// the room a second time).
    #[inline(always)]
    pub(crate) fn appended(&self, n: usize) {
        debug_assert!(n <= self.tail_space().1);
        self.data_len.set(self.data_len.get() + n);
    }

    /// The one body of the appends below: the local-memory checks, room for `n` bytes after
    /// the payload, then `fill` writes them at the pointer it gets (only when `n > 0`) and
    /// data_len grows by `n` if it succeeded.
    #[inline(always)]
    fn append_raw(&self, n: usize, fill: impl FnOnce(*mut u8) -> Result<(), doca_error_t>) -> Result<(), doca_error_t> {
        self.check_local(true)?;
        let (dst, room) = self.tail_space();
        if n > room {
            return Err(DOCA_ERROR_TOO_BIG);
        }
        if n > 0 {
            fill(dst as *mut u8)?;
        }
        self.data_len.set(self.data_len.get() + n);
        Ok(())
    }

    /// Appends `src` after the payload of a buffer over local memory (a destination write):
    /// INVALID_VALUE for an imported mmap, NOT_PERMITTED without LOCAL_READ_WRITE, TOO_BIG
    /// when it does not fit.
    pub(crate) fn append(&self, src: &[u8]) -> Result<(), doca_error_t> {
        self.append_raw(src.len(), |dst| {
            // SAFETY: [dst, dst+len) lies inside the buffer's head range (room checked), inside
            // the mmap's memrange: live, writable user memory of this process
            // (LOCAL_READ_WRITE checked). `ptr::copy` tolerates overlap with `src` (a source
            // buffer over the same memory).
            unsafe { ptr::copy(src.as_ptr(), dst, src.len()) };
            Ok(())
        })
    }

    /// [`append`](doca_buf::append) of a u64 in native byte order (an atomic's or a sync
    /// event's old value), with the same checks and errors: one unaligned store where the
    /// general append calls memmove.
    #[inline(always)]
    pub(crate) fn append_u64(&self, v: u64) -> Result<(), doca_error_t> {
        self.append_raw(8, |dst| {
            // SAFETY: [dst, dst+8) lies inside the buffer's head range (room checked), live
            // writable user memory of this process (LOCAL_READ_WRITE checked); the store is
            // unaligned-tolerant.
            unsafe { ptr::write_unaligned(dst.cast::<u64>(), v) };
            Ok(())
        })
    }

    /// [`append_u64`](doca_buf::append_u64) of a buffer whose checks already passed: one
    /// store after the payload and data_len grows by 8.
    ///
    /// # Safety
    /// The buffer is over local memory with LOCAL_READ_WRITE (`check_local(true)` passed
    /// for it) and has room for 8 bytes after the payload, and neither changed since the
    /// checks.
    #[inline(always)]
    pub(crate) unsafe fn append_u64_checked(&self, v: u64) {
        let (dst, room) = self.tail_space();
        debug_assert!(room >= 8);
        // SAFETY: as in `append_u64`: the room and the memory were checked (the contract).
        unsafe { ptr::write_unaligned(dst as *mut u64, v) };
        self.data_len.set(self.data_len.get() + 8);
    }

    /// Appends `n` bytes produced by `fill` (e.g. a remote read) after the payload of a buffer
    /// over local memory; data_len grows only if `fill` succeeds. Errors as [`Self::append`].
    ///
    /// # Safety
    /// `fill` gets a `&mut` over registered user memory: no other reference to that memory
    /// may be alive during the call (the DOCA contract for memory a task writes).
    pub(crate) unsafe fn append_with(
        &self,
        n: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), doca_error_t>,
    ) -> Result<(), doca_error_t> {
        self.append_raw(n, |dst| {
            // SAFETY: [dst, dst+n) is inside the buffer's region (room checked), live writable
            // user memory of this process; exclusivity is the caller's contract.
            fill(unsafe { std::slice::from_raw_parts_mut(dst, n) })
        })
    }

    /// For a buffer over an imported mmap: the remote region and the (offset, len) of the
    /// payload in it (a remote source). INVALID_VALUE for a local buffer.
    pub(crate) fn remote_payload(&self) -> Result<(RemoteRegion, usize, usize), doca_error_t> {
        let r = self.mmap().remote_region()?;
        let (p, n) = self.data();
        let off = r.offset_of(p as u64, n)?;
        Ok((r, off, n))
    }

    /// For a buffer over an imported mmap: the remote region and the (offset, capacity) of
    /// the space after the payload (a remote destination). INVALID_VALUE for a local buffer.
    pub(crate) fn remote_tail(&self) -> Result<(RemoteRegion, usize, usize), doca_error_t> {
        let r = self.mmap().remote_region()?;
        let (p, n) = self.tail_space();
        let off = r.offset_of(p as u64, n)?;
        Ok((r, off, n))
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_inventory_create(
    num_elements: usize,
    inventory: *mut *mut doca_buf_inventory,
) -> doca_error_t {
    guard_err(|| {
        if inventory.is_null() || num_elements == 0 || num_elements > u32::MAX as usize {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut free: Vec<u32> = Vec::new();
        free.try_reserve_exact(num_elements).map_err(|_| DOCA_ERROR_NO_MEMORY)?;
        let mut bufs: Vec<doca_buf> = Vec::new();
        bufs.try_reserve_exact(num_elements).map_err(|_| DOCA_ERROR_NO_MEMORY)?;
        let inv = Box::into_raw(Box::new(doca_buf_inventory {
            magic: Cell::new(INV_MAGIC),
            started: Cell::new(false),
            bufs: Box::new([]),
            free: Cell::new(Vec::new()),
        }));
        for i in 0..num_elements as u32 {
            bufs.push(doca_buf {
                inv,
                index: i,
                refcount: Cell::new(0),
                mmap: Cell::new(ptr::null()),
                head: Cell::new(0),
                len: Cell::new(0),
                data: Cell::new(0),
                data_len: Cell::new(0),
                next: Cell::new(ptr::null()),
                chained: Cell::new(false),
            });
        }
        // Pop order: index 0 first.
        free.extend((0..num_elements as u32).rev());
        // SAFETY: `inv` was just created by Box::into_raw and is not shared yet.
        unsafe {
            (*inv).bufs = bufs.into_boxed_slice();
            (*inv).free.set(free);
        }
        lock(&INVENTORIES).insert(inv as usize);
        // SAFETY: out-pointer checked non-NULL; writable by the caller's contract.
        unsafe { out(inventory, inv) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_inventory_destroy(inventory: *mut doca_buf_inventory) -> doca_error_t {
    guard_err(|| {
        if inventory.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut live = lock(&INVENTORIES);
        if !live.contains(&(inventory as usize)) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: in INVENTORIES, so a live inventory of this module.
        let inv = unsafe { &*inventory };
        if inv.outstanding() != 0 {
            return Err(DOCA_ERROR_IN_USE);
        }
        inv.magic.set(0);
        live.remove(&(inventory as usize));
        drop(live);
        // SAFETY: from Box::into_raw in create, removed from INVENTORIES just now (freed
        // once), and no buffer is out (so no buffer pointer is in use by the caller).
        drop(unsafe { Box::from_raw(inventory) });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_inventory_start(inventory: *mut doca_buf_inventory) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes an inventory of this provider (or NULL, refused).
        let inv = unsafe { inv_ref(inventory) }?;
        if inv.started.get() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        inv.started.set(true);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_inventory_stop(inventory: *mut doca_buf_inventory) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes an inventory of this provider (or NULL, refused).
        let inv = unsafe { inv_ref(inventory) }?;
        if !inv.started.get() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        if inv.outstanding() != 0 {
            return Err(DOCA_ERROR_IN_USE);
        }
        inv.started.set(false);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_inventory_get_num_free_elements(
    inventory: *const doca_buf_inventory,
    num_free: *mut u32,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes an inventory of this provider (or NULL, refused).
        let inv = unsafe { inv_ref(inventory) }?;
        // SAFETY: `out` checks NULL; writable by the caller's contract.
        unsafe { out(num_free, inv.num_free() as u32) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_inventory_buf_get_by_args(
    inventory: *mut doca_buf_inventory,
    mmap: *mut doca_mmap,
    addr: *mut c_void,
    len: usize,
    data: *mut c_void,
    data_len: usize,
    buf: *mut *mut doca_buf,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes objects of this provider (or NULL, refused).
        let inv = unsafe { inv_ref(inventory) }?;
        // SAFETY: as above.
        let m = unsafe { mmap_ref(mmap) }?;
        if buf.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if !inv.started.get() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        let (a, d) = (addr as usize, data as usize);
        let end = a.checked_add(len).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        let dend = d.checked_add(data_len).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        if d < a || dend > end {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let i = inv.pop_free().ok_or(DOCA_ERROR_NO_MEMORY)?;
        if let Err(e) = m.buf_acquire(a, len) {
            inv.push_free(i);
            return Err(e);
        }
        let b = &inv.bufs[i as usize];
        b.refcount.set(1);
        b.mmap.set(m);
        b.head.set(a);
        b.len.set(len);
        b.data.set(d);
        b.data_len.set(data_len);
        // SAFETY: out-pointer checked non-NULL; writable by the caller's contract. The
        // descriptor lives in the inventory's boxed slice, which never moves.
        unsafe { out(buf, b as *const doca_buf as *mut doca_buf) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_inc_refcount(buf: *mut doca_buf, refcount: *mut u16) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes a buffer of this provider (or NULL, refused).
        let b = unsafe { buf_ref(buf) }?;
        if b.chained.get() {
            return Err(DOCA_ERROR_NOT_PERMITTED);
        }
        let before = b.refcount.get();
        b.refcount.set(before.checked_add(1).ok_or(DOCA_ERROR_TOO_BIG)?);
        if !refcount.is_null() {
            // SAFETY: non-NULL; writable by the caller's contract.
            unsafe { refcount.write(before) };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_dec_refcount(buf: *mut doca_buf, refcount: *mut u16) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes a buffer of this provider (or NULL, refused); a buffer
        // already returned (refcount 0) is refused, so it is never returned twice.
        let b = unsafe { buf_ref(buf) }?;
        if b.chained.get() {
            return Err(DOCA_ERROR_NOT_PERMITTED);
        }
        let before = b.refcount.get();
        if before == 1 {
            b.release_list();
        } else {
            b.refcount.set(before - 1);
        }
        if !refcount.is_null() {
            // SAFETY: non-NULL; writable by the caller's contract.
            unsafe { refcount.write(before) };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_get_refcount(buf: *const doca_buf, refcount: *mut u16) -> doca_error_t {
    // SAFETY: the C contract is forwarded.
    guard_err(|| unsafe { get(buf, refcount, |b| b.refcount.get()) })
}

impl doca_buf {
    /// Returns this buffer (the first of its list, whose count reaches 0) and every element
    /// after it to their inventories, releasing each from its mmap.
    fn release_list(&self) {
        let mut cur: *const doca_buf = self;
        while !cur.is_null() {
            // SAFETY: `self` is live, and every `next` link points to a live element of the
            // same list (set by chain_list, cleared when an element leaves the list).
            let b = unsafe { &*cur };
            cur = b.next.replace(ptr::null());
            b.chained.set(false);
            b.refcount.set(0);
            b.mmap().buf_release();
            b.mmap.set(ptr::null());
            // SAFETY: the inventory outlives its descriptors (destroy refuses while any buffer
            // is out, and this one was out until now).
            unsafe { &*b.inv }.push_free(b.index);
        }
    }
}

/// Reads a field of a live buffer into an out-pointer.
///
/// # Safety
/// As the C getters: `buf` a buffer of this provider or NULL; `dst` writable or NULL.
unsafe fn get<T>(buf: *const doca_buf, dst: *mut T, f: impl FnOnce(&doca_buf) -> T) -> Result<(), doca_error_t> {
    // SAFETY: forwarded contract.
    let b = unsafe { buf_ref(buf) }?;
    // SAFETY: `out` checks NULL; writability is the caller's contract.
    unsafe { out(dst, f(b)) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_get_len(buf: *const doca_buf, len: *mut usize) -> doca_error_t {
    // SAFETY: the C contract is forwarded.
    guard_err(|| unsafe { get(buf, len, |b| b.len.get()) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_get_head(buf: *const doca_buf, head: *mut *mut c_void) -> doca_error_t {
    // SAFETY: the C contract is forwarded.
    guard_err(|| unsafe { get(buf, head, |b| b.head.get() as *mut c_void) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_get_data(buf: *const doca_buf, data: *mut *mut c_void) -> doca_error_t {
    // SAFETY: the C contract is forwarded.
    guard_err(|| unsafe { get(buf, data, |b| b.data.get() as *mut c_void) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_get_data_len(buf: *const doca_buf, data_len: *mut usize) -> doca_error_t {
    // SAFETY: the C contract is forwarded.
    guard_err(|| unsafe { get(buf, data_len, |b| b.data_len.get()) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_set_data(buf: *mut doca_buf, data: *mut c_void, data_len: usize) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes a buffer of this provider (or NULL, refused).
        let b = unsafe { buf_ref(buf) }?;
        let d = data as usize;
        let end = d.checked_add(data_len).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        if d < b.head.get() || end > b.head.get() + b.len.get() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        b.data.set(d);
        b.data_len.set(data_len);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_set_data_len(buf: *mut doca_buf, data_len: usize) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes a buffer of this provider (or NULL, refused).
        let b = unsafe { buf_ref(buf) }?;
        let end = b.data.get().checked_add(data_len).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        if end > b.head.get() + b.len.get() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        b.data_len.set(data_len);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_reset_data_len(buf: *mut doca_buf) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes a buffer of this provider (or NULL, refused).
        let b = unsafe { buf_ref(buf) }?;
        b.data_len.set(0);
        Ok(())
    })
}

mod list;

pub use list::*;

#[cfg(test)]
mod tests;
