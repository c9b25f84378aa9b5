//! The `doca_buf` descriptors an operation needs for the memory it owns: one home for what
//! RDMA and DMA do alike.
//!
//! * [`Inventory`]: a context's `doca_buf_inventory`, destroyed when the context and every
//!   operation using it are gone (each operation holds it until its slot is released).
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

/// What a `doca_buf` is made over (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Desc {
    pub(crate) mmap: *mut sys::doca_mmap,
    pub(crate) addr: *mut c_void,
    pub(crate) len: usize,
}

impl Desc {
    pub(crate) fn local(b: &Buf) -> Desc {
        Desc { mmap: b.memory().raw_mmap(), addr: b.as_ptr().cast(), len: b.len() }
    }

    pub(crate) fn remote(r: &RemoteSlice) -> Desc {
        Desc { mmap: r.raw_mmap(), addr: r.raw_addr() as *mut c_void, len: r.len() }
    }
}

/// Takes the (at most two) descriptors of one operation from a context's inventory and
/// hands them to the operation's completion slot (see the module docs).
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

    /// Descriptor `i` (0 or 1) over `d` with `data_len` bytes of data.
    pub(crate) fn get(
        &self,
        i: usize,
        d: Desc,
        data_len: usize,
    ) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        let mut b = std::ptr::null_mut();
        // SAFETY: live inventory and mmap of this thread (held by the operation and by the
        // memory it owns); the range lies inside the mmap (slices are bounds-checked).
        let rc = unsafe {
            sys::doca_buf_inventory_buf_get_by_args(self.inv.0, d.mmap, d.addr, d.len, d.addr, data_len, &mut b)
        };
        if rc != sys::DOCA_SUCCESS {
            return Err(rc);
        }
        self.slot.hold_desc(i, b);
        Ok(b)
    }

    /// A source over all of `d` (NULL for an empty buffer: an empty message).
    pub(crate) fn src(&self, i: usize, d: Desc) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        if d.len == 0 {
            return Ok(std::ptr::null_mut());
        }
        self.get(i, d, d.len)
    }

    /// A destination over `d` with an empty payload (NULL for an empty buffer).
    pub(crate) fn dst(&self, i: usize, d: Desc) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        if d.len == 0 {
            return Ok(std::ptr::null_mut());
        }
        self.get(i, d, 0)
    }
}
