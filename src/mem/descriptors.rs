//! The `doca_buf` descriptors an operation needs for the memory it owns: one home for what
//! RDMA and DMA do alike.
//!
//! * [`Inventory`]: a context's `doca_buf_inventory`, destroyed when the context and every
//!   operation using it are gone (each [`BufSet`] holds it).
//! * [`Desc`]: what a descriptor is made over (mmap, address, length), captured from a
//!   [`Buf`] or a [`RemoteSlice`] before the operation takes ownership of it (the operation
//!   keeps it alive, so a `Desc` stays valid).
//! * [`BufSet`]: the (at most two) descriptors of one operation. Taken in the task's
//!   allocation closure; given back at once when the allocation fails, otherwise when the
//!   operation is over: when its future returns, or, for a future dropped mid-flight, when the
//!   slot releases its buffers after DOCA completed (or flushed) the task. Always before the
//!   memory they describe can go (operations drop the set before their memory). Giving
//!   descriptors back wakes the operations that wait for one (an exhausted inventory).

use std::cell::Cell;
use std::ffi::c_void;
use std::rc::Rc;

use super::{Buf, RemoteSlice};
use crate::error::{Error, Result};
use crate::executor::context::TaskWaiters;
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
        // SAFETY: our inventory, on its thread; no buffer is out (every BufSet holds this
        // inventory and gives its buffers back first). Stop fails harmlessly when it was
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

/// The descriptors of one operation (see the module docs).
pub(crate) struct BufSet {
    bufs: Cell<[*mut sys::doca_buf; 2]>,
    inv: Rc<Inventory>,
    waiters: TaskWaiters,
}

impl BufSet {
    /// An empty set drawing from `inv`; `waiters` are woken when it gives descriptors back.
    pub(crate) fn new(inv: Rc<Inventory>, waiters: TaskWaiters) -> BufSet {
        BufSet { bufs: Cell::new([std::ptr::null_mut(); 2]), inv, waiters }
    }

    /// Descriptor `i` (0 or 1) over `d` with `data_len` bytes of data.
    pub(crate) fn get(
        &self,
        i: usize,
        d: Desc,
        data_len: usize,
    ) -> std::result::Result<*mut sys::doca_buf, sys::doca_error_t> {
        let mut b = std::ptr::null_mut();
        // SAFETY: live inventory and mmap of this thread (held by `self` and by the memory the
        // operation owns); the range lies inside the mmap (slices are bounds-checked).
        let rc = unsafe {
            sys::doca_buf_inventory_buf_get_by_args(self.inv.0, d.mmap, d.addr, d.len, d.addr, data_len, &mut b)
        };
        if rc != sys::DOCA_SUCCESS {
            return Err(rc);
        }
        let mut bufs = self.bufs.get();
        bufs[i] = b;
        self.bufs.set(bufs);
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

    /// Gives the descriptors back; returns whether there were any.
    pub(crate) fn release(&self) -> bool {
        let bufs = self.bufs.replace([std::ptr::null_mut(); 2]);
        let mut any = false;
        for b in bufs.into_iter().filter(|b| !b.is_null()) {
            // SAFETY: a buffer we took from the inventory, whose task (if any) DOCA no longer
            // owns; its reference is dropped once (the slot was cleared above).
            unsafe { sys::doca_buf_dec_refcount(b, std::ptr::null_mut()) };
            any = true;
        }
        any
    }
}

impl Drop for BufSet {
    fn drop(&mut self) {
        if self.release() {
            // Operations waiting for a free descriptor (an exhausted inventory) retry.
            self.waiters.wake();
        }
    }
}
