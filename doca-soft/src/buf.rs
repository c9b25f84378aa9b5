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
//! Chaining (`doca_buf_chain_list`) is not supported: it returns `DOCA_ERROR_NOT_SUPPORTED`
//! (every buffer is a single-element list).
//!
//! Threads: as in DOCA, an inventory and its buffers are used from one thread (interior state
//! is in `Cell`s; nothing here is `Sync`). The mmap side of the bookkeeping is atomic, so
//! inventories on different threads may share one mmap.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::ffi::c_void;
use std::ptr;
use std::sync::{Mutex, MutexGuard};

use crate::ffi::{guard_err, out};
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
    fn check_local(&self, write: bool) -> Result<(), doca_error_t> {
        let info = self.mmap().info();
        if info.imported {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if write && info.perms & DOCA_ACCESS_FLAG_LOCAL_READ_WRITE == 0 {
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
        let (p, n) = self.data();
        if n == 0 {
            return Ok(&[]);
        }
        // SAFETY: [p, p+n) lies inside the mmap's memrange (checked at buffer creation and on
        // every set_data/set_data_len), which the user registered as live memory of this
        // process; lifetime and aliasing are the caller's contract above.
        Ok(unsafe { std::slice::from_raw_parts(p as *const u8, n) })
    }

    /// Appends `src` after the payload of a buffer over local memory (a destination write):
    /// INVALID_VALUE for an imported mmap, NOT_PERMITTED without LOCAL_READ_WRITE, TOO_BIG
    /// when it does not fit.
    pub(crate) fn append(&self, src: &[u8]) -> Result<(), doca_error_t> {
        self.check_local(true)?;
        let (dst, room) = self.tail_space();
        if src.len() > room {
            return Err(DOCA_ERROR_TOO_BIG);
        }
        if !src.is_empty() {
            // SAFETY: [dst, dst+len) lies inside the buffer's head range, inside the mmap's
            // memrange: live, writable user memory of this process (LOCAL_READ_WRITE checked).
            // `ptr::copy` tolerates overlap with `src` (a source buffer over the same memory).
            unsafe { ptr::copy(src.as_ptr(), dst as *mut u8, src.len()) };
        }
        self.grow_data_len(src.len())
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
        self.check_local(true)?;
        let (dst, room) = self.tail_space();
        if n > room {
            return Err(DOCA_ERROR_TOO_BIG);
        }
        if n > 0 {
            // SAFETY: [dst, dst+n) is inside the buffer's region (room checked), live writable
            // user memory of this process; exclusivity is the caller's contract.
            fill(unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, n) })?;
        }
        self.grow_data_len(n)
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
        let n = b.refcount.get().checked_add(1).ok_or(DOCA_ERROR_TOO_BIG)?;
        b.refcount.set(n);
        if !refcount.is_null() {
            // SAFETY: non-NULL; writable by the caller's contract.
            unsafe { refcount.write(n) };
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
        let n = b.refcount.get() - 1;
        b.refcount.set(n);
        if n == 0 {
            b.mmap().buf_release();
            b.mmap.set(ptr::null());
            // SAFETY: the inventory outlives its descriptors (destroy refuses while any buffer
            // is out, and this one was out until now).
            let inv = unsafe { &*b.inv };
            inv.push_free(b.index);
        }
        if !refcount.is_null() {
            // SAFETY: non-NULL; writable by the caller's contract.
            unsafe { refcount.write(n) };
        }
        Ok(())
    })
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

