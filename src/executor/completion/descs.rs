//! [`TaskDescs`]: the `doca_buf` descriptors one task holds, given back when the task is over.

use std::cell::Cell;

use crate::sys;

/// A descriptor a task holds, given back when the task is over.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HeldDesc {
    None,
    /// A reference taken from an inventory for this task: dropped (`doca_buf_dec_refcount`).
    Owned(*mut sys::doca_buf),
    /// A descriptor lent by a registration's cache (`mem::descriptors`): its "lent" flag is
    /// cleared, and the cache keeps the descriptor for the next operation on the same bytes.
    Lent(*const Cell<bool>),
}

/// The descriptors (at most two) of one task: taken by its allocation
/// ([`TaskSlot::hold_desc`](super::TaskSlot::hold_desc),
/// [`TaskSlot::hold_lent`](super::TaskSlot::hold_lent)) and given back by
/// [`release`](TaskDescs::release) as soon as DOCA no longer owns the task. A completion slot
/// holds one set; so does an operation on a held task, for its own operation. Whoever holds
/// them keeps the inventory and the memory they come from alive until the release.
pub(crate) struct TaskDescs([Cell<HeldDesc>; 2]);

impl TaskDescs {
    pub(crate) const fn new() -> TaskDescs {
        TaskDescs([Cell::new(HeldDesc::None), Cell::new(HeldDesc::None)])
    }

    /// Holds descriptor `d` as the task's `i`-th (`i` < 2).
    #[inline(always)]
    pub(super) fn hold(&self, i: usize, d: HeldDesc) {
        let cell = &self.0[i];
        debug_assert!(matches!(cell.get(), HeldDesc::None), "descriptor {i} taken twice");
        cell.set(d);
    }

    /// Gives the descriptors back (to their inventory, or to the cache that lent them). Only
    /// once DOCA no longer owns the task that used them (completed, never submitted, or
    /// freed).
    #[inline]
    pub(crate) fn release(&self) {
        for d in &self.0 {
            // Read before writing: most operations hold fewer than two descriptors (a sync
            // event's none), and an empty cell is left as it is.
            match d.get() {
                HeldDesc::None => {}
                HeldDesc::Owned(b) => {
                    d.set(HeldDesc::None);
                    // SAFETY: a descriptor an allocation took from a live inventory (its holder
                    // keeps the inventory alive until this release); DOCA no longer owns the
                    // task that referenced it (the caller's contract); its reference is
                    // dropped once (the cell was emptied just before).
                    unsafe { sys::doca_buf_dec_refcount(b, std::ptr::null_mut()) };
                }
                HeldDesc::Lent(flag) => {
                    d.set(HeldDesc::None);
                    // SAFETY: the flag lives in the descriptor cache of memory the holder keeps
                    // alive until this release.
                    unsafe { (*flag).set(false) };
                }
            }
        }
    }
}
