//! Buffer lists: `doca_buf_chain_list` and the functions that walk and split a chain.
//!
//! A list is singly linked through `doca_buf::next`. Its first element is the list as far as
//! the user and the tasks are concerned: it carries the list's reference count, and a task
//! given it reads or writes every element in order. The other elements are *chained*: their
//! count stays 1, `inc_refcount`/`dec_refcount` refuse them (`NOT_PERMITTED`), and they come
//! back to their inventories with the first element (`doca_buf::release_list`).
//!
//! Lists cannot form cycles: only a first element with a count of 1 is appended, and it is
//! never the list it is appended to.
//!
//! Errors beyond what DOCA documents (decisions): a `list1` that is not the first element of
//! its list, or a `list2` that is, or is `list1` itself, is `INVALID_VALUE`;
//! `doca_buf_chain_list_tail` checks that its tail ends a list (O(1)), not that it ends
//! *that* list, which is the caller's contract as in DOCA.

use std::ptr;

use super::{buf_ref, doca_buf};
use crate::ffi::{guard_err, out};
use crate::types::*;

impl doca_buf {
    /// The elements of the list that starts at this buffer, in order (this buffer first).
    pub(crate) fn elements(&self) -> Elements<'_> {
        Elements { next: self, _list: std::marker::PhantomData }
    }

    /// Whether this buffer is a list of one (the common case, which tasks take without a walk).
    #[inline(always)]
    pub(crate) fn is_single(&self) -> bool {
        self.next.get().is_null()
    }

    /// Whether this buffer follows another in a list (so it is not a list of its own).
    #[inline(always)]
    pub(crate) fn is_chained(&self) -> bool {
        self.chained.get()
    }

    /// Whether the list that starts here has more than `max` elements (walks at most `max + 1`).
    pub(crate) fn list_longer_than(&self, max: u32) -> bool {
        self.elements().nth(max as usize).is_some()
    }

    fn last(&self) -> &doca_buf {
        self.elements().last().unwrap_or(self)
    }
}

/// Where a task's bytes come from and go to in a list: the spans of a source list's payloads,
/// and of a destination list's room, in element order. One home for the gather/scatter rule
/// that DMA and RDMA share: a source is its elements' payloads one after the other; a
/// destination fills the room after each element's payload before the next element's.
impl doca_buf {
    /// The bytes a task takes from the list that starts here as its source: the sum of its
    /// elements' payloads (data_len). A list of one is answered without a walk.
    #[inline(always)]
    pub(crate) fn payload_len(&self) -> usize {
        if self.is_single() {
            self.data().1
        } else {
            self.list_data_len()
        }
    }

    /// The bytes a task may write into the list that starts here as its destination: the sum
    /// of the room after each element's payload. A list of one is answered without a walk.
    #[inline(always)]
    pub(crate) fn room_len(&self) -> usize {
        if self.is_single() {
            self.tail_space().1
        } else {
            self.list_room()
        }
    }

    // The walks behind the two above, kept out of line so the single-buffer paths of the
    // tasks stay as short as they were before lists.
    #[cold]
    #[inline(never)]
    fn list_data_len(&self) -> usize {
        self.elements().map(|b| b.data().1).sum()
    }

    #[cold]
    #[inline(never)]
    fn list_room(&self) -> usize {
        self.elements().map(|b| b.tail_space().1).sum()
    }

    /// (element, address, length) of each non-empty payload of the list, in order.
    pub(crate) fn payload_spans(&self) -> impl Iterator<Item = (&doca_buf, usize, usize)> {
        self.elements().map(|b| (b, b.data().0, b.data().1)).filter(|s| s.2 > 0)
    }

    /// (element, address, length) of the room that bytes `[skip, skip + n)` of a write into
    /// the list occupy, in order; fewer than `n` bytes in all when the list has less room
    /// (the caller checks [`room_len`](doca_buf::room_len) first).
    pub(crate) fn room_spans(&self, skip: usize, n: usize) -> impl Iterator<Item = (&doca_buf, usize, usize)> {
        let (mut skip, mut left) = (skip, n);
        self.elements().filter_map(move |b| {
            let (at, room) = b.tail_space();
            let past = skip.min(room);
            skip -= past;
            let take = (room - past).min(left);
            left -= take;
            (take > 0).then_some((b, at + past, take))
        })
    }

    /// Grows the data_len of the list's elements by the `n` bytes written into them in the
    /// order of [`room_spans`](doca_buf::room_spans) (within the room checked before writing).
    pub(crate) fn appended_to_list(&self, n: usize) {
        // Each element's span is computed before its data_len grows, and never looked at again.
        let mut left = n;
        for (b, _, take) in self.room_spans(0, n) {
            b.appended(take);
            left -= take;
        }
        debug_assert_eq!(left, 0, "more bytes than the list's room");
    }
}

/// Iterator over the elements of a list ([`doca_buf::elements`]).
pub(crate) struct Elements<'a> {
    next: *const doca_buf,
    _list: std::marker::PhantomData<&'a doca_buf>,
}

