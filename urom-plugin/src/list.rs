//! UCX's intrusive list (`ucs_list_link`), as the plugin ABI passes commands and
//! notifications.
//!
//! A list is a head link; entries embed a link (at offset 0 in the ABI's descriptors). The
//! list is circular and doubly linked: an empty head points to itself both ways. The list
//! owns nothing: whoever allocated an entry frees it after taking it off the list. These
//! functions are `unsafe` because they follow raw pointers that C code hands over; each
//! states what it needs.

use crate::abi::ucs_list_link;
use core::ptr::{self, NonNull};

/// Makes `head` an empty list.
///
/// # Safety
/// `head` points to a writable `ucs_list_link` (its old contents are ignored).
pub unsafe fn init(head: *mut ucs_list_link) {
    // SAFETY: caller contract: `head` is writable.
    unsafe {
        (*head).prev = head;
        (*head).next = head;
    }
}

/// `true` when the list has no entries. A zeroed head (NULL links, as `calloc` leaves it)
/// counts as empty, so a worker that forgot to initialise a list is not followed into NULL.
///
/// # Safety
/// `head` points to a readable `ucs_list_link` that is either zeroed or a list head.
pub unsafe fn is_empty(head: *const ucs_list_link) -> bool {
    // SAFETY: caller contract: `head` is readable.
    let next = unsafe { (*head).next };
    next.is_null() || ptr::eq(next, head)
}

/// Appends `link` at the tail of the list `head`. A zeroed head is initialised first.
///
/// # Safety
/// `head` is a list head (or zeroed) whose entries are all live; `link` is a writable link
/// that is on no list and stays valid while it is on this one.
pub unsafe fn push_back(head: *mut ucs_list_link, link: *mut ucs_list_link) {
    // SAFETY: caller contract: `head`, its entries and `link` are valid; a circular list's
    // tail is `head.prev`, whose `next` is updated to the new entry.
    unsafe {
        if (*head).next.is_null() {
            init(head);
        }
        let tail = (*head).prev;
        (*link).prev = tail;
        (*link).next = head;
        (*tail).next = link;
        (*head).prev = link;
    }
}

/// Unlinks `link` from whatever list it is on, leaving it pointing to itself.
///
/// # Safety
/// `link` is an entry of a well-formed list whose neighbours are live.
pub unsafe fn remove(link: *mut ucs_list_link) {
    // SAFETY: caller contract: the neighbours are live links of the same list.
    unsafe {
        let (prev, next) = ((*link).prev, (*link).next);
        (*prev).next = next;
        (*next).prev = prev;
        (*link).prev = link;
        (*link).next = link;
    }
}

/// Takes the first entry off the list, or `None` when it is empty.
///
/// # Safety
/// As [`is_empty`] and [`remove`]: `head` is a list head (or zeroed) whose entries are live.
pub unsafe fn pop_front(head: *mut ucs_list_link) -> Option<NonNull<ucs_list_link>> {
    // SAFETY: caller contract; a non-empty list's `head.next` is its first entry.
    unsafe {
        if is_empty(head) {
            return None;
        }
        let first = (*head).next;
        remove(first);
        NonNull::new(first)
    }
}

/// Number of entries, counting at most `limit` (a malformed, non-circular list cannot loop
/// forever).
///
/// # Safety
/// As [`is_empty`]: `head` is a list head (or zeroed) whose entries are live.
pub unsafe fn len(head: *const ucs_list_link, limit: usize) -> usize {
    // SAFETY: caller contract; walking `next` from a live head visits live entries.
    unsafe {
        if is_empty(head) {
            return 0;
        }
        let mut n = 0;
        let mut cur = (*head).next as *const ucs_list_link;
        while !ptr::eq(cur, head) && n < limit {
            n += 1;
            cur = (*cur).next;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Entry {
        link: ucs_list_link,
        value: u32,
    }

    fn new_link() -> ucs_list_link {
        ucs_list_link { prev: ptr::null_mut(), next: ptr::null_mut() }
    }

    #[test]
    fn fifo_order_and_self_links() {
        let mut head = new_link();
        let mut entries: Vec<Box<Entry>> = (0..4).map(|value| Box::new(Entry { link: new_link(), value })).collect();
        let h: *mut ucs_list_link = &mut head;
        // SAFETY: head and the boxed entries outlive the list; each entry is pushed once.
        unsafe {
            init(h);
            assert!(is_empty(h));
            assert_eq!((*h).next, h);
            assert_eq!((*h).prev, h);
            for e in entries.iter_mut() {
                push_back(h, &mut e.link);
            }
            assert_eq!(len(h, 100), 4);
            for want in 0..4 {
                let got = pop_front(h).expect("entry");
                let e = got.as_ptr().cast::<Entry>();
                assert_eq!((*e).value, want);
                assert_eq!((*got.as_ptr()).next, got.as_ptr(), "popped entry points to itself");
            }
            assert!(pop_front(h).is_none());
            assert!(is_empty(h));
            assert_eq!((*h).next, h);
            assert_eq!((*h).prev, h);
        }
    }

    #[test]
    fn remove_from_the_middle_keeps_the_ring() {
        let mut head = new_link();
        let mut entries: Vec<Box<Entry>> = (0..3).map(|value| Box::new(Entry { link: new_link(), value })).collect();
        let h: *mut ucs_list_link = &mut head;
        // SAFETY: as above.
        unsafe {
            init(h);
            for e in entries.iter_mut() {
                push_back(h, &mut e.link);
            }
            remove(&mut entries[1].link);
            assert_eq!(len(h, 100), 2);
            // Both directions still close the ring.
            assert_eq!((*(*h).next).next, (*h).prev);
            assert_eq!((*(*h).prev).prev, (*h).next);
            let a = pop_front(h).unwrap().as_ptr().cast::<Entry>();
            let b = pop_front(h).unwrap().as_ptr().cast::<Entry>();
            assert_eq!(((*a).value, (*b).value), (0, 2));
            assert!(is_empty(h));
        }
    }

    #[test]
    fn zeroed_head_is_empty_and_usable() {
        let mut head = new_link();
        let mut e = Box::new(Entry { link: new_link(), value: 7 });
        let h: *mut ucs_list_link = &mut head;
        // SAFETY: head and entry outlive the list.
        unsafe {
            assert!(is_empty(h));
            assert!(pop_front(h).is_none());
            assert_eq!(len(h, 10), 0);
            push_back(h, &mut e.link);
            assert_eq!(len(h, 10), 1);
            assert_eq!(pop_front(h).unwrap().as_ptr(), &mut e.link as *mut _);
        }
    }

    #[test]
    fn len_is_bounded_on_a_broken_ring() {
        // A "list" whose only entry points to itself instead of back to the head.
        let mut head = new_link();
        let mut e = Box::new(Entry { link: new_link(), value: 0 });
        let ep: *mut ucs_list_link = &mut e.link;
        head.next = ep;
        head.prev = ep;
        e.link.next = ep;
        e.link.prev = ep;
        // SAFETY: all links point to live memory; the bound stops the walk.
        assert_eq!(unsafe { len(&head, 5) }, 5);
    }
}
