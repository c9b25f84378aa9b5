//! The `doca_buf` descriptors an operation needs for the memory it owns: one home for what
//! RDMA and DMA do alike.
//!
//! * [`Inventory`]: a `doca_buf_inventory` (a context's, or a [`DescCache`]'s), destroyed
//!   when its owner and every operation using it are gone (each operation holds its
//!   context's until its slot is released).
//! * [`Desc`]: what a descriptor is made over (mmap, address, length), captured from a
//!   [`Buf`] or a [`RemoteSlice`] before the operation takes ownership of it (the operation
//!   keeps it alive, so a `Desc` stays valid).
//! * [`Descs`]: takes the (at most two) descriptors of one operation in the task's
//!   allocation closure and hands them to the operation's completion slot, which gives them
//!   back as soon as the task is over: at once when the allocation fails, otherwise when
//!   DOCA completes (or flushes) the task, right after the task is freed, whether or not
//!   the future is still there, and before the context's waiters for a free task (or
//!   descriptor: an exhausted inventory) are woken. Always before the memory they describe
//!   can go: the slot releases them before it drops the operation's kept buffers. No side
//!   table and no allocation per operation.
//! * [`DescCache`]: each registration ([`Memory`](super::Memory), [`RemoteMemory`]
//!   (super::RemoteMemory)) keeps the descriptors of the slices its operations used, so an
//!   operation on the same bytes as an earlier one (the common case: a buffer reused for
//!   every message, a fixed remote target) re-points a kept descriptor instead of getting
//!   and dropping one. See its documentation for the rules.

use std::cell::{Cell, OnceCell};
use std::ffi::c_void;

use super::{Buf, RemoteSlice};
use crate::error::{Error, Result};
use crate::ext::TaskSlot;
use crate::sys;

/// A `doca_buf_inventory`, destroyed when the context and every operation using it are gone.
pub(crate) struct Inventory(*mut sys::doca_buf_inventory);

impl Inventory {
    /// A started inventory of `n` descriptors; `what` names the caller in errors.
    pub(crate) fn new(n: usize, what: &'static str) -> Result<Inventory> {
        let fail = |rc, call| Err(Error::from_doca(rc, format!("{what}: {call}")));
        let mut inv = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { sys::doca_buf_inventory_create(n, &mut inv) };
        if rc != sys::DOCA_SUCCESS {
            return fail(rc, "doca_buf_inventory_create");
        }
        let inv = Inventory(inv);
        // SAFETY: a fresh inventory of this thread.
        let rc = unsafe { sys::doca_buf_inventory_start(inv.0) };
        if rc != sys::DOCA_SUCCESS {
            return fail(rc, "doca_buf_inventory_start");
        }
        Ok(inv)
    }

    /// A descriptor over `d` with `data_len` bytes of data, whose reference the caller owns
    /// (given back with `doca_buf_dec_refcount` once no task uses it, while this inventory
    /// and the memory of `d` live).
    #[inline(always)]
    pub(crate) fn buf_over(
        &self,
        d: Desc,
        data_len: usize,
    ) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        let mut b = std::ptr::null_mut();
        // SAFETY: live inventory and mmap of this thread (the caller keeps both alive); the
        // range lies inside the mmap (slices are bounds-checked).
        let rc =
            unsafe { sys::doca_buf_inventory_buf_get_by_args(self.0, d.mmap, d.addr, d.len, d.addr, data_len, &mut b) };
        if rc == sys::DOCA_SUCCESS {
            Ok(b)
        } else {
            Err(rc)
        }
    }
}

impl Drop for Inventory {
    fn drop(&mut self) {
        // SAFETY: our inventory, on its thread; no buffer is out (every operation holds
        // this inventory until its slot has given its descriptors back). Stop fails harmlessly when it was
        // never started; destroyed once.
        unsafe {
            sys::doca_buf_inventory_stop(self.0);
            let rc = sys::doca_buf_inventory_destroy(self.0);
            if rc != sys::DOCA_SUCCESS {
                crate::trace::report!("doca_buf_inventory_destroy failed: {:?}", crate::DocaCode(rc));
            }
        }
    }
}

