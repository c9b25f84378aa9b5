//! [`TaskDescs`]: the `doca_buf` descriptors one task holds, given back when the task is over
//! or, for a held record, parked for its next operation.

use std::cell::Cell;

use super::cache::{Loan, Parked};
use super::Desc;
use crate::sys;

/// A descriptor a task holds.
#[derive(Clone, Copy, Debug)]
pub(super) enum HeldDesc {
    None,
    /// A reference taken from an inventory for this task: dropped (`doca_buf_dec_refcount`)
    /// when the task is over.
    Owned(*mut sys::doca_buf),
    /// An entry lent by a registration's cache: given back when the task is over, and the
    /// cache keeps the descriptor for the next operation on the same bytes.
    Lent(Loan),
    /// An entry a held record keeps between its operations, its task still pointing at it:
    /// given back when an operation of the record uses other bytes, or fails, or the record
    /// goes; or taken back by its cache, which then empties this cell (see `DescCache`).
    Parked(Parked),
}

/// The descriptors (at most two) of one task: taken by its allocation ([`Descs`](super::Descs))
/// and given back as soon as DOCA no longer owns the task ([`release`](TaskDescs::release)),
/// except, in a held record ([`parking`](TaskDescs::parking)), the loans of its cache, which
/// stay parked after a completion ([`release_unparked`](TaskDescs::release_unparked)) while
/// the record's task keeps pointing at them. A completion slot holds one set; so does a held
/// record, for its operations. Whoever holds them keeps the inventory and the memory they
/// come from alive until the task is over; a parked loan's cache empties its cell before it
/// goes (or before it lends the entry to another operation), so a parked loan always names
/// a live entry. A parking set therefore never moves once it parked a loan (a held record
/// lives in its group's boxed slice, in an `Rc`).
pub(crate) struct TaskDescs {
    descs: [Cell<HeldDesc>; 2],
    /// A held record's: cache loans are parked at the completion rather than given back.
    parks: bool,
}

impl TaskDescs {
    /// A slot's descriptors: all given back when the task is over.
    pub(crate) const fn new() -> TaskDescs {
        TaskDescs { descs: [Cell::new(HeldDesc::None), Cell::new(HeldDesc::None)], parks: false }
    }

    /// A held record's descriptors: its cache loans are parked for its next operation (see
    /// the type's docs). The record's task must point at the descriptors parked here for as
    /// long as they are: every operation either finds them all again and leaves the task as
    /// it is ([`Descs::changed`](super::Descs::changed)), or points the task at the new ones
    /// or releases them.
    pub(crate) const fn parking() -> TaskDescs {
        TaskDescs { descs: [Cell::new(HeldDesc::None), Cell::new(HeldDesc::None)], parks: true }
    }

    /// Holds descriptor `d` as the task's `i`-th (`i` < 2).
    #[inline(always)]
    pub(super) fn hold(&self, i: usize, d: HeldDesc) {
        let cell = &self.descs[i];
        debug_assert!(matches!(cell.get(), HeldDesc::None), "descriptor {i} taken twice");
        cell.set(d);
    }

    /// Holds the loan `loan` as the task's `i`-th: lent, or parked in a held record.
    #[inline(always)]
    pub(super) fn hold_loan(&self, i: usize, loan: Loan) {
        let d = if self.parks {
            // SAFETY: the cache that just lent `loan` is alive (the operation keeps its
            // memory); the cell holds the loan from here on, and does not move (see the
            // type's docs).
            HeldDesc::Parked(unsafe { loan.park(&self.descs[i]) })
        } else {
            HeldDesc::Lent(loan)
        };
        self.hold(i, d);
    }

    /// The descriptor parked at `i`, readied for a task with `data_len` bytes of data, when
    /// it is over exactly `d`; otherwise `None`, and the one parked there, if any, is given
    /// back. Only for the record's next operation, before its task is submitted.
    #[inline(always)]
    pub(super) fn parked_over(&self, i: usize, d: Desc, data_len: usize) -> Option<*mut sys::doca_buf> {
        let cell = &self.descs[i];
        let HeldDesc::Parked(p) = cell.get() else { return None };
        // SAFETY: this cell holds it; the record's task is not in flight (preparing).
        if let Some(b) = unsafe { p.over(d, data_len) } {
            return Some(b);
        }
        self.release_at(i);
        None
    }

    /// Gives the descriptors back (to their inventory, or to the cache that lent them),
    /// parked ones included: the task is over and its next operation, if any, will point it
    /// anew. Only once DOCA no longer owns the task that used them (completed, never
    /// submitted, or freed).
    #[inline]
    pub(crate) fn release(&self) {
        self.release_at(0);
        self.release_at(1);
    }

    /// What a held record's completion gives back: what its operation took from an
    /// inventory; the loans of a cache stay parked (see the type's docs). A slot's gives
    /// everything back ([`release`](TaskDescs::release)).
    #[inline]
    pub(crate) fn release_unparked(&self) {
        for i in 0..2 {
            match self.descs[i].get() {
                // SAFETY: this cell holds it; the task is over (the caller's contract).
                HeldDesc::Parked(p) => unsafe { p.task_over() },
                _ => self.release_at(i),
            }
        }
    }

    /// Gives descriptor `i` back, whatever it is. Only once DOCA no longer owns the task.
    #[inline(always)]
    pub(super) fn release_at(&self, i: usize) {
        let d = &self.descs[i];
        // Read before writing: most operations hold fewer than two descriptors (a sync event's
        // none), and an empty cell is left as it is.
        match d.get() {
            HeldDesc::None => {}
            HeldDesc::Owned(b) => {
                d.set(HeldDesc::None);
                // SAFETY: a descriptor an allocation took from a live inventory (its holder
                // keeps the inventory alive until this release); DOCA no longer owns the task
                // that referenced it (the caller's contract); its reference is dropped once
                // (the cell was emptied just before).
                unsafe { sys::doca_buf_dec_refcount(b, std::ptr::null_mut()) };
            }
            HeldDesc::Lent(loan) => {
                d.set(HeldDesc::None);
                // SAFETY: the loan's cache lives in memory the holder keeps alive until this
                // release; no task in flight uses it (the caller's contract).
                unsafe { loan.give_back() };
            }
            HeldDesc::Parked(p) => {
                d.set(HeldDesc::None);
                // SAFETY: this cell held it until just now (so its entry is alive); the
                // record's task is not in flight (the caller's contract).
                unsafe { p.unpark() };
            }
        }
    }
}

impl Drop for TaskDescs {
    fn drop(&mut self) {
        // A held record that goes gives its parked loans back (its task is not in flight: a
        // record in flight keeps its group alive). Nothing else is left when a holder goes:
        // the rest is given back when each task is over.
        for i in 0..2 {
            if matches!(self.descs[i].get(), HeldDesc::Parked(_)) {
                self.release_at(i);
            }
        }
    }
}
