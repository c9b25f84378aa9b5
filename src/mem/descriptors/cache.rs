//! [`DescCache`]: the descriptors a registration keeps for the slices its operations used,
//! lent to one task at a time ([`Loan`]) or parked with a held record between its operations
//! ([`Parked`]).

use std::cell::{Cell, OnceCell};

use super::task::HeldDesc;
use super::{Desc, Inventory};
use crate::sys;

/// How many descriptors one registration keeps, in sets of `WAYS` entries: a window of 64
/// operations on distinct slices (perftest's default depth) finds its descriptors again for
/// every layout we simulated (equal slices at strides of 8 B to 1 MiB, odd strides, padded
/// ones), where 64 direct-mapped entries kept 55–65% of them.
const CACHED: usize = 128;
/// Entries of one set: a slice may use any entry of the set its hash picks.
const WAYS: usize = 8;

/// The descriptors a registration keeps for the slices its operations used (see the module
/// docs). A cache belongs to one [`Memory`](crate::mem::Memory) or
/// [`RemoteMemory`](crate::mem::RemoteMemory) and is used on its thread only.
///
/// * **Exact slices.** An entry is found by the slice's address and length, and a
///   descriptor is lent only for exactly those bytes: a descriptor bounds what DOCA may
///   touch (a receive or read never writes past it), so one made over a wider range and
///   re-pointed would let a task overrun its slice.
/// * **One task at a time.** An entry is lent ([`Loan`]) to one operation until that
///   operation's slot gives it back (its task is over); a second operation on the same bytes
///   meanwhile gets another entry. DOCA writes a destination descriptor's data length, so a
///   descriptor is never shared by two tasks.
/// * **Parked with a held record.** An operation on a held task (`completion::held_op`)
///   does not give its loan back at completion: the record keeps it ([`Parked`]), and its
///   task keeps pointing at it, so that the record's next operation on the same bytes takes
///   it again without a lookup or a setter. It stays parked until an operation of that
///   record uses other bytes, fails, or the record goes, or until another operation needs
///   the entry (the same bytes while the record is idle, or a free place in its set): the
///   entry then takes itself back from the record (it knows the record's cell, and the
///   record's cell the entry), and the record's next operation points its task anew.
/// * **Re-pointed on loan.** A destination is lent with an empty payload (`doca_buf_set_data`
///   to the slice's start, length 0), whatever a previous task left in it; a source with the
///   whole slice as payload, set again only when the entry last served as a destination. A
///   parked descriptor is readied the same way for each operation of its record.
/// * **Set-associative, evicting.** `CACHED` entries in sets of `WAYS`; a hash of address and
///   length picks the set. A slice takes an idle entry of its own bytes in the set, else an
///   empty one, else replaces an idle entry of other bytes (dropping that descriptor); when
///   every entry of the set is lent (or parked), the operation uses its context's inventory.
///   Memory held is bounded: `CACHED` descriptors per registration, from an inventory of its
///   own, made at the first operation.
/// * **Never outlives its memory.** The cache is a field of the registration and is
///   emptied (every descriptor dropped, then its inventory destroyed) in the registration's
///   `Drop`, before the mmap is stopped and destroyed; DOCA refuses to destroy an mmap that
///   descriptors still reference. No entry is in a task then (every operation keeps the
///   memory alive until its task is over), but some may be parked: emptying takes them back
///   from their records first, so a record never holds an entry of a cache that is gone.
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
    /// The cache the entry belongs to (at a stable address: a field of its registration),
    /// which a parked loan compares with its next operation's.
    cache: *const DescCache,
    /// The slice the descriptor is made over (`buf` null: the entry is empty).
    addr: Cell<usize>,
    len: Cell<usize>,
    buf: Cell<*mut sys::doca_buf>,
    /// In a task (lent to an operation, or taken again by the record that parks it):
    /// nobody else may have it. Cleared when the task is over.
    lent: Cell<bool>,
    /// The cell of the held record that parks the entry, or null. Set exactly while that
    /// cell holds `HeldDesc::Parked` of this entry (see [`Parked`]).
    parked_by: Cell<*const Cell<HeldDesc>>,
    /// The payload is the whole slice, as a source needs it, and no task changed it since
    /// (only a destination's payload is written by DOCA).
    source_ready: Cell<bool>,
    /// The entry lent right after this one, the last time this one was the last lent: a
    /// hint `lend` tries second (see there).
    next: Cell<usize>,
}