/// What a `doca_buf` is made over (see the module docs), and the cache of the registration
/// it belongs to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Desc {
    pub(crate) mmap: *mut sys::doca_mmap,
    pub(crate) addr: *mut c_void,
    pub(crate) len: usize,
    /// The registration's cache: valid while the memory is, which the operation keeps
    /// alive (the `Buf` or `RemoteSlice` it was made from is among its kept buffers).
    cache: *const DescCache,
}

impl Desc {
    pub(crate) fn local(b: &Buf) -> Desc {
        let mem = b.memory();
        Desc { mmap: mem.raw_mmap(), addr: b.as_ptr().cast(), len: b.len(), cache: mem.desc_cache() }
    }

    pub(crate) fn remote(r: &RemoteSlice) -> Desc {
        Desc { mmap: r.raw_mmap(), addr: r.raw_addr() as *mut c_void, len: r.len(), cache: r.desc_cache() }
    }

    /// The first `len` bytes of it.
    pub(crate) fn prefix(self, len: usize) -> Desc {
        assert!(len <= self.len, "a prefix of {len} bytes of a {}-byte slice", self.len);
        Desc { len, ..self }
    }
}

/// Takes the (at most two) descriptors of one operation, lent by the memory's [`DescCache`]
/// or else from the context's inventory, and hands them to the operation's completion slot
/// (see the module docs).
pub(crate) struct Descs<'a> {
    inv: &'a Inventory,
    slot: &'a TaskSlot,
}

impl<'a> Descs<'a> {
    /// Descriptors from `inv` for the operation of `slot`. The operation keeps `inv` alive
    /// until its slot is released (it is among the operation's kept buffers).
    pub(crate) fn new(inv: &'a Inventory, slot: &'a TaskSlot) -> Descs<'a> {
        Descs { inv, slot }
    }

    /// Descriptor `i` (0 or 1) over `d` with `data_len` bytes of data: lent by the
    /// registration's cache when it can, otherwise taken from the context's inventory.
    #[inline(always)]
    pub(crate) fn get(
        &self,
        i: usize,
        d: Desc,
        data_len: usize,
    ) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        // SAFETY: the memory `d` was made from is alive (the operation keeps it), and with it
        // its cache.
        if let Some((b, lent)) = unsafe { &*d.cache }.lend(d, data_len) {
            self.slot.hold_lent(i, lent);
            return Ok(b);
        }
        // The inventory and the memory are held by the operation.
        let b = self.inv.buf_over(d, data_len)?;
        self.slot.hold_desc(i, b);
        Ok(b)
    }

    /// A source over all of `d` (NULL for an empty buffer: an empty message).
    // Inlined into each operation's allocation (as `dst`): out of line, the two calls cost a
    // write ~50 instructions (docs/cost.md, fourteenth session).
    #[inline]
    pub(crate) fn src(&self, i: usize, d: Desc) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        if d.len == 0 {
            return Ok(std::ptr::null_mut());
        }
        self.get(i, d, d.len)
    }

    /// A destination over `d` with an empty payload (NULL for an empty buffer).
    #[inline]
    pub(crate) fn dst(&self, i: usize, d: Desc) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        if d.len == 0 {
            return Ok(std::ptr::null_mut());
        }
        self.get(i, d, 0)
    }
}

/// How many descriptors one registration keeps, in sets of `WAYS` entries: a window of 64
/// operations on distinct slices (perftest's default depth) finds its descriptors again for
/// every layout we simulated (equal slices at strides of 8 B to 1 MiB, odd strides, padded
/// ones), where 64 direct-mapped entries kept 55–65% of them.
const CACHED: usize = 128;
/// Entries of one set: a slice may use any entry of the set its hash picks.
const WAYS: usize = 8;

