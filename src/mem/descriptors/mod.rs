//! The `doca_buf` descriptors an operation needs for the memory it owns: one home for what
//! RDMA, DMA and Comch do alike.
//!
//! * [`Inventory`]: a `doca_buf_inventory` (a context's, or a [`DescCache`]'s), destroyed
//!   when its owner and every operation using it are gone (each operation holds its
//!   context's until its descriptors are given back).
//! * [`Desc`]: what a descriptor is made over (mmap, address, length), captured from a
//!   [`Buf`] or a [`RemoteSlice`] before the operation takes ownership of it (the operation
//!   keeps it alive, so a `Desc` stays valid).
//! * [`Descs`]: takes the (at most two) descriptors of one operation in the task's
//!   allocation and hands them to the [`TaskDescs`] of the task's completion slot or held
//!   record.
//! * [`TaskDescs`] (`task`): the descriptors one task holds. A slot gives them back as soon
//!   as the task is over: at once when the allocation fails, otherwise when DOCA completes
//!   (or flushes) the task, right after the task is freed, whether or not the future is
//!   still there, and before the context's waiters for a free task (or descriptor: an
//!   exhausted inventory) are woken. Always before the memory they describe can go: the
//!   slot releases them before it drops the operation's kept buffers. No side table and no
//!   allocation per operation. A held record (an operation future on a task its owner
//!   keeps) does the same with descriptors from an inventory, but *parks* those its cache
//!   lent: they stay with the record, and its task keeps pointing at them, so that its next
//!   operation on the same bytes (a loop of `.await`s on one buffer and one remote target)
//!   takes neither a loan nor a setter.
//! * [`DescCache`] (`cache`): each registration ([`Memory`](super::Memory),
//!   [`RemoteMemory`](super::RemoteMemory)) keeps the descriptors of the slices its operations used, so an
//!   operation on the same bytes as an earlier one (the common case: a buffer reused for
//!   every message, a fixed remote target) re-points a kept descriptor instead of getting
//!   and dropping one. See its documentation for the rules, parked loans among them.

mod cache;
mod task;

use std::cell::Cell;
use std::ffi::c_void;

pub(crate) use cache::DescCache;
use task::HeldDesc;
pub(crate) use task::TaskDescs;

use super::{Buf, RemoteSlice};
use crate::error::{Error, Result};
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
        // this inventory until its descriptors are given back; a cache drops its own before
        // its inventory). Stop fails harmlessly when it was never started; destroyed once.
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
/// or else from the context's inventory, and hands them to the operation's [`TaskDescs`]
/// (see the module docs). For a held record, first offers each the descriptor its previous
/// operation parked there, and tells the request whether its task must be re-pointed
/// ([`changed`](Descs::changed)).
pub(crate) struct Descs<'a> {
    inv: &'a Inventory,
    held: &'a TaskDescs,
    /// A descriptor of this operation is not the one its held task was pointed at by the
    /// previous operation (see [`changed`](Descs::changed)).
    changed: Cell<bool>,
}

impl<'a> Descs<'a> {
    /// Descriptors from `inv` for the operation whose task holds them in `held` (its slot's,
    /// or its held record's). The operation keeps `inv` alive until they are given back (it
    /// is among the operation's kept buffers).
    #[inline(always)]
    pub(crate) fn new(inv: &'a Inventory, held: &'a TaskDescs) -> Descs<'a> {
        Descs { inv, held, changed: Cell::new(false) }
    }

    /// Descriptor `i` (0 or 1) over `d` with `data_len` bytes of data: the one parked at `i`
    /// when it is over exactly `d`, else lent by the registration's cache when it can,
    /// otherwise taken from the context's inventory.
    #[inline(always)]
    pub(crate) fn get(
        &self,
        i: usize,
        d: Desc,
        data_len: usize,
    ) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        if let Some(b) = self.held.parked_over(i, d, data_len) {
            return Ok(b);
        }
        self.changed.set(true);
        // SAFETY: the memory `d` was made from is alive (the operation keeps it), and with it
        // its cache.
        let cache = unsafe { &*d.cache };
        if let Some((b, loan)) = cache.lend(d, data_len) {
            self.held.hold_loan(i, loan);
            return Ok(b);
        }
        // The inventory and the memory are held by the operation.
        let b = self.inv.buf_over(d, data_len)?;
        self.held.hold(i, HeldDesc::Owned(b));
        Ok(b)
    }

    /// A source over all of `d` (NULL for an empty buffer: an empty message).
    // Inlined into each operation's allocation (as `dst`): out of line, the two calls cost a
    // write ~50 instructions (docs/cost.md, fourteenth session).
    #[inline]
    pub(crate) fn src(&self, i: usize, d: Desc) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        if d.len == 0 {
            return Ok(self.none(i));
        }
        self.get(i, d, d.len)
    }

    /// A destination over `d` with an empty payload (NULL for an empty buffer).
    #[inline]
    pub(crate) fn dst(&self, i: usize, d: Desc) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        if d.len == 0 {
            return Ok(self.none(i));
        }
        self.get(i, d, 0)
    }

    /// No descriptor at `i` (an empty buffer): a held task that had one there is re-pointed.
    #[cold]
    fn none(&self, i: usize) -> *mut sys::doca_buf {
        self.held.release_at(i);
        self.changed.set(true);
        std::ptr::null_mut()
    }

    /// Whether a held task must be pointed at this operation's descriptors with its kind's
    /// setters: `false` only when every descriptor was the one parked by the previous
    /// operation on the same record, which its task still points at (see [`TaskDescs`]).
    /// Meaningless for a slot's task, which is always set in full.
    #[inline(always)]
    pub(crate) fn changed(&self) -> bool {
        self.changed.get()
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