/// An entry lent to one task: given back with [`give_back`](Loan::give_back) once the task
/// is over, or parked with a held record ([`park`](Loan::park)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loan {
    entry: *const Entry,
}

impl Loan {
    /// Gives the entry back to its cache.
    ///
    /// # Safety
    /// The cache is alive (the loan's holder keeps its memory alive until it gives the loan
    /// back), and no task in flight uses the descriptor any more.
    #[inline(always)]
    pub(crate) unsafe fn give_back(self) {
        // SAFETY: the caller's contract: the entry lives in a live store.
        unsafe { (*self.entry).lent.set(false) };
    }

    /// The loan kept by the held record whose cell is `by`, past its task.
    ///
    /// # Safety
    /// The cache that lent this loan is alive; `by` is the cell that will hold the returned
    /// [`Parked`], at an address that stays valid until the loan is unparked (the record
    /// unparks its loans before it goes).
    #[inline(always)]
    pub(crate) unsafe fn park(self, by: *const Cell<HeldDesc>) -> Parked {
        // SAFETY: the entry lives in a live store (the contract).
        unsafe { (*self.entry).parked_by.set(by) };
        Parked { entry: self.entry }
    }
}

/// A loan kept by a held record between its operations (see [`DescCache`]): its task still
/// points at the descriptor. Held by exactly one record's cell, which the entry names
/// (`parked_by`): whichever of the two goes first, or wants the entry back, clears the
/// other, so a record's `Parked` always names a live entry of a live cache.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parked {
    entry: *const Entry,
}

impl Parked {
    /// The parked descriptor, taken again for a task with `data_len` bytes of data (and
    /// readied for it), when `d` is exactly its bytes in its cache; `None` otherwise.
    ///
    /// # Safety
    /// A record's cell holds this loan (so its entry is alive, see the type's docs), and the
    /// record's task is not in flight.
    #[inline(always)]
    pub(crate) unsafe fn over(self, d: Desc, data_len: usize) -> Option<*mut sys::doca_buf> {
        // SAFETY: alive while parked (the contract).
        let e = unsafe { &*self.entry };
        if e.cache != d.cache || e.addr.get() != d.addr as usize || e.len.get() != d.len {
            return None;
        }
        // Not lent: the record's task, the only one that may have it, is not in flight.
        if !e.ready(d, data_len) {
            return None;
        }
        e.lent.set(true);
        Some(e.buf.get())
    }

    /// The record's task is over: the entry stays parked, but may be taken back by another
    /// operation until the record takes it again.
    ///
    /// # Safety
    /// As for [`over`](Parked::over).
    #[inline(always)]
    pub(crate) unsafe fn task_over(self) {
        // SAFETY: alive while parked (the contract).
        unsafe { (*self.entry).lent.set(false) };
    }

    /// Gives the entry back to its cache; the caller has emptied the record's cell.
    ///
    /// # Safety
    /// As for [`over`](Parked::over).
    #[inline]
    pub(crate) unsafe fn unpark(self) {
        // SAFETY: alive while parked (the contract).
        let e = unsafe { &*self.entry };
        e.parked_by.set(std::ptr::null());
        e.lent.set(false);
    }
}

impl DescCache {
    pub(crate) fn new() -> DescCache {
        DescCache { store: OnceCell::new() }
    }

    /// Lends a descriptor over exactly `d` with `data_len` bytes of data (all of `d` for a
    /// source, 0 for a destination); `None` when the entry is lent to another operation (or
    /// the cache has no inventory).
    #[inline(always)]
    pub(super) fn lend(&self, d: Desc, data_len: usize) -> Option<(*mut sys::doca_buf, Loan)> {
        let store = self.store.get_or_init(|| Store::new(self)).as_deref()?;
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
        // Not lent, so no task in flight uses it (a record that parks it is idle).
        if !e.ready(d, data_len) {
            return None;
        }
        store.last.set(i);
        Some(store.lend_entry(e))
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
        Some(super::data_of(e.buf.get()))
    }

    /// How many descriptors the cache holds (lent or idle).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.store
            .get()
            .and_then(|s| s.as_deref())
            .map_or(0, |s| s.entries.iter().filter(|e| !e.buf.get().is_null()).count())
    }

    /// How many of its descriptors are in a task.
    #[cfg(test)]
    pub(crate) fn lent(&self) -> usize {
        self.store.get().and_then(|s| s.as_deref()).map_or(0, |s| s.entries.iter().filter(|e| e.lent.get()).count())
    }

    /// How many of its descriptors a held record parks.
    #[cfg(test)]
    pub(crate) fn parked(&self) -> usize {
        let store = self.store.get().and_then(|s| s.as_deref());
        store.map_or(0, |s| s.entries.iter().filter(|e| !e.parked_by.get().is_null()).count())
    }
}