/// The descriptors a registration keeps for the slices its operations used (see the module
/// docs). A cache belongs to one [`Memory`](super::Memory) or
/// [`RemoteMemory`](super::RemoteMemory) and is used on its thread only.
///
/// * **Exact slices.** An entry is found by the slice's address and length, and a
///   descriptor is lent only for exactly those bytes: a descriptor bounds what DOCA may
///   touch (a receive or read never writes past it), so one made over a wider range and
///   re-pointed would let a task overrun its slice.
/// * **One task at a time.** An entry is lent to one operation until that operation's
///   slot gives it back (its task is over); a second operation on the same bytes meanwhile
///   gets another entry. DOCA writes a destination descriptor's data length, so a
///   descriptor is never shared by two tasks.
/// * **Re-pointed on loan.** A destination is lent with an empty payload (`doca_buf_set_data`
///   to the slice's start, length 0), whatever a previous task left in it; a source with the
///   whole slice as payload, set again only when the entry last served as a destination.
/// * **Set-associative, evicting.** `CACHED` entries in sets of `WAYS`; a hash of address and
///   length picks the set. A slice takes an idle entry of its own bytes in the set, else an
///   empty one, else replaces an idle entry of other bytes (dropping that descriptor); when
///   every entry of the set is lent, the operation uses its context's inventory. Memory
///   held is bounded: `CACHED` descriptors per registration, from an inventory of its own,
///   made at the first operation.
/// * **Never outlives its memory.** The cache is a field of the registration and is
///   emptied (every descriptor dropped, then its inventory destroyed) in the registration's
///   `Drop`, before the mmap is stopped and destroyed; DOCA refuses to destroy an mmap that
///   descriptors still reference. No entry is lent then: every operation keeps the memory
///   alive until its slot has given its descriptors back.
pub(crate) struct DescCache {
    /// Made at the first loan; `None` when the inventory could not be made (operations
    /// then use their contexts' inventories).
    store: OnceCell<Option<Box<Store>>>,
}

struct Store {
    entries: [Entry; CACHED],
    /// The index of the entry lent last (see `lend`).
    last: Cell<usize>,
    inv: Inventory,
}

struct Entry {
    /// The slice the descriptor is made over (`buf` null: the entry is empty).
    addr: Cell<usize>,
    len: Cell<usize>,
    buf: Cell<*mut sys::doca_buf>,
    /// Lent to an operation; cleared by its slot when its task is over.
    lent: Cell<bool>,
    /// The payload is the whole slice, as a source needs it, and no task changed it since
    /// (only a destination's payload is written by DOCA).
    source_ready: Cell<bool>,
    /// The entry lent right after this one, the last time this one was the last lent: a
    /// hint `lend` tries second (see there).
    next: Cell<usize>,
}

impl DescCache {
    pub(crate) fn new() -> DescCache {
        DescCache { store: OnceCell::new() }
    }

    /// Lends a descriptor over exactly `d` with `data_len` bytes of data (all of `d` for a
    /// source, 0 for a destination), and the flag the slot clears to give it back; `None`
    /// when the entry is lent to another operation (or the cache has no inventory).
    #[inline(always)]
    fn lend(&self, d: Desc, data_len: usize) -> Option<(*mut sys::doca_buf, *const Cell<bool>)> {
        let store = self.store.get_or_init(Store::new).as_deref()?;
        let (addr, len) = (d.addr as usize, d.len);
        // The entry lent last first: an operation that reuses one buffer or target (the
        // common loop) finds it without hashing and searching its set. Then the entry lent
        // after it the previous time: a window of operations cycling over distinct slices
        // (lane k on slice k) finds each one there.
        let last_i = store.last.get() % CACHED;
        let last = &store.entries[last_i];
        let next_i = last.next.get() % CACHED;
        let (i, e) = if last.idle_over(addr, len) {
            (last_i, last)
        } else if store.entries[next_i].idle_over(addr, len) {
            (next_i, &store.entries[next_i])
        } else {
            let first = set_of(addr, len);
            let set = &store.entries[first..][..WAYS];
            match set.iter().position(|e| e.idle_over(addr, len)) {
                Some(k) => (first + k, &set[k]),
                None => return store.fill(first, d, data_len),
            }
        };
        last.next.set(i);
        let source = data_len == len;
        // Both calls below touch a live descriptor of this cache that is not lent, so no task
        // in flight uses it (a task kept for reuse may still hold its pointer, but every reuse
        // sets all of a task's buffers again before submitting it, and freeing a task reads
        // none).
        let rc = if !source {
            // A destination only needs its payload emptied: an entry's data always starts at
            // its slice (it is made so, `doca_buf_set_data` below keeps it so, and DOCA appends
            // to a destination without moving its start). 11 instructions fewer than setting
            // the data again (`op_cost write`).
            // SAFETY: an idle live descriptor of this cache (above).
            unsafe { sys::doca_buf_reset_data_len(e.buf.get()) }
        } else if !e.source_ready.get() {
            // SAFETY: an idle live descriptor of this cache (above); the range is the slice it
            // was made over.
            unsafe { sys::doca_buf_set_data(e.buf.get(), d.addr, data_len) }
        } else {
            sys::DOCA_SUCCESS
        };
        if rc != sys::DOCA_SUCCESS {
            return None;
        }
        e.source_ready.set(source);
        store.last.set(i);
        e.lent.set(true);
        Some((e.buf.get(), &e.lent))
    }