impl<'a> Iterator for Elements<'a> {
    type Item = &'a doca_buf;
    fn next(&mut self) -> Option<&'a doca_buf> {
        // SAFETY: NULL or an element of the list borrowed for 'a (see `next_ref`).
        let b = unsafe { self.next.as_ref() }?;
        self.next = b.next.get();
        Some(b)
    }
}

/// Writes a boolean answer as DOCA's `uint8_t` 0/1.
///
/// # Safety
/// `dst` writable or NULL (refused).
unsafe fn out_flag(dst: *mut u8, v: bool) -> Result<(), doca_error_t> {
    // SAFETY: forwarded.
    unsafe { out(dst, u8::from(v)) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_get_next_in_list(buf: *mut doca_buf, next_buf: *mut *mut doca_buf) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes a buffer of this provider (or NULL, refused).
        let b = unsafe { buf_ref(buf) }?;
        // SAFETY: `out` checks NULL; writable by the caller's contract.
        unsafe { out(next_buf, b.next.get() as *mut doca_buf) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_get_last_in_list(buf: *mut doca_buf, last_buf: *mut *mut doca_buf) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as above.
        let b = unsafe { buf_ref(buf) }?;
        // SAFETY: as above.
        unsafe { out(last_buf, b.last() as *const doca_buf as *mut doca_buf) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_is_last_in_list(buf: *const doca_buf, is_last: *mut u8) -> doca_error_t {
    // SAFETY: as above.
    guard_err(|| unsafe { out_flag(is_last, buf_ref(buf)?.is_single()) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_is_first_in_list(buf: *const doca_buf, is_first: *mut u8) -> doca_error_t {
    // SAFETY: as above.
    guard_err(|| unsafe { out_flag(is_first, !buf_ref(buf)?.is_chained()) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_is_in_list(buf: *const doca_buf, is_in_list: *mut u8) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as above.
        let b = unsafe { buf_ref(buf) }?;
        // SAFETY: as above.
        unsafe { out_flag(is_in_list, b.is_chained() || !b.is_single()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_get_list_len(buf: *const doca_buf, num_elements: *mut u32) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as above.
        let b = unsafe { buf_ref(buf) }?;
        if b.is_chained() {
            return Err(DOCA_ERROR_NOT_PERMITTED);
        }
        let n = u32::try_from(b.elements().count()).unwrap_or(u32::MAX);
        // SAFETY: as above.
        unsafe { out(num_elements, n) }
    })
}

/// The checks of both chain calls; the two first elements, with `list2` ready to append.
///
/// # Safety
/// Buffers of this provider or NULL (refused).
unsafe fn chain_args<'a>(
    list1: *mut doca_buf,
    list2: *mut doca_buf,
) -> Result<(&'a doca_buf, &'a doca_buf), doca_error_t> {
    // SAFETY: forwarded.
    let (l1, l2) = unsafe { (buf_ref(list1)?, buf_ref(list2)?) };
    if l1.is_chained() || l2.is_chained() || ptr::eq(l1, l2) {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    if l2.refcount.get() != 1 {
        return Err(DOCA_ERROR_NOT_PERMITTED);
    }
    Ok((l1, l2))
}

/// Links `l2` (a first element with count 1, checked) after `tail`, the last element of a
/// list that is not `l2`'s.
fn append(tail: &doca_buf, l2: &doca_buf) {
    debug_assert!(tail.is_single());
    tail.next.set(l2);
    l2.chained.set(true);
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_chain_list(list1: *mut doca_buf, list2: *mut doca_buf) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes buffers of this provider (or NULL, refused).
        let (l1, l2) = unsafe { chain_args(list1, list2) }?;
        append(l1.last(), l2);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_chain_list_tail(
    list1_head: *mut doca_buf,
    list1_tail: *mut doca_buf,
    list2: *mut doca_buf,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as above.
        let (l1, l2) = unsafe { chain_args(list1_head, list2) }?;
        // SAFETY: as above.
        let tail = unsafe { buf_ref(list1_tail) }?;
        // The tail must end a list, and be `l1` or follow another element (so it is not `l2`,
        // which is neither). That it ends *l1's* list is not checked (a walk is what this call
        // exists to avoid).
        if !tail.is_single() || (!ptr::eq(tail, l1) && !tail.is_chained()) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        append(tail, l2);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_buf_unchain_list(list1: *mut doca_buf, list2: *mut doca_buf) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as above.
        let (l1, l2) = unsafe { (buf_ref(list1)?, buf_ref(list2)?) };
        let before = l1.elements().find(|b| ptr::eq(b.next.get(), l2)).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        before.next.set(ptr::null());
        l2.chained.set(false);
        // A chained element's count is 1 throughout, so the new list starts at 1 (as DOCA says).
        debug_assert_eq!(l2.refcount.get(), 1);
        Ok(())
    })
}