impl Store {
    /// The store of `cache` (which does not move: see [`Entry::cache`]).
    fn new(cache: *const DescCache) -> Option<Box<Store>> {
        let inv = match Inventory::new(CACHED, "descriptor cache") {
            Ok(inv) => inv,
            Err(e) => {
                crate::trace::report!("{e}; operations on this memory take descriptors from their contexts");
                return None;
            }
        };
        let entries = std::array::from_fn(|_| Entry {
            cache,
            addr: Cell::new(0),
            len: Cell::new(0),
            buf: Cell::new(std::ptr::null_mut()),
            lent: Cell::new(false),
            parked_by: Cell::new(std::ptr::null()),
            source_ready: Cell::new(false),
            next: Cell::new(0),
        });
        Some(Box::new(Store { entries, last: Cell::new(0), inv }))
    }

    /// Marks entry `e` (of this store, not lent, readied) lent, taking it back from the idle
    /// record that parks it, if any: its descriptor and the loan.
    #[inline(always)]
    fn lend_entry(&self, e: &Entry) -> (*mut sys::doca_buf, Loan) {
        e.unpark_from_record();
        e.lent.set(true);
        (e.buf.get(), Loan { entry: e })
    }

    /// Lends a new descriptor over exactly `d` from the set starting at `first`, which has
    /// no idle entry over those bytes: an empty entry, else an idle one of other bytes
    /// (whose descriptor is dropped); `None` when every entry of the set is lent.
    #[cold]
    fn fill(&self, first: usize, d: Desc, data_len: usize) -> Option<(*mut sys::doca_buf, Loan)> {
        let set = &self.entries[first..][..WAYS];
        // An empty entry, else an idle one, else one an idle record parks.
        let k = set
            .iter()
            .position(|e| e.buf.get().is_null())
            .or_else(|| set.iter().position(|e| !e.lent.get() && e.parked_by.get().is_null()))
            .or_else(|| set.iter().position(|e| !e.lent.get()))?;
        let e = &set[k];
        e.unpark_from_record();
        let old = e.buf.replace(std::ptr::null_mut());
        if !old.is_null() {
            // SAFETY: an idle descriptor of this cache (not lent, and no longer parked: no task
            // in flight uses it, and a held task that still points at it is pointed anew
            // before it is submitted, its record's cell emptied; a task kept for reuse may
            // hold the pointer, but it is set anew before it is submitted, and freeing a task
            // reads none of its buffers), dropped once (the entry was cleared above).
            unsafe { sys::doca_buf_dec_refcount(old, std::ptr::null_mut()) };
        }
        // The mmap is the registration's, alive with its cache.
        let b = self.inv.buf_over(d, data_len).ok()?;
        e.addr.set(d.addr as usize);
        e.len.set(d.len);
        e.buf.set(b);
        e.source_ready.set(data_len == d.len);
        self.entries[self.last.get() % CACHED].next.set(first + k);
        self.last.set(first + k);
        Some(self.lend_entry(e))
    }
}

impl Entry {
    /// Whether the entry holds a descriptor over exactly `len` bytes at `addr` that no
    /// operation has on loan.
    #[inline(always)]
    fn idle_over(&self, addr: usize, len: usize) -> bool {
        !self.lent.get() && self.addr.get() == addr && self.len.get() == len && !self.buf.get().is_null()
    }

    /// Takes the entry back from the idle record that parks it, if any: the record's cell is
    /// emptied, so that its next operation points its task anew.
    #[inline(always)]
    fn unpark_from_record(&self) {
        let by = self.parked_by.get();
        if !by.is_null() {
            self.parked_by.set(std::ptr::null());
            // SAFETY: set only while that record's cell holds this entry, and a record unparks
            // its entries before it goes: the cell is alive.
            unsafe { (*by).set(HeldDesc::None) };
        }
    }