    /// Drops every descriptor and the inventory: the registration's `Drop` calls it before
    /// destroying the mmap they reference.
    pub(crate) fn clear(&mut self) {
        drop(self.store.take());
    }

    /// The data (address, length) of the descriptor over exactly `len` bytes at `addr`, if
    /// the cache holds one: what the last operation on those bytes handed DOCA.
    #[cfg(test)]
    pub(crate) fn data_over(&self, addr: usize, len: usize) -> Option<(usize, usize)> {
        let store = self.store.get()?.as_deref()?;
        let e = store.entries.iter().find(|e| e.addr.get() == addr && e.len.get() == len && !e.buf.get().is_null())?;
        Some(data_of(e.buf.get()))
    }

    /// How many descriptors the cache holds (lent or idle).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.store
            .get()
            .and_then(|s| s.as_deref())
            .map_or(0, |s| s.entries.iter().filter(|e| !e.buf.get().is_null()).count())
    }
}

impl Store {
    fn new() -> Option<Box<Store>> {
        let inv = match Inventory::new(CACHED, "descriptor cache") {
            Ok(inv) => inv,
            Err(e) => {
                crate::trace::report!("{e}; operations on this memory take descriptors from their contexts");
                return None;
            }
        };
        let entries = std::array::from_fn(|_| Entry {
            addr: Cell::new(0),
            len: Cell::new(0),
            buf: Cell::new(std::ptr::null_mut()),
            lent: Cell::new(false),
            source_ready: Cell::new(false),
            next: Cell::new(0),
        });
        Some(Box::new(Store { entries, last: Cell::new(0), inv }))
    }

    /// Lends a new descriptor over exactly `d` from the set starting at `first`, which has
    /// no idle entry over those bytes: an empty entry, else an idle one of other bytes
    /// (whose descriptor is dropped); `None` when every entry of the set is lent.
    #[cold]
    fn fill(&self, first: usize, d: Desc, data_len: usize) -> Option<(*mut sys::doca_buf, *const Cell<bool>)> {
        let set = &self.entries[first..][..WAYS];
        let k = set.iter().position(|e| e.buf.get().is_null()).or_else(|| set.iter().position(|e| !e.lent.get()))?;
        let e = &set[k];
        let old = e.buf.replace(std::ptr::null_mut());
        if !old.is_null() {
            // SAFETY: an idle descriptor of this cache (not lent: no task in flight uses it;
            // a task kept for reuse may still hold the pointer, but it is set anew before
            // that task is submitted again, and freeing a task reads none of its buffers),
            // dropped once (the entry was cleared above).
            unsafe { sys::doca_buf_dec_refcount(old, std::ptr::null_mut()) };
        }
        let mut b = std::ptr::null_mut();
        // SAFETY: live inventory; the mmap is the registration's, alive with its cache; the
        // range lies inside it (slices are bounds-checked).
        let rc = unsafe {
            sys::doca_buf_inventory_buf_get_by_args(self.inv.0, d.mmap, d.addr, d.len, d.addr, data_len, &mut b)
        };
        if rc != sys::DOCA_SUCCESS {
            return None;
        }
        e.addr.set(d.addr as usize);
        e.len.set(d.len);
        e.buf.set(b);
        e.source_ready.set(data_len == d.len);
        self.entries[self.last.get() % CACHED].next.set(first + k);
        self.last.set(first + k);
        e.lent.set(true);
        Some((b, &e.lent))
    }
}