#[no_mangle]
pub unsafe extern "C" fn doca_buf_chain_list(list1: *mut doca_buf, list2: *mut doca_buf) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes buffers of this provider (or NULL, refused).
        unsafe {
            buf_ref(list1)?;
            buf_ref(list2)?;
        }
        // Scatter/gather lists are not implemented: every buffer is a one-element list.
        Err(crate::sdk_fail!(
            DOCA_ERROR_NOT_SUPPORTED,
            "doca_buf_chain_list: the soft provider has no scatter/gather lists (every doca_buf is a list of one)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::{doca_dev_close, test_open_default};
    use crate::mmap::tests::local_mmap;
    use crate::mmap::*;

    fn get_buf(
        inv: *mut doca_buf_inventory,
        m: *mut doca_mmap,
        a: usize,
        l: usize,
        d: usize,
        dl: usize,
    ) -> Result<*mut doca_buf, doca_error_t> {
        let mut b = ptr::null_mut();
        // SAFETY: live objects (or deliberately bad arguments the provider must refuse).
        let r =
            unsafe { doca_buf_inventory_buf_get_by_args(inv, m, a as *mut c_void, l, d as *mut c_void, dl, &mut b) };
        if r == DOCA_SUCCESS {
            Ok(b)
        } else {
            Err(r)
        }
    }

    fn free_count(inv: *mut doca_buf_inventory) -> u32 {
        let mut n = 0;
        // SAFETY: live inventory, valid out-pointer.
        let r = unsafe { doca_buf_inventory_get_num_free_elements(inv, &mut n) };
        assert_eq!(r, DOCA_SUCCESS);
        n
    }

    #[test]
    fn inventory_and_buffers() {
        let dev = test_open_default();
        let mut mem = vec![0u8; 1024];
        let base = mem.as_mut_ptr() as usize;
        let m = local_mmap(mem.as_mut_ptr(), 1024, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, dev);
        let mut inv = ptr::null_mut();
        // SAFETY: every call gets live objects or deliberately bad arguments.
        unsafe {
            assert_eq!(doca_buf_inventory_create(0, &mut inv), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_buf_inventory_create(2, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_buf_inventory_create(2, &mut inv), DOCA_SUCCESS);
            assert_eq!(get_buf(inv, m, base, 16, base, 0).unwrap_err(), DOCA_ERROR_BAD_STATE); // not started
            assert_eq!(doca_buf_inventory_stop(inv), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_buf_inventory_start(inv), DOCA_SUCCESS);
            assert_eq!(doca_buf_inventory_start(inv), DOCA_ERROR_BAD_STATE);
            assert_eq!(free_count(inv), 2);

            // Range validation.
            assert_eq!(get_buf(inv, m, base - 1, 16, base, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(get_buf(inv, m, base, 1025, base, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(get_buf(inv, m, base + 1000, 25, base + 1000, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(get_buf(inv, m, base, 16, base + 8, 9).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(get_buf(inv, m, base + 8, 16, base, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(get_buf(inv, m, usize::MAX, 2, usize::MAX, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(get_buf(ptr::null_mut(), m, base, 16, base, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(get_buf(inv, ptr::null_mut(), base, 16, base, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
            let r = doca_buf_inventory_buf_get_by_args(
                inv,
                m,
                base as *mut c_void,
                16,
                base as *mut c_void,
                0,
                ptr::null_mut(),
            );
            assert_eq!(r, DOCA_ERROR_INVALID_VALUE);
            assert_eq!(free_count(inv), 2, "failed gets leak nothing");
            assert_eq!(mmap_ref(m).unwrap().outstanding_bufs(), 0);

            // by_addr (destination) and by_data (source) equivalents.
            let b1 = get_buf(inv, m, base, 1024, base, 0).unwrap();
            let b2 = get_buf(inv, m, base + 100, 50, base + 100, 50).unwrap();
            assert_eq!(free_count(inv), 0);
            assert_eq!(get_buf(inv, m, base, 16, base, 0).unwrap_err(), DOCA_ERROR_NO_MEMORY);
            assert_eq!(mmap_ref(m).unwrap().outstanding_bufs(), 2);

            let (mut l, mut h, mut d, mut dl) = (0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
            assert_eq!(doca_buf_get_len(b2, &mut l), DOCA_SUCCESS);
            assert_eq!(doca_buf_get_head(b2, &mut h), DOCA_SUCCESS);
            assert_eq!(doca_buf_get_data(b2, &mut d), DOCA_SUCCESS);
            assert_eq!(doca_buf_get_data_len(b2, &mut dl), DOCA_SUCCESS);
            assert_eq!((l, h as usize, d as usize, dl), (50, base + 100, base + 100, 50));
            assert_eq!(doca_buf_get_len(b2, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_buf_get_len(ptr::null(), &mut l), DOCA_ERROR_INVALID_VALUE);

            // set_data / set_data_len / reset.
            assert_eq!(doca_buf_set_data(b2, (base + 110) as *mut c_void, 40), DOCA_SUCCESS);
            assert_eq!(doca_buf_set_data(b2, (base + 110) as *mut c_void, 41), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_buf_set_data(b2, (base + 99) as *mut c_void, 1), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_buf_set_data(b2, usize::MAX as *mut c_void, 2), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_buf_set_data_len(b2, 40), DOCA_SUCCESS);
            assert_eq!(doca_buf_set_data_len(b2, 41), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_buf_set_data_len(b2, usize::MAX), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_buf_reset_data_len(b2), DOCA_SUCCESS);
            assert_eq!(doca_buf_get_data(b2, &mut d), DOCA_SUCCESS);
            assert_eq!(doca_buf_get_data_len(b2, &mut dl), DOCA_SUCCESS);
            assert_eq!((d as usize, dl), (base + 110, 0), "reset keeps data, zeroes data_len");
            assert_eq!(doca_buf_chain_list(b1, b2), DOCA_ERROR_NOT_SUPPORTED);
            assert_eq!(doca_buf_chain_list(b1, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);

            // Reference counts.
            let mut rc = 0u16;
            assert_eq!(doca_buf_inc_refcount(b1, &mut rc), DOCA_SUCCESS);
            assert_eq!(rc, 2);
            assert_eq!(doca_buf_inc_refcount(b1, ptr::null_mut()), DOCA_SUCCESS);
            assert_eq!(doca_buf_dec_refcount(b1, &mut rc), DOCA_SUCCESS);
            assert_eq!(rc, 2);
            assert_eq!(doca_buf_dec_refcount(b1, ptr::null_mut()), DOCA_SUCCESS);
            // In use: inventory and mmap refuse to go away.
            assert_eq!(doca_buf_inventory_stop(inv), DOCA_ERROR_IN_USE);
            assert_eq!(doca_buf_inventory_destroy(inv), DOCA_ERROR_IN_USE);
            assert_eq!(doca_mmap_stop(m), DOCA_ERROR_IN_USE);
            assert_eq!(doca_mmap_destroy(m), DOCA_ERROR_IN_USE);
            assert_eq!(doca_buf_dec_refcount(b1, &mut rc), DOCA_SUCCESS);
            assert_eq!(rc, 0);
            assert_eq!(free_count(inv), 1);
            // A returned buffer is stale: every call refuses it.
            assert_eq!(doca_buf_dec_refcount(b1, &mut rc), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_buf_inc_refcount(b1, &mut rc), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_buf_get_len(b1, &mut l), DOCA_ERROR_BAD_STATE);
            assert_eq!(doca_buf_set_data_len(b1, 0), DOCA_ERROR_BAD_STATE);
            assert_eq!(free_count(inv), 1);
            // Refcount saturation.
            let b3 = get_buf(inv, m, base, 8, base, 8).unwrap();
            (*b3).refcount.set(u16::MAX);
            assert_eq!(doca_buf_inc_refcount(b3, &mut rc), DOCA_ERROR_TOO_BIG);
            (*b3).refcount.set(1);
            assert_eq!(doca_buf_dec_refcount(b3, ptr::null_mut()), DOCA_SUCCESS);
            assert_eq!(doca_buf_dec_refcount(b2, ptr::null_mut()), DOCA_SUCCESS);
            assert_eq!(free_count(inv), 2);
            assert_eq!(mmap_ref(m).unwrap().outstanding_bufs(), 0);

            // A stopped mmap gives no buffers.
            assert_eq!(doca_mmap_stop(m), DOCA_SUCCESS);
            assert_eq!(get_buf(inv, m, base, 16, base, 0).unwrap_err(), DOCA_ERROR_BAD_STATE);
            assert_eq!(free_count(inv), 2);

            assert_eq!(doca_buf_inventory_stop(inv), DOCA_SUCCESS);
            assert_eq!(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
            assert_eq!(doca_buf_inventory_destroy(inv), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_buf_inventory_destroy(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_mmap_destroy(m), DOCA_SUCCESS);
            assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
        }
    }

    #[test]
    fn crate_accessors_local_and_remote() {
        let dev = test_open_default();
        let sp = alloc_shared(4096).unwrap();
        let base = sp as usize;
        let all = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE;
        let m = local_mmap(sp, 4096, all, dev);
        let mut ro_mem = vec![0u8; 64];
        let ro = local_mmap(ro_mem.as_mut_ptr(), 64, DOCA_ACCESS_FLAG_LOCAL_READ_ONLY, dev);
        let mut inv = ptr::null_mut();
        let (mut p, mut n) = (ptr::null(), 0usize);
        let mut im = ptr::null_mut();
        // SAFETY: live objects; the blob is read while the exporter lives.
        unsafe {
            assert_eq!(doca_buf_inventory_create(8, &mut inv), DOCA_SUCCESS);
            assert_eq!(doca_buf_inventory_start(inv), DOCA_SUCCESS);
            assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_SUCCESS);
            assert_eq!(doca_mmap_create_from_export(ptr::null(), p, n, dev, &mut im), DOCA_SUCCESS);
        }
        // Local destination: append.
        let dst = get_buf(inv, m, base, 16, base, 0).unwrap();
        // SAFETY: live buffer.
        let db = unsafe { buf_ref(dst) }.unwrap();
        assert_eq!(db.tail_space(), (base, 16));
        db.append(b"hello ").unwrap();
        db.append(b"world").unwrap();
        assert_eq!(db.data(), (base, 11));
        assert_eq!(db.append(b"123456").unwrap_err(), DOCA_ERROR_TOO_BIG);
        // A failing fill leaves data_len alone.
        // SAFETY: the closure gets the only reference to the tail bytes of this buffer.
        let r = unsafe { db.append_with(1, |_| Err(DOCA_ERROR_IO_FAILED)) };
        assert_eq!(r, Err(DOCA_ERROR_IO_FAILED));
        assert_eq!(db.data(), (base, 11));
        // SAFETY: as above.
        assert_eq!(unsafe { db.append_with(0, |_| Ok(())) }, Ok(()));
        // SAFETY: as above.
        let r = unsafe {
            db.append_with(5, |s| {
                s.copy_from_slice(b"!!!!!");
                Ok(())
            })
        };
        r.unwrap();
        // SAFETY: as above (refused: the buffer is full).
        let r = unsafe { db.append_with(1, |_| Ok(())) };
        assert_eq!(r, Err(DOCA_ERROR_TOO_BIG));
        // SAFETY: no other reference to the payload is alive.
        assert_eq!(unsafe { db.payload_slice() }.unwrap(), b"hello world!!!!!");
        assert_eq!(db.head(), (base, 16));
        assert!(std::ptr::eq(db.mmap_ptr(), m));
        assert_eq!(db.remote_payload().unwrap_err(), DOCA_ERROR_INVALID_VALUE);

        // A read-only local mmap refuses destination writes.
        let rob = get_buf(inv, ro, ro_mem.as_ptr() as usize, 64, ro_mem.as_ptr() as usize, 0).unwrap();
        // SAFETY: live buffer.
        let robr = unsafe { buf_ref(rob) }.unwrap();
        assert_eq!(robr.append(b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
        // SAFETY: as above; fill closure must not run.
        let r = unsafe { robr.append_with(1, |_| panic!("must not run")) };
        assert_eq!(r.unwrap_err(), DOCA_ERROR_NOT_PERMITTED);

        // Remote buffers over the imported mmap (owner addresses).
        let rsrc = get_buf(inv, im, base, 16, base, 11).unwrap();
        // SAFETY: live buffer.
        let rs = unsafe { buf_ref(rsrc) }.unwrap();
        let (region, off, len) = rs.remote_payload().unwrap();
        assert_eq!((off, len), (0, 11));
        let mut tmp = [0u8; 11];
        region.read(off, &mut tmp).unwrap();
        assert_eq!(&tmp, b"hello world");
        let rdst = get_buf(inv, im, base + 100, 32, base + 100, 4).unwrap();
        // SAFETY: live buffer.
        let rd = unsafe { buf_ref(rdst) }.unwrap();
        let (region, off, cap) = rd.remote_tail().unwrap();
        assert_eq!((off, cap), (104, 28));
        region.write(off, b"remote").unwrap();
        rd.grow_data_len(6).unwrap();
        assert_eq!(rd.data(), (base + 100, 10));
        // SAFETY: sp is 4096 bytes of live memory.
        let written = unsafe { std::slice::from_raw_parts(sp.add(104), 6) };
        assert_eq!(written, b"remote");
        // Local-only helpers refuse imported memory.
        assert_eq!(rd.append(b"x").unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        // SAFETY: refused before any slice is made.
        let r = unsafe { rd.payload_slice() };
        assert_eq!(r.unwrap_err(), DOCA_ERROR_INVALID_VALUE);

        // SAFETY: live objects; all buffers returned before their inventory and mmaps go.
        unsafe {
            for b in [dst, rob, rsrc, rdst] {
                assert_eq!(doca_buf_dec_refcount(b, ptr::null_mut()), DOCA_SUCCESS);
            }
            assert_eq!(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
            assert_eq!(doca_mmap_destroy(im), DOCA_SUCCESS);
            assert_eq!(doca_mmap_destroy(m), DOCA_SUCCESS);
            assert_eq!(doca_mmap_destroy(ro), DOCA_SUCCESS);
            assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
        }
        free_shared(sp).unwrap();
    }
}