    /// Readies the descriptor (over exactly `d`) for a task with `data_len` bytes of data:
    /// a destination's payload emptied, a source's made the whole slice unless it is.
    /// `false` when DOCA refused. Only for an entry no task in flight uses (idle, or parked
    /// with the record about to submit).
    #[inline(always)]
    fn ready(&self, d: Desc, data_len: usize) -> bool {
        let source = data_len == d.len;
        // Both calls touch a live descriptor that no task in flight uses (the caller's
        // condition). A task kept for reuse may still hold its pointer, but every reuse sets
        // all of a task's buffers again before submitting it, and freeing a task reads none.
        let rc = if !source {
            // A destination only needs its payload emptied: an entry's data always starts at
            // its slice (it is made so, `doca_buf_set_data` below keeps it so, and DOCA appends
            // to a destination without moving its start). 11 instructions fewer than setting
            // the data again (`op_cost write`).
            // SAFETY: a live descriptor of this cache no task in flight uses (above).
            unsafe { sys::doca_buf_reset_data_len(self.buf.get()) }
        } else if !self.source_ready.get() {
            // SAFETY: as above; the range is the slice it was made over.
            unsafe { sys::doca_buf_set_data(self.buf.get(), d.addr, data_len) }
        } else {
            sys::DOCA_SUCCESS
        };
        if rc != sys::DOCA_SUCCESS {
            return false;
        }
        self.source_ready.set(source);
        true
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        for e in &self.entries {
            // No record may hold an entry of a cache that is gone.
            e.unpark_from_record();
            let b = e.buf.replace(std::ptr::null_mut());
            if b.is_null() {
                continue;
            }
            // SAFETY: a descriptor of this cache's inventory (dropped after this loop, as
            // the field `inv`); no task in flight uses it (every operation keeps the
            // registration alive until its task is over; the record that parked one is idle,
            // its cell emptied above, so its task is pointed anew before it is submitted
            // again; a task kept for reuse that still holds the pointer gets new buffers
            // before it is submitted again, and freeing it reads none); once.
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
    use super::super::{data_of, DESTROY_FAILURES};
    use super::*;
    use crate::{Access, Device};

    fn give_back(l: Loan) {
        // SAFETY: a loan of a cache alive in the calling test, used by no task.
        unsafe { l.give_back() };
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
    fn a_parked_loan_is_found_again_readied_and_taken_back_by_its_cache() {
        let dev = Device::open_default().unwrap();
        let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE).unwrap();
        let cache = mem.desc_cache();
        let d = Desc::local(&mem.slice(0..16));
        let cell = Cell::new(HeldDesc::None);
        let (b, loan) = cache.lend(d, 0).unwrap();
        // SAFETY: the cache is alive and lent `loan`; `cell` holds the result and outlives
        // the cache's use of it (checked at the end).
        let p = unsafe { loan.park(&cell) };
        cell.set(HeldDesc::Parked(p));
        // A task wrote 5 bytes into the destination; then it is over.
        // SAFETY: live descriptor, within its bounds.
        assert_eq!(unsafe { sys::doca_buf_set_data_len(b, 5) }, sys::DOCA_SUCCESS);
        // SAFETY: `cell` holds `p`, and no task runs.
        let over = |d, n| unsafe { p.over(d, n) };
        // SAFETY: as for `over`.
        let task_over = || unsafe { p.task_over() };
        task_over();
        assert_eq!(over(d, 0), Some(b), "the same bytes: the parked descriptor");
        assert_eq!(data_of(b), (d.addr as usize, 0), "emptied for the next destination");
        task_over();
        assert_eq!(over(d, 16), Some(b));
        assert_eq!(data_of(b), (d.addr as usize, 16), "made whole for a source");
        assert_eq!(cache.lent(), 1, "taken again: lent");
        let (other, l) = cache.lend(d, 16).unwrap();
        assert_ne!(other, b, "a parked descriptor in a task serves that task only");
        give_back(l);
        task_over();
        assert_eq!(over(d.prefix(8), 8), None, "other bytes");
        assert!(matches!(cell.get(), HeldDesc::Parked(_)));
        // The record is idle: another operation on the bytes may take the entry back (the
        // one given back last is found first), which empties the record's cell.
        let (b1, l1) = cache.lend(d, 16).unwrap();
        let (b2, l2) = cache.lend(d, 16).unwrap();
        let mut got = [b1, b2];
        got.sort();
        let mut want = [b, other];
        want.sort();
        assert_eq!(got, want, "both descriptors lent");
        assert!(matches!(cell.get(), HeldDesc::None), "the cache took its entry back from the record");
        give_back(l1);
        give_back(l2);
        // Parked again, then the registration goes: the cell is emptied first.
        let (_, loan) = cache.lend(d, 16).unwrap();
        // SAFETY: as above.
        cell.set(HeldDesc::Parked(unsafe { loan.park(&cell) }));
        drop(mem);
        assert!(matches!(cell.get(), HeldDesc::None), "a cache that goes takes its parked entries back");
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