impl Entry {
    /// Whether the entry holds a descriptor over exactly `len` bytes at `addr` that no
    /// operation has on loan.
    #[inline(always)]
    fn idle_over(&self, addr: usize, len: usize) -> bool {
        !self.lent.get() && self.addr.get() == addr && self.len.get() == len && !self.buf.get().is_null()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        for e in &self.entries {
            let b = e.buf.replace(std::ptr::null_mut());
            if b.is_null() {
                continue;
            }
            debug_assert!(!e.lent.get(), "a descriptor cache dropped while lent");
            // SAFETY: a descriptor of this cache's inventory (dropped after this loop, as
            // the field `inv`); no task in flight uses it (nothing is lent: every operation
            // keeps the registration alive until its descriptors are given back; a task kept
            // for reuse that still holds the pointer gets new buffers before it is submitted
            // again, and freeing it reads none); once.
            unsafe { sys::doca_buf_dec_refcount(b, std::ptr::null_mut()) };
        }
    }
}

impl std::fmt::Debug for DescCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DescCache").finish_non_exhaustive()
    }
}

/// The first entry of the set of the slice at `addr` of `len` bytes: a 64-bit finalizer
/// (murmur3's), so that no regular layout of slices crowds into a few sets.
fn set_of(addr: usize, len: usize) -> usize {
    let mut h = addr as u64 ^ (len as u64).rotate_left(40);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (h as usize % (CACHED / WAYS)) * WAYS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Access, Device};

    fn give_back(lent: *const Cell<bool>) {
        // SAFETY: a flag of a cache alive in the calling test.
        unsafe { (*lent).set(false) };
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn the_same_bytes_get_the_same_descriptor_once_given_back() {
        let dev = Device::open_default().unwrap();
        let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE).unwrap();
        let cache = mem.desc_cache();
        let d = Desc::local(&mem.slice(64..72));
        let (b1, lent) = cache.lend(d, 8).expect("an empty cache lends");
        assert_eq!(data_of(b1), (d.addr as usize, 8), "a source's payload is the slice");
        // The same bytes for a second task meanwhile: a descriptor of its own.
        let (other, other_lent) = cache.lend(d, 8).expect("an empty entry");
        assert_ne!(other, b1, "a lent descriptor serves one task at a time");
        give_back(lent);
        let (b2, lent) = cache.lend(d, 0).unwrap();
        assert_eq!(b1, b2, "the same bytes reuse the descriptor");
        assert_eq!(data_of(b2), (d.addr as usize, 0), "a destination's payload is empty");
        // A task wrote part of the destination (DOCA grows the data length).
        // SAFETY: live descriptor, within its bounds.
        assert_eq!(unsafe { sys::doca_buf_set_data_len(b2, 3) }, sys::DOCA_SUCCESS);
        give_back(lent);
        // A destination again: emptied (its payload's start never moved).
        let (b2, lent) = cache.lend(d, 0).unwrap();
        assert_eq!((b2, data_of(b2)), (b1, (d.addr as usize, 0)), "a destination after a destination is empty");
        // SAFETY: as above.
        assert_eq!(unsafe { sys::doca_buf_set_data_len(b2, 5) }, sys::DOCA_SUCCESS);
        give_back(lent);
        let (b3, lent) = cache.lend(d, 8).unwrap();
        assert_eq!((b3, data_of(b3)), (b1, (d.addr as usize, 8)), "a source after a destination is whole again");
        give_back(lent);
        give_back(other_lent);
        assert_eq!(cache.held(), 2);
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn a_prefix_is_other_bytes_and_a_full_set_evicts_or_refuses() {
        let dev = Device::open_default().unwrap();
        let mem = dev.alloc(1 << 20, Access::LOCAL_READ_WRITE).unwrap();
        let cache = mem.desc_cache();
        let whole = Desc::local(&mem.slice(0..64));
        let (bw, lw) = cache.lend(whole, 64).unwrap();
        let (bp, lp) = cache.lend(whole.prefix(8), 8).expect("a prefix has an entry of its own");
        assert_ne!(bp, bw, "a prefix is not the whole slice: its own descriptor");
        assert_eq!(data_of(bp), (whole.addr as usize, 8));
        give_back(lp);
        give_back(lw);
        // WAYS other slices of the whole slice's set, all lent at once: they take the empty
        // entries, then replace the idle ones (the whole slice's among them).
        let set = set_of(whole.addr as usize, 64);
        let others: Vec<Desc> = (1..16384)
            .map(|k| Desc::local(&mem.slice(k * 64..k * 64 + 64)))
            .filter(|d| set_of(d.addr as usize, 64) == set)
            .take(WAYS)
            .collect();
        assert_eq!(others.len(), WAYS, "16384 slices fill a set of {WAYS}");
        let lent: Vec<_> = others
            .iter()
            .map(|d| {
                let (b, l) = cache.lend(*d, 64).expect("an empty or idle entry");
                assert_eq!(data_of(b), (d.addr as usize, 64));
                l
            })
            .collect();
        assert!(cache.held() <= CACHED);
        // Every entry of the set is lent: no loan (the context's inventory serves it).
        assert!(cache.lend(whole, 64).is_none());
        lent.into_iter().for_each(give_back);
        let (b, l) = cache.lend(whole, 64).expect("an idle entry is replaced");
        assert_eq!(data_of(b), (whole.addr as usize, 64));
        give_back(l);
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn a_registration_with_cached_descriptors_is_destroyed_cleanly() {
        let dev = Device::open_default().unwrap();
        let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE | Access::RDMA_ALL).unwrap();
        let remote = dev.import(&mem.export_rdma().unwrap()).unwrap();
        for k in 0..8 {
            let (_, l) = mem.desc_cache().lend(Desc::local(&mem.slice(k * 8..k * 8 + 8)), 0).unwrap();
            give_back(l);
            let (_, l) = remote
                .slice(k * 8..k * 8 + 8)
                .desc_cache()
                .lend(Desc::remote(&remote.slice(k * 8..k * 8 + 8)), 0)
                .unwrap();
            give_back(l);
        }
        assert!(mem.desc_cache().held() > 0 && remote.slice(..).desc_cache().held() > 0);
        let before = DESTROY_FAILURES.with(Cell::get);
        drop(remote);
        drop(mem);
        assert_eq!(DESTROY_FAILURES.with(Cell::get), before, "an mmap was destroyed with descriptors left");
    }
}

/// The data (address, length) of live descriptor `b`: what the tests check a descriptor
/// hands DOCA.
#[cfg(test)]
pub(crate) fn data_of(b: *mut sys::doca_buf) -> (usize, usize) {
    let (mut p, mut n) = (std::ptr::null_mut(), 0usize);
    // SAFETY: the caller's live descriptor; valid out-pointers.
    unsafe {
        assert_eq!(sys::doca_buf_get_data(b, &mut p), sys::DOCA_SUCCESS);
        assert_eq!(sys::doca_buf_get_data_len(b, &mut n), sys::DOCA_SUCCESS);
    }
    (p as usize, n)
}

#[cfg(test)]
thread_local! {
    /// mmaps whose destruction failed on this thread (descriptors left over): what a
    /// registration's `Drop` can only report, counted for the tests.
    pub(crate) static DESTROY_FAILURES: Cell<usize> = const { Cell::new(0) };
}
